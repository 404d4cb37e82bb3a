"""Real crawls under the frontier scheduler, of a tree-shaped site where every page has
exactly one inbound link, so a request lost is a page lost: the frontier downloads
every page, with and without the batch path, and a worker killed with SIGKILL at any
moment loses none (the others, or the next run, fetch its leased pages again)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from .helpers import ROOT, busy_cores, crawl_worker, run_script, settings_for
from .servers import Site, tree_links

ON_CLUSTER = True

BATCHED = {"SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}}


@pytest.fixture(scope="module")
def tree() -> Iterator[Site]:
    site = Site(pages=300, links=5, linker=tree_links).start()
    yield site
    site.stop()


def frontier(redis_settings: dict, backend: str, **extra) -> dict:
    return settings_for(redis_settings, backend, "frontier", **extra)


def crawl(tmp_path, site: Site, settings: dict, name: str) -> dict:
    args = {"site": site.url, "start": [0], "settings": settings}
    return run_script("tests.crawl_cases", args, tmp_path / f"{name}.json")


def worker(tmp_path, site: Site, settings: dict, name: str, kill_at: int = 0, **more):
    """A crawl in its own process (killed with SIGKILL once it parsed ``kill_at`` pages);
    each page it parses is noted at once in ``<name>.notes``; ``more``: more of
    tests.crawl_cases's arguments."""
    if kill_at:
        more.update(close_by="SIGKILL", close_at=kill_at)
    return crawl_worker(tmp_path, site.url, settings, name, **more)


def parsed(tmp_path, name: str) -> list[int]:
    notes = tmp_path / f"{name}.notes"
    lines = notes.read_text().splitlines() if notes.exists() else []
    return [int(line.split()[1]) for line in lines if line.startswith("p ")]


@pytest.mark.parametrize("batched", [False, True], ids=["plain", "batched"])
@pytest.mark.parametrize("backend", ["set", "compact", "hash", "bloom", "windowed-bloom"])
def test_the_frontier_downloads_every_page_once(
    tmp_path, tree, redis_settings, server, backend, batched, topology
):
    if topology == "cluster" and backend in ("hash", "windowed-bloom"):
        pytest.skip("one sharded and one Bloom row are enough on the cluster")
    settings = frontier(redis_settings, backend, **(BATCHED if batched else {}))
    result = crawl(tmp_path, tree, settings, "run")
    assert sorted(result["pages"]) == list(range(tree.pages))
    stats = result["stats"]
    assert stats["frontier/acknowledged"] == stats["frontier/leased"] == tree.pages
    errors = [line for line in result["log"].splitlines() if "scrapy_dedup_suite" in line]
    assert not [line for line in errors if "ERROR" in line or "WARNING" in line], errors
    assert server.keys("*") == []  # SCHEDULER_PERSIST off: the queue and filter are gone


@pytest.mark.single_server
def test_a_persisted_crawl_resumes_where_it_stopped(tmp_path, tree, redis_settings, server):
    """SCHEDULER_PERSIST: a crawl stopped gracefully gives back what it took and did not
    start; the next run crawls the rest, and nothing twice. (The site's host allows
    more at once than the worker leases, so that some wait taken when it stops.)"""
    settings = frontier(
        redis_settings, "compact", SCHEDULER_PERSIST=True, CONCURRENT_REQUESTS_PER_DOMAIN=100
    )
    args = {"site": tree.url, "start": [0], "settings": settings}
    first = run_script(
        "tests.crawl_cases", {**args, "close_by": "stop", "close_at": 40}, tmp_path / "a.json"
    )
    assert len(first["pages"]) < tree.pages
    assert first["stats"]["frontier/released"] >= 1
    held = [key for key in server.scan_iter(match="*:frontier:leases") if server.hlen(key)]
    assert held == []  # (what a lease call in a thread brought, too)
    second = crawl(tmp_path, tree, settings, "b")
    pages = Counter(first["pages"] + second["pages"])
    assert sorted(pages) == list(range(tree.pages))
    assert max(pages.values()) == 1


