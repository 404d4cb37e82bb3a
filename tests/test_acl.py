"""Least privilege (issue 53): a crawl per backend, the batch path, the frontier, the
janitor and the commands run as a Redis user granted only the ACL line
``scrapy_dedup_suite.server.privileges`` writes for them (the line docs/servers.md shows), and
do what they do as the default user; a command withheld is one line naming it and the
``ACL SETUSER`` to run, whose advice, run as given, is enough."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.backends.compact_growing import GrowingCompactBackend
from scrapy_dedup_suite.backends.hash_growing import GrowingHashBackend
from scrapy_dedup_suite.backends.keys import spider_key_patterns as spider_keys
from scrapy_dedup_suite.server.privileges import BY_NAME, OPTIONAL, acl_line, commands_of

from .helpers import ROOT, crawl, settings_for
from .test_messages import SPIDER, scrapy_cmd

pytestmark = pytest.mark.single_server

PASSWORD = "acl-test-password"
BATCHED = {"SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}}


@pytest.fixture
def grant(redis_server, server) -> Iterator[Callable[..., str]]:
    """Makes the user ``crawler`` with the ACL line of the features given (less the
    commands ``without``), on the keys of spider ``spider``; its URL."""

    def make(*features: str, without: tuple[str, ...] = (), spider: str = "site") -> str:
        line = acl_line(*features, password=PASSWORD, keys=spider_keys(spider))
        words = [w for w in line.split()[2:] if w.lstrip("+") not in without]
        server.execute_command("ACL", "DELUSER", "crawler")
        server.execute_command("ACL", "SETUSER", *words)
        # The log outlives FLUSHALL and is the whole server's: what an earlier test
        # withheld on purpose must not be read as this one's refusal.
        server.execute_command("ACL", "LOG", "RESET")
        return f"redis://crawler:{PASSWORD}@127.0.0.1:{redis_server.port}/0"

    yield make
    server.execute_command("ACL", "DELUSER", "crawler")


def test_the_acl_lines_name_no_dangerous_command_and_every_feature(server):
    """No command of any line is in @dangerous (what the package only reads where
    allowed, OPTIONAL, is never granted); every name is one the server knows, but the
    field expiry's and the Bloom module's, on servers that have them."""
    dangerous = {_text(c) for c in server.execute_command("ACL", "CAT", "dangerous")}
    every = set(commands_of(*BY_NAME))
    assert not every & dangerous, every & dangerous
    newer = {"hpexpire", "hpexpiretime", "bf.insert", "bf.exists", "bf.card", "bf.info"}
    known = {_text(c) for c in server.command_list()}
    assert {c.split("|")[0] for c in every} - newer <= known


def test_the_documentation_shows_the_table_and_lines_the_code_writes():
    from scrapy_dedup_suite.server.privileges import markdown_table

    page = (ROOT / "docs" / "servers.md").read_text()
    assert markdown_table() in page
    keys = spider_keys("myspider")
    assert acl_line("scrapy-redis", "compact", keys=keys) in page
    assert acl_line("frontier", "compact", keys=keys) in page


ROWS = [
    ("set", "scrapy-redis", ("scrapy-redis", "set"), {}),
    ("hash", "scrapy-redis", ("scrapy-redis", "hash"), {}),
    ("compact", "scrapy-redis", ("scrapy-redis", "compact"), {}),
    ("bloom", "scrapy-redis", ("scrapy-redis", "bloom"), {}),
    ("bloom+scaling", "scrapy-redis", ("scrapy-redis", "bloom"), {}),
    ("windowed-bloom", "scrapy-redis", ("scrapy-redis", "windowed-bloom"), {}),
    ("compact", "scrapy-redis", ("scrapy-redis", "compact"), BATCHED),
    ("compact", "frontier", ("frontier", "compact"), BATCHED),
    ("hash+growing", "scrapy-redis", ("scrapy-redis", "hash"), BATCHED),
    ("hash+growing", "frontier", ("frontier", "hash"), {}),
    ("set", "frontier", ("frontier", "set"), {}),
]


@pytest.mark.parametrize(
    ("backend", "scheduler", "features", "extra"),
    ROWS,
    ids=[f"{r[0]}-{r[1]}{'-batched' if r[3] else ''}" for r in ROWS],
)
def test_a_crawl_as_a_user_granted_its_line_does_what_it_does_as_the_default_user(
    tmp_path, site, redis_settings, server, grant, backend, scheduler, features, extra
):
    """The same crawl twice, on a flushed server: as the default user, then as
    ``crawler`` granted the line of its backend and scheduler. Every page once, the
    same counts, and nothing refused that is granted."""
    settings = settings_for(redis_settings, backend, scheduler, **extra)
    mine = crawl(tmp_path, site, settings, "default")["stats"]
    server.flushall()
    url = grant(*features)
    theirs = crawl(tmp_path, site, {**settings, "REDIS_URL": url}, "granted")["stats"]
    for name in ("downloader/response_count", "dedup/added", "dedup/filtered", "finish_reason"):
        assert theirs.get(name) == mine.get(name), name
    assert mine["downloader/response_count"] == site.pages
    log = [dict(_pairs(e)) for e in server.execute_command("ACL", "LOG")]
    refused = [e for e in log if e["username"] == "crawler"]
    said = {e["object"] for e in refused}
    assert said <= {"info", "config|get", "role", "memory|usage", "object|encoding"}, said


@pytest.mark.parametrize("scheduler", ["scrapy-redis", "frontier"])
def test_a_growing_compact_filter_splits_its_buckets_as_a_user_granted_compact_s_line(
    tmp_path, site, redis_settings, server, grant, scheduler
):
    """DEDUP_COMPACT_CAPACITY = 0, on a server whose listpacks hold 16 fields: the
    filter, opened first by the default user (``crawler`` may not read CONFIG), has a
    load of 2 a bucket; the crawl splits every group, as ``crawler`` granted the lines
    of compact and its scheduler, with nothing refused but what is only read where
    allowed."""
    settings = settings_for(
        redis_settings, "compact+growing", scheduler, SCHEDULER_PERSIST=True, **BATCHED
    )
    before = server.config_get("hash-max-listpack-entries")["hash-max-listpack-entries"]
    server.config_set("hash-max-listpack-entries", 16)
    try:
        build_backend(Settings(settings), "site", server=server).open()
        url = grant(scheduler, "compact")
        result = crawl(tmp_path, site, {**settings, "REDIS_URL": url}, "granted")
    finally:
        server.config_set("hash-max-listpack-entries", before)
    stats = result["stats"]
    twice = sorted(page for page, n in site.downloads.items() if n > 1)
    assert stats["downloader/response_count"] == site.pages, (twice, stats, result["log"][-4000:])
    levels = [int(server.get(k).split()[0]) for k in server.scan_iter("*:grow")]
    assert len(levels) == 4 and min(levels) >= 3  # (its groups split past 8 buckets each)
    refused = [dict(_pairs(e)) for e in server.execute_command("ACL", "LOG")]
    said = {e["object"] for e in refused if e["username"] == "crawler"}
    assert said <= {"info", "config|get", "role", "memory|usage", "object|encoding"}, said


def _pairs(entry):
    """An ACL LOG entry as (name, value) text pairs (RESP2 lists, RESP3 maps)."""
    items = entry.items() if isinstance(entry, dict) else zip(entry[::2], entry[1::2])
    return [(_text(k), _text(v)) for k, v in items]


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def command(name: str, url: str, *args: str, settings: dict | None = None):
    given = {**(settings or {}), "REDIS_URL": url}
    options = [arg for k, v in given.items() for arg in ("-s", f"{k}={_setting(v)}")]
    return subprocess.run(
        [sys.executable, "-m", "scrapy", name, *args, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _setting(value):
    return json.dumps(value) if isinstance(value, (dict, list)) else value


@pytest.mark.parametrize("backend", ["hash", "hash+growing"])
def test_the_janitor_dedup_info_and_forget_run_as_a_user_granted_their_lines(
    tmp_path, site, redis_settings, server, grant, backend
):
    """After a crawl that persisted its hash filter (sized, or growing):
    ``dedup-janitor --once``, ``dedup-info`` and ``dedup-forget`` as users granted the
    hash line and their own (exit 0; dedup-info with the same counts as the default
    user's run)."""
    settings = settings_for(redis_settings, backend, "scrapy-redis", SCHEDULER_PERSIST=True)
    crawl(tmp_path, site, settings, "first")
    admin = redis_settings["REDIS_URL"]
    for feature, args in (
        ("janitor", ["dedup-janitor", "--spider", "site", "--once"]),
        ("dedup-info", ["dedup-info", "--spider", "site"]),
        ("dedup-forget", ["dedup-forget", "--spider", "site", f"{site.url}/page/3"]),
    ):
        url = grant("hash", feature)
        theirs = command(args[0], url, *args[1:], settings=settings)
        assert theirs.returncode == 0, theirs.stderr[-2000:]
        assert "may not run" not in theirs.stdout + theirs.stderr
        if feature == "dedup-info":
            mine = command(args[0], admin, *args[1:], settings=settings)
            counted = re.findall(r"[\d,]+ fingerprints \(counted\)", mine.stdout)
            assert counted and counted == re.findall(
                r"[\d,]+ fingerprints \(counted\)", theirs.stdout
            ), theirs.stdout


def test_the_frontier_s_commands_and_a_migration_run_as_a_user_granted_their_lines(
    tmp_path, site, redis_settings, server, grant
):
    """dedup-info and frontier-handback of a persisted frontier, migrate-set-to-bloom
    of its set into compact and into hash (the janitor's expiry), and convert-to-growing
    of each, as users granted their lines."""
    settings = settings_for(redis_settings, "set", "frontier", SCHEDULER_PERSIST=True)
    stats = crawl(tmp_path, site, settings, "first")["stats"]
    fingerprints = server.scard("site:dupefilter")
    assert fingerprints == stats["dedup/added"]
    migrate = ["migrate-set-to-bloom", "--spider", "site", "--to"]
    janitor = {**settings, "DEDUP_HASH_FIELD_EXPIRY": False}
    hashed = {**janitor, "DEDUP_BACKEND": "hash"}
    for features, args, given in (
        (("set", "frontier", "dedup-info"), ["dedup-info", "--spider", "site"], settings),
        (("set", "frontier"), ["frontier-handback", "--spider", "site"], settings),
        (("set", "compact", "migration"), [*migrate, "compact"], settings),
        (("compact", "conversion"), ["convert-to-growing", "--spider", "site"], settings),
        (("set", "hash", "migration"), [*migrate, "hash"], janitor),
        (("hash", "conversion"), ["convert-to-growing", "--spider", "site"], hashed),
    ):
        theirs = command(args[0], grant(*features), *args[1:], settings=given)
        assert theirs.returncode == 0, (args, theirs.stdout[-1000:], theirs.stderr[-2000:])
        assert "may not run" not in theirs.stdout + theirs.stderr
    assert server.scard("site:dupefilter") == fingerprints  # (kept: no --delete-source)
    compact = Settings({**settings, "DEDUP_BACKEND": "compact"})
    converted = build_backend(compact, "site", server=server)
    assert isinstance(converted, GrowingCompactBackend) and converted.count() == fingerprints
    grows = build_backend(Settings(hashed), "site", server=server)
    assert isinstance(grows, GrowingHashBackend) and grows.count() == fingerprints


def runspider(tmp_path, url: str, scheduler: str, backend: str):
    (tmp_path / "one.py").write_text(SPIDER)
    return scrapy_cmd(
        "runspider", "one.py",
        "-s", "ADDONS=" + json.dumps({"scrapy_dedup_suite.Addon": 300}),
        "-s", f"SCHEDULER={scheduler}",
        "-s", f"REDIS_URL={url}",
        "-s", f"DEDUP_BACKEND={backend}",
        "-s", "TELNETCONSOLE_ENABLED=False",
        cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("scheduler", "features", "withheld"),
    [
        ("scrapy_redis.scheduler.Scheduler", ("scrapy-redis", "bloom"), "setbit"),
        ("scrapy_redis.scheduler.Scheduler", ("scrapy-redis", "bloom"), "evalsha"),
        ("scrapy_dedup_suite.frontier.scheduler.Scheduler", ("frontier", "bloom"), "zrangebyscore"),
        ("scrapy_dedup_suite.frontier.scheduler.Scheduler", ("frontier", "bloom"), "script|load"),
    ],
)
def test_a_command_withheld_is_one_line_naming_it_and_its_advice_is_enough(
    tmp_path, server, grant, scheduler, features, withheld
):
    """A crawl as a user whose line lacks one command: one ERROR naming the command
    and the ACL SETUSER to run, no traceback; that line run as given, the same crawl
    goes through (before: Scrapy's tracebacks around redis-py's error)."""
    url = grant(*features, without=(withheld,), spider="one")
    out = runspider(tmp_path, url, scheduler, "bloom")
    log = out.stdout + out.stderr
    assert "Traceback" not in log, log[-4000:]
    said = [line for line in log.splitlines() if "may not run" in line]
    name = withheld.upper().replace("|", " ")
    assert len(said) == 1 and f"may not run {name}" in said[0], log[-4000:]
    advice = said[0].split("grant it (", 1)[1].split(")", 1)[0]
    assert advice == f"ACL SETUSER crawler +{withheld}"
    server.execute_command(*advice.split())
    server.flushall()
    again = runspider(tmp_path, url, scheduler, "bloom")
    assert "may not run" not in again.stdout + again.stderr, again.stderr[-3000:]
    assert "'finish_reason': 'finished'" in again.stdout + again.stderr


def test_a_command_withheld_from_dedup_info_is_one_line_and_exit_1(server, grant, redis_settings):
    url = grant("compact", "dedup-info", without=("type",))
    out = command("dedup-info", url, "--spider", "site", settings={"DEDUP_BACKEND": "compact"})
    assert out.returncode == 1, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "may not run TYPE" in lines[0], out.stderr
    assert "ACL SETUSER crawler +type" in lines[0]


def test_the_metrics_read_the_queue_as_a_user_granted_their_line(server, grant, redis_settings):
    """DedupMetrics (issue 56) as a user granted the frontier's, the backend's and the
    metrics' lines only: the scrape reads the queue (metrics_redis_up 1), and the server
    logged no refusal."""
    from .test_metrics import metered, samples, scrape, value

    url = grant("frontier", "compact", "metrics", spider="metered")
    scheduler, ext = metered({**redis_settings, "REDIS_URL": url})
    try:
        scheduler.queue.push(scheduler.queue.shards[0], [(0, b"\x01 parse  http://x.test/")])
        found = samples(scrape(ext.httpd.server_address[1]))
        assert value(found, "scrapy_dedup_metrics_redis_up") == 1
        assert value(found, "scrapy_dedup_frontier_waiting_requests") == 1
        assert value(found, "scrapy_dedup_frontier_memory_bytes") > 0
    finally:
        ext.spider_closed(scheduler.spider)
        scheduler.close("finished")
    log = [dict(_pairs(e)) for e in server.execute_command("ACL", "LOG")]
    said = {e["object"] for e in log if e["username"] == "crawler"}
    assert said <= set(OPTIONAL) - {"memory|usage"}, said  # (what is read where allowed)
