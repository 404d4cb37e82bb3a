"""The batch path never loses a page that the per-request path crawls.

Each case is the same real crawl with and without BatchDedupMiddleware, of a
tree-shaped site where every page has exactly one inbound link, so a request lost
is a page lost: both must download the same pages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from .conftest import ROWS
from .crawl_cases import CopyingMiddleware, DroppingMiddleware
from .helpers import ROOT, run_script, settings_for
from .servers import RedisServer, Site, redis_server_binary, tree_links

ON_CLUSTER = True

MIDDLEWARE = "scrapy_dedup_suite.middleware.BatchDedupMiddleware"
BATCHED = {"SPIDER_MIDDLEWARES": {MIDDLEWARE: 50}}
COPYING = f"{CopyingMiddleware.__module__}.{CopyingMiddleware.__qualname__}"
DROPPING = f"{DroppingMiddleware.__module__}.{DroppingMiddleware.__qualname__}"


@pytest.fixture(scope="module")
def tree() -> Iterator[Site]:
    site = Site(pages=150, links=5, linker=tree_links).start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def big_tree() -> Iterator[Site]:
    site = Site(pages=1500, links=5, linker=tree_links).start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def flat() -> Iterator[Site]:
    """Pages without links: each is reached from a start request only."""
    site = Site(pages=3000, links=0, linker=tree_links).start()
    yield site
    site.stop()


def crawl(tmp_path, site: Site, settings: dict, name: str, **args) -> dict:
    args = {"site": site.url, "start": [0], "settings": settings, **args}
    return run_script("tests.crawl_cases", args, tmp_path / f"{name}.json")


def middlewares(settings: dict, extra: dict) -> dict:
    return {**settings, "SPIDER_MIDDLEWARES": {**settings.get("SPIDER_MIDDLEWARES", {}), **extra}}


def flush(server, queue_url: str | None = None) -> None:
    server.flushall()
    if queue_url:
        redis.Redis.from_url(queue_url).flushall()


@pytest.mark.parametrize("backend", ROWS)
def test_links_yielded_before_a_callback_raises_are_crawled(
    tmp_path, tree, redis_settings, server, backend
):
    settings = settings_for(redis_settings, backend, "scrapy", DEDUP_BATCH_SIZE=4)
    raise_at = [n for n in range(tree.pages) if n % 3 == 1]
    plain = crawl(tmp_path, tree, settings, "plain", raise_at=raise_at)
    flush(server)
    batched = crawl(tmp_path, tree, {**settings, **BATCHED}, "batched", raise_at=raise_at)
    assert batched["pages"] == plain["pages"], batched["log"][-3000:]
    assert 10 < len(plain["pages"]) < tree.pages  # the raising pages cut subtrees off
    assert batched["stats"]["dedup/batches"] > 0
    assert (
        batched["stats"]["spider_exceptions/ValueError"]
        == plain["stats"]["spider_exceptions/ValueError"]
    )


@pytest.mark.single_server
@pytest.mark.parametrize("backend", ["set", "bloom"])
@pytest.mark.parametrize("other", [COPYING, DROPPING])
def test_a_middleware_after_it_turns_batching_off_and_loses_nothing(
    tmp_path, tree, redis_settings, server, backend, other
):
    settings = settings_for(redis_settings, backend, "scrapy")
    settings = middlewares(settings, {other: 40})  # 40 < 50: sees the output after ours
    plain = crawl(tmp_path, tree, settings, "plain")
    flush(server)
    batched = crawl(tmp_path, tree, middlewares(settings, {MIDDLEWARE: 50}), "batched")
    assert batched["pages"] == plain["pages"], batched["log"][-3000:]
    if other == COPYING:
        assert len(plain["pages"]) == tree.pages
    assert "dedup/batches" not in batched["stats"]
    assert f"{other} (order 40) see(s) a callback's output after it" in batched["log"]
    assert f'SPIDER_MIDDLEWARES = {{"{MIDDLEWARE}": 39}}' in batched["log"]


@pytest.mark.single_server
@pytest.mark.parametrize("other", [COPYING, DROPPING])
def test_a_middleware_before_it_is_batched_and_loses_nothing(
    tmp_path, tree, redis_settings, server, other
):
    settings = middlewares(settings_for(redis_settings, "set", "scrapy"), {other: 60})
    plain = crawl(tmp_path, tree, settings, "plain")
    flush(server)
    batched = crawl(tmp_path, tree, middlewares(settings, {MIDDLEWARE: 50}), "batched")
    assert batched["pages"] == plain["pages"], batched["log"][-3000:]
    assert batched["stats"]["dedup/batches"] > 0
    assert "dedup/batch_unclaimed" not in batched["stats"]


@pytest.mark.single_server
@pytest.mark.parametrize("backend", ["set", "bloom"])
def test_start_requests_survive_a_close_and_a_resume(
    tmp_path, flat, redis_server, redis_settings, server, backend
):
    """scrapy-redis's scheduler keeps its queue (SCHEDULER_PERSIST): a crawl closed
    after 20 pages, then resumed, downloads every start page once in all."""
    settings = settings_for(
        redis_settings, backend, "scrapy-redis", redis_server.url, SCHEDULER_PERSIST=True
    )
    start = list(range(flat.pages))
    pages = {}
    for name, run in (("plain", settings), ("batched", {**settings, **BATCHED})):
        flush(server, redis_server.url)
        first = crawl(tmp_path, flat, {**run, "CLOSESPIDER_PAGECOUNT": 20}, name, start=start)
        assert len(first["pages"]) < flat.pages
        second = crawl(tmp_path, flat, run, f"{name}-resumed", start=start)
        pages[name] = sorted(first["pages"] + second["pages"])
    assert pages["batched"] == pages["plain"] == start


#: Each kind of close, with what it sets and the finish_reason it leaves.
CLOSES = {
    "stop": ({}, "shutdown"),  # crawler.stop_async(), as from code
    "SIGINT": ({}, "shutdown"),  # Ctrl-C
    "SIGTERM": ({}, "shutdown"),  # a process manager
    "pagecount": ({"CLOSESPIDER_PAGECOUNT": 20}, "closespider_pagecount"),
    "errorcount": ({"CLOSESPIDER_ERRORCOUNT": 1}, "closespider_errorcount"),
}


@pytest.mark.parametrize("close", list(CLOSES))
def test_a_closed_then_resumed_crawl_loses_nothing(
    tmp_path, tree, redis_server, redis_settings, server, close
):
    """scrapy-redis's scheduler keeps its queue (SCHEDULER_PERSIST): a crawl closed
    after 20 pages by each kind of close, then resumed to its end, downloads the same
    pages in all with and without the middleware, each once: every page, but for the
    subtree a raising callback cut off (the error count's close)."""
    settings = settings_for(
        redis_settings, "set", "scrapy-redis", redis_server.url, SCHEDULER_PERSIST=True
    )
    extra, reason = CLOSES[close]
    args: dict = {"raise_at": [3]} if close == "errorcount" else {}
    if not extra:
        args.update(close_by=close, close_at=20)
    pages = {}
    for name, run in (("plain", settings), ("batched", {**settings, **BATCHED})):
        flush(server, redis_server.url)
        first = crawl(tmp_path, tree, {**run, **extra}, name, **args)
        assert first["stats"]["finish_reason"] == reason
        assert len(first["pages"]) < tree.pages
        second = crawl(tmp_path, tree, run, f"{name}-resumed")
        both = first["pages"] + second["pages"]
        assert len(both) == len(set(both)), name  # each once
        pages[name] = sorted(both)
        if name == "batched":
            assert first["stats"]["dedup/batches"] > 0
            assert "dedup/batch_unclaimed" not in first["stats"]
    assert pages["batched"] == pages["plain"]
    if close != "errorcount":
        assert pages["plain"] == list(range(tree.pages))


def killed_crawl(tmp_path, site: Site, settings: dict, name: str, at: int) -> dict[str, set]:
    """A crawl killed with SIGKILL once ``at`` pages were parsed: the pages it parsed
    ("p") and the requests it scheduled ("s")."""
    notes = tmp_path / f"{name}.notes"
    args = {"site": site.url, "start": [0], "settings": settings}
    args.update(close_by="SIGKILL", close_at=at, pages_file=str(notes))
    args["out"] = str(tmp_path / f"{name}.json")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.crawl_cases", json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-4000:]
    done: dict[str, set] = {"p": set(), "s": set()}
    for line in notes.read_text().splitlines():
        kind, page = line.split()
        done[kind].add(int(page))
    return done


@pytest.mark.single_server
def test_a_killed_crawl_loses_at_most_its_pages_in_flight_and_their_links(
    tmp_path, big_tree, redis_server, redis_settings, server
):
    """kill -9 at the 150th page, then a resume to the end. What is lost (the roots of
    the subtrees never crawled) is at most the pages in flight at the kill, each with
    its links: the pages requested and not parsed (at most CONCURRENT_REQUESTS more
    taken from the queue and not yet requested), and the pages parsed whose links
    had not all reached the scheduler. With or without the middleware."""
    concurrency, links = 8, big_tree.links
    settings = settings_for(
        redis_settings,
        "set",
        "scrapy-redis",
        redis_server.url,
        SCHEDULER_PERSIST=True,
        CONCURRENT_REQUESTS=concurrency,
    )
    pages = range(big_tree.pages)
    for name, run in (("plain", settings), ("batched", {**settings, **BATCHED})):
        flush(server, redis_server.url)
        big_tree.served.clear()
        done = killed_crawl(tmp_path, big_tree, run, name, at=150)
        unparsed = big_tree.served - done["p"]
        unfinished = [
            p for p in done["p"] if not set(tree_links(p, len(pages), links)) <= done["s"]
        ]
        in_flight = len(unparsed) + len(unfinished) + concurrency
        resumed = crawl(tmp_path, big_tree, run, f"{name}-resumed")
        crawled = done["p"] | set(resumed["pages"])
        parent = {c: p for p in pages for c in tree_links(p, len(pages), links)}
        lost = [p for p in pages if p not in crawled and parent.get(p) in crawled]
        print(f"kill -9 {name}: {len(lost)} lost, {in_flight} in flight")
        assert len(lost) <= in_flight * (1 + links), (name, lost, in_flight)


@pytest.mark.single_server
@pytest.mark.parametrize("close", ["CLOSESPIDER_TIMEOUT", "SIGTERM", "SIGINT"])
def test_a_close_during_a_lasting_outage_ends(tmp_path, tree, close):
    """Redis goes away for good at the first page; the batches would wait an hour
    (DEDUP_BATCH_OUTAGE_WAIT) but the crawl is closed (by a timeout, or a signal at the
    first page), and it ends (before this test's deadline, long before the hour)."""
    server = RedisServer(redis_server_binary(), bloom=False).start()
    try:
        settings = {
            "REDIS_URL": server.url,
            "DEDUP_BACKEND": "set",
            "DEDUP_BATCH_OUTAGE_WAIT": 3600,
            "DEDUP_BATCH_THREADS": 4,
            "DEDUP_BATCH_SIZE": 2,
            **BATCHED,
        }
        args: dict = {"stop_redis": server.url}
        if close == "CLOSESPIDER_TIMEOUT":
            settings["CLOSESPIDER_TIMEOUT"] = 2
        else:
            args.update(close_by=close, close_at=1)
        result = crawl(tmp_path, tree, settings, "outage", **args)
    finally:
        server.stop()
    reason = "closespider_timeout" if close == "CLOSESPIDER_TIMEOUT" else "shutdown"
    assert result["stats"]["finish_reason"] == reason
    assert result["pages"][:1] == [0]