def wait_for(path, text: str, deadline: float = 60.0) -> None:
    """Until the file at ``path`` holds a line ``text`` (polled; fails past ``deadline``)."""
    end = time.monotonic() + deadline
    while not (path.exists() and text in path.read_text().splitlines()):
        assert time.monotonic() < end, f"{path.name} never said {text!r}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "kill_at, batched, per_host",
    [(1, False, 8), (1, True, 8), (25, False, 8), (25, True, 8), (3, False, 1)],
    ids=["1-plain", "1-batched", "25-plain", "25-batched", "3-one-per-host"],
)
def test_a_killed_worker_loses_no_page_while_another_crawls_on(
    tmp_path, tree, redis_settings, server, batched, kill_at, per_host
):
    """Two workers share a crawl (on one server and on a Cluster); one is killed with
    SIGKILL inside the callback of the ``kill_at``-th page it parses. The other, without
    a restart, takes back the dead one's leases when they end (FRONTIER_LEASE = 1 s: it
    does not close while they are held) and finishes: every page is fetched; the pages
    fetched twice are among the leases it took back (what the dead worker held:
    docs/frontier.md says what that is; on a Cluster, also the children it moved home
    in its last moments). With CONCURRENT_REQUESTS_PER_DOMAIN 1 the dead
    worker held the site's one place: its lease's end frees it for the other."""
    extra = BATCHED if batched else {}
    settings = frontier(
        redis_settings, "compact", SCHEDULER_PERSIST=True, FRONTIER_LEASE=1,
        CONCURRENT_REQUESTS_PER_DOMAIN=per_host, **extra,
    )  # fmt: skip
    # The victim takes page 0 first; no other page is served before the survivor runs.
    notes = tmp_path / "survivor.notes"
    tree.on_hit = lambda n: n == 0 or wait_for(notes, "s 0")
    try:
        victim = worker(tmp_path, tree, settings, "victim", kill_at)
        wait_for(tmp_path / "victim.notes", "s 0")
        survivor = worker(tmp_path, tree, {**settings, "CONCURRENT_REQUESTS": 2}, "survivor")
        _, err = victim.communicate(timeout=180)
        assert victim.returncode == -signal.SIGKILL, err[-3000:]
        _, err = survivor.communicate(timeout=180)
        assert survivor.returncode == 0, err[-3000:]
    finally:
        tree.on_hit = None
    pages = Counter(parsed(tmp_path, "victim") + parsed(tmp_path, "survivor"))
    missing = sorted(set(range(tree.pages)) - set(pages))
    assert missing == [], (missing, err[-3000:])
    twice = sum(pages.values()) - tree.pages
    stats = json.loads((tmp_path / "survivor.json").read_text())["stats"]
    # A page twice: a lease taken back, or (on a Cluster) a request the dead worker had
    # moved to its home shard and not yet acknowledged there, moved again.
    assert 1 <= twice <= stats["frontier/reclaimed"] + stats.get("frontier/moves_reclaimed", 0)


def persisted_by_scrapy_redis(tmp_path, tree: Site, redis_settings: dict, queue_class: str) -> dict:
    """A crawl of scrapy-redis's scheduler stopped after 40 pages (SCHEDULER_PERSIST):
    its result; its queue and fingerprints stay in Redis."""
    old = settings_for(
        redis_settings,
        "set",
        "scrapy-redis",
        SCHEDULER_PERSIST=True,
        SCHEDULER_QUEUE_CLASS=f"scrapy_redis.queue.{queue_class}",
    )
    args = {"site": tree.url, "start": [0], "settings": old, "close_by": "stop", "close_at": 40}
    return run_script("tests.crawl_cases", args, tmp_path / "a.json")


@pytest.mark.single_server
@pytest.mark.parametrize("queue_class", ["PriorityQueue", "FifoQueue"])
def test_a_crawl_persisted_by_scrapy_redis_resumes_under_the_frontier(
    tmp_path, tree, redis_settings, server, queue_class
):
    """scrapy-redis's scheduler crawls part of the site and stops (SCHEDULER_PERSIST);
    the frontier takes over its queue and its fingerprint set: every page once. Its
    requests are pickles: the frontier reads them only when told to (issue 53); before,
    the open stops with one line and leaves the queue as it is."""
    first = persisted_by_scrapy_redis(tmp_path, tree, redis_settings, queue_class)
    assert server.exists("cases:requests")
    waiting = server.type("cases:requests")
    refused = crawl(tmp_path, tree, frontier(redis_settings, "set"), "refused")
    assert refused["pages"] == []
    said = [
        line
        for line in refused["log"].splitlines()
        if " ERROR: " in line and "FRONTIER_READ_PICKLE" in line
    ]
    assert len(said) == 1 and "stay there, not read" in said[0], refused["log"][-3000:]
    assert "Traceback" not in refused["log"] and server.type("cases:requests") == waiting
    assert refused["stats"]["finish_reason"] == "frontier_key_refused"
    told = frontier(redis_settings, "set", FRONTIER_READ_PICKLE=True)
    second = crawl(tmp_path, tree, told, "b")
    assert second["stats"]["frontier/taken_over"] > 0
    assert "FRONTIER_READ_PICKLE is on" in second["log"]
    pages = Counter(first["pages"] + second["pages"])
    assert sorted(pages) == list(range(tree.pages))
    assert max(pages.values()) == 1


