"""No password is printed (issue 53): every command, and a crawl, run with a URL or
REDIS_PARAMS holding a recognisable password, against a server that answers (an ACL
user with that password) and against one that is gone; nothing they print holds it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

from scrapy_dedup_suite.embedded import free_port

from .servers import SentinelGroup, redis_server_binary
from .test_messages import SPIDER, scrapy_cmd

SECRET = "S3cretPassw0rd53"
USER = "secret-crawler"

COMMANDS = [
    ["dedup-info", "--spider", "s"],
    ["dedup-info", "--spider", "s", "--json"],
    ["dedup-forget", "--spider", "s", "http://example.com/"],
    ["migrate-set-to-bloom", "--spider", "s", "--dry-run"],
    ["dedup-janitor", "--spider", "s", "--once"],
    ["frontier-handback", "--spider", "s", "--dry-run"],
    ["convert-hash-layout", "--spider", "s"],
    ["convert-to-growing", "--spider", "s"],
]

#: Per connection kind, the settings that give the password (for a server's port).
KINDS: dict[str, Callable[[int], list[str]]] = {
    "REDIS_URL": lambda port: [f"REDIS_URL=redis://{USER}:{SECRET}@127.0.0.1:{port}/0"],
    "DEDUP_REDIS_URL": lambda port: [f"DEDUP_REDIS_URL=redis://{USER}:{SECRET}@127.0.0.1:{port}/0"],
    "REDIS_PARAMS": lambda port: [
        f"REDIS_URL=redis://127.0.0.1:{port}/0",
        "REDIS_PARAMS=" + json.dumps({"username": USER, "password": SECRET}),
    ],
}


@pytest.fixture
def acl_user(redis_server) -> Iterator[int]:
    """A user of the suite's server whose password is SECRET: the server's port."""
    client = redis.Redis(port=redis_server.port)
    client.execute_command("ACL", "SETUSER", USER, "on", f">{SECRET}", "~*", "+@all")
    yield redis_server.port
    client.execute_command("ACL", "DELUSER", USER)
    client.close()


@pytest.mark.parametrize(
    ("kind", "live"),
    [("REDIS_URL", True), ("DEDUP_REDIS_URL", True), ("REDIS_PARAMS", True), ("REDIS_URL", False)],
    ids=["REDIS_URL", "DEDUP_REDIS_URL", "REDIS_PARAMS", "REDIS_URL-gone"],
)
def test_no_command_and_no_crawl_prints_the_password(tmp_path, acl_user, kind, live):
    port = acl_user if live else free_port()
    run_everything(tmp_path, [*KINDS[kind](port), "DEDUP_BACKEND=hash"], live)


def run_everything(tmp_path, settings: list[str], live: bool) -> None:
    """Every command and a crawl under the frontier with ``settings``: none prints
    SECRET; live, they ran (dedup-info exits 0, the crawl 0), else said Redis is gone."""
    given = [arg for setting in settings for arg in ("-s", setting)]
    printed = {}
    for command in COMMANDS:
        proc = scrapy_cmd(*command, *given)
        printed[" ".join(command)] = (proc.returncode, proc.stdout + proc.stderr)
    (tmp_path / "one.py").write_text(SPIDER)
    addon = json.dumps({"scrapy_dedup_suite.Addon": 300})
    frontier = "scrapy_dedup_suite.frontier.scheduler.Scheduler"
    proc = scrapy_cmd(
        "runspider", "one.py", *given, "-s", f"ADDONS={addon}", "-s", f"SCHEDULER={frontier}",
        "-s", "TELNETCONSOLE_ENABLED=False", "-s", "LOG_LEVEL=DEBUG", cwd=tmp_path,
    )  # fmt: skip
    printed["crawl"] = (proc.returncode, proc.stdout + proc.stderr)
    for name, (code, out) in printed.items():
        assert SECRET not in out, f"{name} (exit {code}) printed the password:\n{out[-3000:]}"
    # They ran as the user (live), or said the server is gone.
    info = printed["dedup-info --spider s --json"]
    crawl_code, crawl_out = printed["crawl"]
    if live:
        assert info[0] == 0, info[1][-2000:]
        assert crawl_code == 0, crawl_out[-3000:]
    else:  # (the crawl's exit code is Scrapy's: 1 from 2.14, 0 on 2.13)
        assert info[0] != 0, info[1][-2000:]
        assert "Cannot reach" in crawl_out, crawl_out[-3000:]


def add_user(port: int) -> None:
    """The user whose password is SECRET, on the server at ``port``."""
    client = redis.Redis(port=port)
    client.execute_command("ACL", "SETUSER", USER, "on", f">{SECRET}", "~*", "+@all")
    client.close()


@pytest.mark.cluster
@pytest.mark.parametrize("live", [True, False], ids=["live", "gone"])
def test_nothing_prints_a_cluster_node_s_password(tmp_path, request, live):
    """REDIS_URL with the password, DEDUP_REDIS_CLUSTER on: the cluster's nodes (the
    user made on each), or a node that is gone."""
    if live:
        cluster = request.getfixturevalue("redis_cluster")
        for node in cluster.nodes:
            add_user(node.port)
        port = cluster.nodes[0].port
    else:
        port = free_port()
    url = f"REDIS_URL=redis://{USER}:{SECRET}@127.0.0.1:{port}/0"
    run_everything(tmp_path, [url, "DEDUP_REDIS_CLUSTER=True", "DEDUP_BACKEND=hash"], live)


@pytest.mark.parametrize("how", ["live", "url-gone", "params-gone"])
def test_nothing_prints_a_password_given_for_sentinel(tmp_path, how):
    """Sentinel: the primary's password in REDIS_PARAMS (live: the user made on the
    primary and its replica), in a redis+sentinel:// URL, or in
    DEDUP_REDIS_SENTINEL_PARAMS for the sentinels' own connections (sentinels gone)."""
    if how != "live":
        port = free_port()
        run_everything(
            tmp_path,
            [f"DEDUP_REDIS_URL=redis+sentinel://:{SECRET}@127.0.0.1:{port}/mymaster/0"]
            if how == "url-gone"
            else [
                f"DEDUP_REDIS_SENTINELS=127.0.0.1:{port}",
                "DEDUP_REDIS_SENTINEL_PARAMS=" + json.dumps({"password": SECRET}),
            ],
            live=False,
        )
        return
    group = SentinelGroup(redis_server_binary()).start()
    try:
        for server in (group.primary, group.replica):
            assert server is not None
            add_user(server.port)
        settings = [
            f"DEDUP_REDIS_SENTINELS={','.join(group.addresses)}",
            f"DEDUP_REDIS_SENTINEL_SERVICE={group.service}",
            f"REDIS_URL=redis://{USER}:{SECRET}@127.0.0.1:{group.primary.port}/0",
            "REDIS_PARAMS=" + json.dumps({"username": USER, "password": SECRET}),
            "DEDUP_BACKEND=hash",
        ]
        run_everything(tmp_path, settings, live=True)
    finally:
        group.stop()
