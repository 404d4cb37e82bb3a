"""BatchDedupMiddleware in real Scrapy crawls of the local site (subprocesses)."""

from __future__ import annotations

import pytest
import redis

from .conftest import ROWS
from .helpers import crawl, run_script, settings_for

ON_CLUSTER = True

BATCHED = {"SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}}

#: What both crawls must agree on.
SAME = (
    "downloader/response_status_count/200",
    "dedup/added",
    "dupefilter/filtered",
    "dedup/filtered",
    "bloomfilter/filtered",
    "item_scraped_count",
)


@pytest.mark.parametrize("scheduler", ["scrapy", "scrapy-redis"])
@pytest.mark.parametrize("backend", ROWS)
def test_a_batched_crawl_downloads_and_counts_what_a_per_request_one_does(
    tmp_path, site, redis_server, redis_settings, server, backend, scheduler, topology
):
    settings = settings_for(redis_settings, backend, scheduler, redis_server.url)
    plain = crawl(tmp_path, site, settings, "plain")
    server.flushall()
    if scheduler == "scrapy-redis":
        redis.Redis.from_url(redis_server.url).flushall()  # the queue's server
    batched = crawl(tmp_path, site, {**settings, **BATCHED}, "batched")
    one, many = plain["stats"], batched["stats"]
    assert {k: one.get(k) for k in SAME} == {k: many.get(k) for k in SAME}
    assert many["downloader/response_status_count/200"] == site.pages
    # Every request a callback yielded was checked in a batch; the start request, by
    # the per-request path (start requests are never batched: see test_batch_safety).
    assert many["dedup/batched"] == many["dedup/added"] + many["dupefilter/filtered"] - 1
    assert many["dedup/batched"] == site.offered() - 1
    assert many["dedup/batches"] <= site.pages + 1
    assert "dedup/batches" not in one
    assert "dedup/errors" not in many


@pytest.mark.single_server
def test_downloads_go_on_while_a_batch_waits_for_redis(tmp_path, site, redis_server, server):
    settings = {
        "REDIS_URL": redis_server.url,
        "DEDUP_BACKEND": "bloom",
        "DEDUP_BLOOM_CAPACITY": 100_000,
    }
    args = {"site": site.url, "redis": redis_server.url, "settings": settings}
    # If a batch blocked the reactor, the server would stay paused for the whole
    # CLIENT PAUSE (60 s) and the events would come in another order.
    result = run_script("tests.crawl_paused", args, tmp_path / "paused.json", timeout=300)
    events = result["events"]
    # While the first page's batch waited on the paused server, the item went
    # through and three pages were downloaded and parsed; the batch's links came after.
    assert events[:6] == ["paused", "item", "side-1", "side-2", "side-3", "unpaused"], events
    assert events.count("link") == site.pages - 1  # every page but page 0, once
    assert result["stats"]["dedup/batched"] >= site.pages


@pytest.mark.single_server
@pytest.mark.parametrize("backend", ["set", "bloom"])
def test_a_batched_crawl_with_a_local_cache_counts_the_same(
    tmp_path, site, redis_server, redis_settings, server, backend
):
    settings = settings_for(redis_settings, backend, "scrapy")
    plain = crawl(tmp_path, site, settings, "plain")
    server.flushall()
    cached = crawl(tmp_path, site, {**settings, **BATCHED, "DEDUP_LOCAL_CACHE": 10_000}, "cached")
    one, many = plain["stats"], cached["stats"]
    assert {k: one.get(k) for k in SAME} == {k: many.get(k) for k in SAME}
    # Repeats of links this process recorded were answered without Redis.
    assert 0 < many["dedup/cache_hits"] <= many["dupefilter/filtered"]