@pytest.mark.single_server
@pytest.mark.parametrize("crawl_spider", [False, True], ids=["RedisSpider", "RedisCrawlSpider"])
def test_a_redis_spider_reads_its_start_urls_from_redis_and_crawls_every_page(
    tmp_path, tree, redis_settings, server, crawl_spider
):
    """scrapy-redis's RedisSpider and RedisCrawlSpider (links followed by its rules)
    under the frontier: the start URL pushed to ``fromredis:start_urls``, every page
    once, then the spider closes when idle."""
    server.rpush("fromredis:start_urls", f"{tree.url}/page/0")
    settings = frontier(redis_settings, "compact")
    args = {"settings": settings, "crawl": crawl_spider}
    result = run_script("tests.crawl_redis_spider", args, tmp_path / "r.json")
    pages = Counter(result["pages"])
    assert sorted(pages) == list(range(tree.pages)) and max(pages.values()) == 1
    assert not server.exists("fromredis:start_urls")


@pytest.mark.single_server
def test_a_crawl_with_bad_members_in_the_frontier_s_keys_fetches_every_page(
    tmp_path, tree, redis_settings, server
):
    """Garbage in `:later` and `:aside`, a member "abc" in the queue and a garbage
    lease: the crawl opens, sets them aside with one line each call that meets them, and
    fetches every page, as a crawl over clean keys (issue 51; before, 0 pages and a Lua
    error at open). A deadline, not a margin: run_script's timeout."""
    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.frontier.queue import FrontierQueue

    settings = frontier(redis_settings, "compact", SCHEDULER_PERSIST=True)
    backend = build_backend(Settings(settings), "cases")
    shard = FrontierQueue.for_backend(backend, "cases:requests").shards[0]
    server.zadd(shard.later, {"garbage": 0})
    server.rpush(shard.aside, "garbage too")
    server.zadd(shard.queue, {"abc": -1})
    server.hset(shard.leases, "gone:1", "nonsense")
    server.zadd(shard.expiries, {"gone:1": 0})
    result = crawl(tmp_path, tree, settings, "bad")
    assert sorted(result["pages"]) == list(range(tree.pages))
    assert max(Counter(result["pages"]).values()) == 1
    assert server.llen(shard.bad) == 4
    assert "were not the frontier's" in result["log"]
    info = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup-info", "--spider", "cases",
         *[f"-s{k}={v}" for k, v in settings.items()]],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "4 member(s) of the frontier's keys were not the frontier's" in info.stdout, info


@pytest.mark.single_server
def test_hostile_entries_in_the_queue_are_set_aside_never_run_and_the_crawl_goes_on(
    tmp_path, tree, redis_settings, server
):
    """Another client wrote three entries into the frontier's queue: a pickle that
    creates a file when unpickled, a request naming a class that is not a Request and
    one naming a callback that is not the spider's method. The crawl sets each aside
    with one line, the file never appears, and every page is fetched once, as over
    clean keys (issue 53; before, the pickle ran on the worker)."""
    import pickle

    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.frontier.codec import DATA, SERIALIZED
    from scrapy_dedup_suite.frontier.queue import FrontierQueue

    from .test_request_codec import WritesAFile

    made = tmp_path / "pickle-ran"
    settings = frontier(redis_settings, "compact", SCHEDULER_PERSIST=True)
    backend = build_backend(Settings(settings), "cases")
    queue = FrontierQueue.for_backend(backend, "cases:requests")
    url = json.dumps(f"{tree.url}/page/0").encode()
    hostile = [
        SERIALIZED + pickle.dumps({"url": "http://x/", "meta": {"x": WritesAFile(made)}}),
        DATA + b'{"url":%s,"_class":"subprocess.Popen"}' % url,
        DATA + b'{"url":%s,"callback":"__class__"}' % url,
    ]
    queue.push(queue.shards[0], [(9, entry) for entry in hostile])
    result = crawl(tmp_path, tree, settings, "hostile")
    assert not made.exists()
    assert sorted(result["pages"]) == list(range(tree.pages)), result["log"][-3000:]
    assert max(Counter(result["pages"]).values()) == 1
    said = [line for line in result["log"].splitlines() if "set aside in" in line]
    assert len(said) == 3, result["log"][-3000:]
    assert server.llen(queue.shards[0].aside) == 3
    assert result["stats"]["frontier/set_aside"] == 3


