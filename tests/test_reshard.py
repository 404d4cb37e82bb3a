"""Resharding a Redis Cluster while a crawl runs loses no page.

A tree site (every page has one inbound link: a request lost is a page lost) is crawled
on a three-master cluster of the test's own while slots that hold the filter's keys
move: the first three onto a master added mid-crawl (its clients have not discovered
it: ASK redirections to an unknown node), the next three between existing masters; each
slot key by key, so the crawl meets slots split between two nodes (TRYAGAIN for a
script whose keys are on both). The untouched crawl downloads every page once; so must
this one (a page may be downloaded twice after a failure, never lost)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import SetBackend
from scrapy_dedup_suite.embedded import EmbeddedCluster
from scrapy_dedup_suite.server.cluster import ask_targets, masters
from scrapy_dedup_suite.server.connection import get_redis

from .conftest import ROWS
from .helpers import SETTINGS_ROWS, crawl, fingerprints
from .reshard import Reshard, owner, slots_of
from .servers import Site, module_args, redis_server_binary, tree_links

PAGES, LINKS = 600, 5

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def cluster() -> Any:
    c = EmbeddedCluster(3, binary=redis_server_binary(), extra_args=module_args()).start()
    yield c
    c.stop()


@pytest.fixture
def tree() -> Any:
    site = Site(pages=PAGES, links=LINKS, linker=tree_links).start()
    yield site
    site.stop()


def plan_for(key_pattern: str) -> Any:
    """Three slots of the filter onto a new master, the next three between masters."""

    def plan(cluster: EmbeddedCluster) -> list[tuple[int, Any]]:
        slots = slots_of(cluster, key_pattern)
        assert slots, f"no key matches {key_pattern!r} yet"
        moves: list[tuple[int, Any]] = [(slot, "new") for slot in slots[:3]]
        for slot in slots[3:6]:
            source = owner(cluster, slot)
            others = [n for n in cluster.nodes[:3] if n is not source]
            moves.append((slot, others[0]))
        return moves

    return plan


def reshard_crawl(
    tmp_path: Path, tree: Site, cluster: EmbeddedCluster, row: str, batched: bool
) -> tuple[Reshard, dict]:
    reshard = Reshard(cluster, plan_for("*site:dupefilter*"), after=20)
    tree.on_hit = lambda page: reshard.step()
    settings: dict[str, Any] = {
        "REDIS_URL": cluster.url,
        "DEDUP_REDIS_CLUSTER": True,
        **SETTINGS_ROWS[row],
        "DEDUP_BLOOM_CAPACITY": 100_000,
        "DEDUP_HASH_SHARDS": 4,
        "SCHEDULER_DUPEFILTER_KEY": "%(spider)s:dupefilter",
    }
    if batched:
        settings["SPIDER_MIDDLEWARES"] = {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}
    result = crawl(tmp_path, tree, settings)
    if reshard.error is not None:
        raise reshard.error
    return reshard, result


@pytest.mark.parametrize("batched", [False, True], ids=["per-request", "batched"])
@pytest.mark.parametrize("row", ROWS)
def test_resharding_during_a_crawl_loses_no_page(tmp_path, tree, cluster, row, batched):
    reshard, result = reshard_crawl(tmp_path, tree, cluster, row, batched)
    # The resharding happened during the crawl, all of it: slots moved to the new
    # master and between the old ones, keys moved one by one.
    assert reshard.done, f"the crawl ended before the resharding did ({reshard.calls} pages)"
    assert len(cluster.nodes) == 4
    targets = {to for _, _, to in reshard.moved}
    assert cluster.nodes[3].port in targets, reshard.moved
    if len(reshard.moved) > 3:
        assert targets - {cluster.nodes[3].port}, reshard.moved
    assert reshard.keys_moved > 0
    # The same pages as the untouched crawl: every page, none more than twice.
    missing = sorted(set(range(PAGES)) - set(tree.downloads))
    assert not missing, f"{len(missing)} page(s) lost: {missing[:20]}\n{result['log'][-3000:]}"
    assert max(tree.downloads.values()) <= 2, tree.downloads.most_common(3)
    assert "Traceback" not in result["log"], result["log"][-3000:]


def test_an_ask_to_a_master_the_client_has_not_discovered_is_followed(cluster):
    """redis-py follows an ASK only to a node of its map, which lists the masters that
    serve slots. To a master added since, the redirection failed inside the client
    (AttributeError) after the connection it had used was handed back to its pool a
    second time, while another thread may have held it: two threads then read each
    other's answers (a batch answered "seen" with another call's answer lost two pages
    of a resharded crawl). The dupefilter's client follows it to the new master."""
    server = get_redis(Settings({"REDIS_URL": cluster.url, "DEDUP_REDIS_CLUSTER": True}))
    key = "{ask-to-a-new-master}:fp"
    server.set(key, "recorded")
    slot = server.keyslot(key)
    reshard = Reshard(cluster, lambda c: [(slot, "new")])
    for _ in range(3):  # a master added, the slot marked migrating, its one key moved
        reshard.step()
    assert reshard.keys_moved == 1 and not reshard.moved and not reshard.done
    known = {node.name for node in server.get_nodes()}
    assert f"127.0.0.1:{cluster.nodes[3].port}" not in known  # the client has not discovered it
    script = "return redis.call('GET', KEYS[1])"
    assert server.execute_command("EVAL", script, 1, key) == b"recorded"
    reshard.finish()
    assert server.execute_command("EVAL", script, 1, key) == b"recorded"
    server.close()


def test_a_script_call_asked_to_a_new_master_runs_there_at_the_first_try(cluster):
    """The new master knows none of the package's scripts, and is not among the masters
    the client lists (it serves no slot yet): reopening after NOSCRIPT loaded them
    everywhere but there, so every call sent there failed twice until the slot was
    assigned (a retry, or a request let through unrecorded). The scripts are loaded on
    the master an ASK names too."""
    server = get_redis(Settings({"REDIS_URL": cluster.url, "DEDUP_REDIS_CLUSTER": True}))
    backend = SetBackend(server, "{script-to-a-new-master}:dupefilter")
    backend.open()
    first, second = fingerprints(2)
    assert backend.check_and_add_many([first]) == [False]
    slot = server.keyslot(backend.key)
    reshard = Reshard(cluster, lambda c: [(slot, "new")])
    for _ in range(3):  # a master added, the slot marked migrating, its one key moved
        reshard.step()
    assert reshard.keys_moved == 1 and not reshard.done
    assert backend.check_and_add_many([first, second]) == [True, False]
    # The new master is among those scripts are loaded on: an extra target while the
    # map lacks it (redis-py < 8.2 looks an ASK's master up by name), or listed by the
    # lookup (8.2 looks it up by host and port, as a MOVED's).
    new = f"127.0.0.1:{cluster.nodes[3].port}"
    targets = [*masters(server), *ask_targets(server)]
    assert new in {f"127.0.0.1:{c.connection_pool.connection_kwargs['port']}" for c in targets}
    reshard.finish()
    assert backend.check_and_add_many([second]) == [True]
    # The map lists it now (MOVED): no longer an extra target, so that a master that
    # leaves the cluster later is not asked for scripts for ever.
    assert ask_targets(server) == []
    server.close()
