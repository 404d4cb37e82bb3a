"""Redis failing under the dupefilter: retries, letting requests through, a restart mid-crawl."""

from __future__ import annotations

import threading
import time

import pytest
import scrapy
from scrapy import Request
from scrapy.utils.test import get_crawler

from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import DedupBackendError

from .helpers import crawl
from .servers import RedisServer, module_args, redis_server_binary


class MySpider(scrapy.Spider):
    name = "faulty"


@pytest.fixture
def own_server():
    """A server of this test's own, to stop and start again on the same port."""
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


def dupefilter(server, **settings) -> RFPDupeFilter:
    crawler = get_crawler(
        MySpider,
        {
            "REDIS_URL": server.url,
            "REDIS_PARAMS": {"socket_connect_timeout": 0.5, "socket_timeout": 1},
            "DEDUP_BACKEND": "bloom",
            "DEDUP_BLOOM_CAPACITY": 10_000,
            **settings,
        },
    )
    df = RFPDupeFilter.from_crawler(crawler)
    df.open()
    return df


def test_raise_mode_retries_at_once_after_a_restart(own_server):
    df = dupefilter(own_server, DEDUP_ON_ERROR="raise", DEDUP_ERROR_RETRIES=5)
    first, second = Request("http://x.test/1"), Request("http://x.test/2")
    assert df.request_seen(first) is False
    own_server.stop()
    own_server.start()
    # The restarted server lost everything: the backend reopens (record recreated).
    assert df.request_seen(second) is False
    assert df.stats.get_value("dedup/errors") is None
    assert df.request_seen(second) is True
    assert df.backend.verify() is True


def test_raise_mode_raises_after_its_retries(own_server):
    df = dupefilter(own_server, DEDUP_ON_ERROR="raise", DEDUP_ERROR_RETRIES=2)
    own_server.stop()
    with pytest.raises(DedupBackendError, match="also after 2 retries"):
        df.request_seen(Request("http://x.test/1"))
    assert df.stats.get_value("dedup/retries") == 2
    assert df.stats.get_value("dedup/errors") == 1


def test_crawl_survives_a_redis_restart(tmp_path, site, own_server):
    """Scrapy's scheduler, bloom backend, DEDUP_ON_ERROR='allow' (the default): Redis is
    stopped mid-crawl and started again empty. The crawl goes on, lets requests through
    while Redis is away, and deduplicates again once it is back, without a restart."""
    import redis

    settings = {
        "REDIS_URL": own_server.url,
        "REDIS_PARAMS": {"socket_connect_timeout": 0.2, "socket_timeout": 1},
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        "DEDUP_BACKEND": "bloom",
        "DEDUP_BLOOM_CAPACITY": 100_000,
        "CONCURRENT_REQUESTS": 4,
    }
    result: dict = {}
    hits = site.hits
    thread = threading.Thread(target=lambda: result.update(crawl(tmp_path, site, settings)))
    thread.start()
    deadline = time.monotonic() + 60
    while site.hits - hits < 40:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    # Every link found while Redis is away is let through and downloaded. The
    # outage lasts until the crawl has certainly checked requests without Redis:
    # at most site.pages requests were admitted before the stop (each a distinct
    # page), so more hits than that mean some were let through while it was away.
    own_server.stop()
    stopped_at = site.hits
    deadline = time.monotonic() + 120
    while site.hits - stopped_at <= site.pages:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    own_server.start()  # empty
    thread.join(180)
    stats = result["stats"]

    assert stats["finish_reason"] == "finished"
    assert stats["dedup/errors"] >= 1
    assert "letting it through" in result["log"]
    # Every page was crawled at least once; pages fingerprinted before the restart
    # were forgotten with Redis's data, so some were crawled again.
    assert stats["downloader/response_status_count/200"] >= site.pages
    assert stats["dedup/filtered"] > 0
    # It carried on after the restart: the filter and its record exist again.
    client = redis.Redis.from_url(own_server.url)
    assert client.exists("site:bloomfilter:meta") and client.bitcount("{site:bloomfilter:0}") > 0


def test_a_cluster_master_restarting(tmp_path):
    """DEDUP_ON_ERROR='allow' on a three-master cluster of the test's own: one master
    stops (saving its data) and starts again. Requests whose block lives there are let
    through meanwhile, the others are still checked; afterwards everything is checked
    again, without a new client."""
    from redis.cluster import RedisCluster

    from scrapy_dedup_suite.embedded import EmbeddedCluster

    cluster = EmbeddedCluster(3, binary=redis_server_binary(), extra_args=module_args()).start()
    try:
        df = dupefilter(
            cluster.nodes[0],
            DEDUP_REDIS_CLUSTER=True,
            DEDUP_BLOOM_BLOCKS=6,
            REDIS_PARAMS={"socket_connect_timeout": 0.2, "socket_timeout": 1},
        )
        before = [Request(f"http://x.test/before/{i}") for i in range(120)]
        assert not any(df.request_seen(r) for r in before)
        client = RedisCluster.from_url(cluster.url)
        victim = cluster.nodes[2]
        on_victim = [
            r
            for r in before
            if client.get_node_from_key(df.backend.block_key(df.fingerprint(r))).port == victim.port
        ]
        assert on_victim and len(on_victim) < len(before)
        victim.persistent = True  # stop() then SAVEs first: a restart with persistence
        victim.stop()
        during = [Request(f"http://x.test/during/{i}") for i in range(10)]
        assert not any(df.request_seen(r) for r in during)  # let through, none raised
        assert df.stats.get_value("dedup/errors") >= 1
        victim.start()
        victim.persistent = False  # its data directory goes when the test ends
        cluster.wait_ready(60)
        # Back: every fingerprint recorded before is seen, the master's data included.
        deadline = time.monotonic() + 60
        while True:
            errors = df.stats.get_value("dedup/errors")
            seen = [df.request_seen(r) for r in before]
            if df.stats.get_value("dedup/errors") == errors:
                break  # a round without errors: the client has the slot map again
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert all(seen)
        assert df.request_seen(Request("http://x.test/after")) is False
        client.close()
    finally:
        cluster.stop()