@pytest.mark.single_server
@pytest.mark.parametrize("where", ["lease", "counters", "open"])
def test_a_frontier_key_of_another_type_stops_the_worker_with_one_line(
    tmp_path, tree, redis_settings, server, where
):
    """A key of the frontier's holding a string: every call to its shard fails the same
    way. Before, the worker retried each second for ever, saying it had work pending
    (a priority's list, in the layout before runs); now it says which key, once, and
    closes (reason frontier_key_refused), the key untouched. ``lease``: the pages to try
    again later (met by the lease calls only); ``counters``: met by every call, the
    first at the open; ``open``: the queue itself (before, a CRITICAL traceback)."""
    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.frontier.queue import FrontierQueue

    settings = frontier(redis_settings, "compact", SCHEDULER_PERSIST=True)
    backend = build_backend(Settings(settings), "cases")
    shard = FrontierQueue.for_backend(backend, "cases:requests").shards[0]
    key = {"lease": shard.later, "counters": shard.counters, "open": shard.queue}[where]
    server.set(key, "not a list")
    args = {"site": tree.url, "start": [0], "settings": settings}
    # A deadline, not a margin: before, the crawl never ended.
    result = run_script("tests.crawl_cases", args, tmp_path / "refused.json", timeout=90)
    assert result["stats"]["finish_reason"] == "frontier_key_refused"
    said = [line for line in result["log"].splitlines() if "this worker stops" in line]
    assert len(said) == 1 and key in said[0], result["log"][-3000:]
    assert "Traceback" not in result["log"]
    assert server.get(key) == b"not a list"


@pytest.mark.single_server
@pytest.mark.parametrize("queue_class", ["PriorityQueue", "FifoQueue"])
def test_a_takeover_sets_aside_a_request_the_spider_cannot_rebuild_and_moves_the_rest(
    tmp_path, tree, redis_settings, server, queue_class
):
    """One request of scrapy-redis's persisted queue names a callback the spider no
    longer has. Before, the open failed and 0 of the others were fetched (issue 51); now
    it goes to the frontier's `:bad` list as it was, with one ERROR, and every page is
    fetched once, as in the takeover of a clean queue."""
    import pickle

    first = persisted_by_scrapy_redis(tmp_path, tree, redis_settings, queue_class)
    kind = server.type("cases:requests")
    one = (
        server.zrange("cases:requests", 0, 0)[0]
        if kind == b"zset"
        else server.lindex("cases:requests", 0)
    )
    stale = pickle.loads(one)
    stale.update(url=f"{tree.url}/page/9999", callback="a_callback_long_gone")
    member = pickle.dumps(stale, protocol=-1)
    if kind == b"zset":
        server.zadd("cases:requests", {member: 0})
    else:
        server.rpush("cases:requests", member)
    told = frontier(redis_settings, "set", FRONTIER_READ_PICKLE=True)
    second = crawl(tmp_path, tree, told, "b")
    pages = Counter(first["pages"] + second["pages"])
    assert sorted(pages) == list(range(tree.pages))
    assert max(pages.values()) == 1
    said = [line for line in second["log"].splitlines() if "cannot be rebuilt" in line]
    assert len(said) == 1 and "1 request(s)" in said[0]
    bad = [key for key in server.scan_iter(match="*:frontier:bad")]
    assert len(bad) == 1 and server.lrange(bad[0], 0, -1) == [member]
    assert not server.exists("cases:requests")


@pytest.mark.single_server
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "cores-busy"])
def test_a_callback_blocking_past_the_lease_keeps_its_page_and_the_crawl_ends(
    tmp_path, tree, redis_settings, server, busy
):
    """Two workers; page 3's callback blocks the reactor 15 s (7.5 leases of 2 s, 3 of
    the engine's heartbeats), or until the other worker parsed page 3 too. Before (issue
    51), the leases were renewed on the reactor: the other worker took page 3 back and
    fetched it again, and so on. Now a thread renews them: page 3 is fetched once, every
    page once, and both workers end. Deadlines, not margins: the block ends early on a
    refetch."""
    settings = frontier(redis_settings, "compact", SCHEDULER_PERSIST=True, FRONTIER_LEASE=2)
    notes = {name: tmp_path / f"{name}.notes" for name in ("a", "b")}
    # No page but the start page is served before both workers run.
    tree.on_hit = lambda n: n == 0 or all(wait_for(path, "s 0") is None for path in notes.values())
    procs = {}
    try:
        with busy_cores() if busy else contextlib.nullcontext():
            for name, other in (("a", "b"), ("b", "a")):
                block = {"page": 3, "until": str(notes[other]), "seconds": 15}
                procs[name] = worker(tmp_path, tree, settings, name, block=block)
            for proc in procs.values():
                _, err = proc.communicate(timeout=240)
                assert proc.returncode == 0, err[-3000:]
    finally:
        tree.on_hit = None
        for proc in procs.values():
            proc.kill()
    pages = Counter(parsed(tmp_path, "a") + parsed(tmp_path, "b"))
    assert pages[3] == 1
    assert sorted(pages) == list(range(tree.pages))
    assert max(pages.values()) == 1
