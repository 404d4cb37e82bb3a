"""The batch path never loses a page that the per-request path crawls.

Each case is the same real crawl with and without BatchDedupMiddleware, of a
tree-shaped site where every page has exactly one inbound link, so a request lost
is a page lost: both must download the same pages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from .conftest import ROWS
from .crawl_cases import CopyingMiddleware, DroppingMiddleware
from .helpers import run_script, settings_for
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
    assert batched["pages"] == plain["pages"]
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
    assert batched["pages"] == plain["pages"]
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
    assert batched["pages"] == plain["pages"]
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


@pytest.mark.single_server
def test_a_close_during_a_lasting_outage_ends(tmp_path, tree):
    """Redis goes away for good at the first page; the batches would wait an hour
    (DEDUP_BATCH_OUTAGE_WAIT) but CLOSESPIDER_TIMEOUT closes the crawl, and the
    crawl ends (before this test's deadline, long before the hour)."""
    server = RedisServer(redis_server_binary(), bloom=False).start()
    try:
        settings = {
            "REDIS_URL": server.url,
            "DEDUP_BACKEND": "set",
            "DEDUP_BATCH_OUTAGE_WAIT": 3600,
            "DEDUP_BATCH_THREADS": 4,
            "DEDUP_BATCH_SIZE": 2,
            "CLOSESPIDER_TIMEOUT": 2,
            **BATCHED,
        }
        result = crawl(tmp_path, tree, settings, "outage", stop_redis=server.url)
    finally:
        server.stop()
    assert result["stats"]["finish_reason"] == "closespider_timeout"
    assert result["pages"][:1] == [0]
