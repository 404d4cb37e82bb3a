"""Redis Sentinel: settings and URLs, a dupefilter on the primary the sentinels name,
and real failovers (a primary, one replica, three sentinels on 127.0.0.1): the
dupefilter carries on by itself, what asynchronous replication loses is measured,
and DEDUP_WAIT_REPLICAS loses nothing that was answered."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from scrapy import Request
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import DedupConfigError, RedisUnreachableError
from scrapy_dedup_suite.server.connection import address, get_redis
from scrapy_dedup_suite.server.sentinel import SentinelOptions

from .helpers import crawl, fingerprints
from .servers import SentinelGroup, Site, free_port, redis_server_binary

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinels() -> Iterator[SentinelGroup]:
    group = SentinelGroup(redis_server_binary()).start()
    yield group
    group.stop()


# -- settings -----------------------------------------------------------------------------


def test_sentinels_from_settings_and_from_a_url():
    options = SentinelOptions.from_settings(
        Settings(
            {
                "DEDUP_REDIS_SENTINELS": ["10.0.0.1:26379", ("10.0.0.2", 26380)],
                "DEDUP_REDIS_SENTINEL_SERVICE": "dedup",
                "DEDUP_REDIS_SENTINEL_PARAMS": {"password": "s3"},
            }
        )
    )
    assert options == SentinelOptions(
        (("10.0.0.1", 26379), ("10.0.0.2", 26380)), "dedup", 0, None, {"password": "s3"}
    )
    url = "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/dedup/2"
    options = SentinelOptions.from_settings(Settings({"DEDUP_REDIS_URL": url}))
    assert options.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26379))
    assert (options.service, options.db, options.password) == ("dedup", 2, "pw")
    assert SentinelOptions.from_settings(Settings({"REDIS_URL": "redis://x:1"})) is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"DEDUP_REDIS_SENTINELS": ["10.0.0.1"]}, "'10.0.0.1' is not a host:port address"),
        ({"DEDUP_REDIS_SENTINELS": 26379}, "DEDUP_REDIS_SENTINELS is a list"),
        ({"DEDUP_REDIS_URL": "redis+sentinel://h:1"}, "is not a Sentinel URL"),
        (
            {"DEDUP_REDIS_URL": "redis+sentinel://h:1/s", "DEDUP_REDIS_SENTINELS": ["h:1"]},
            "name the sentinels twice",
        ),
        (
            {"DEDUP_REDIS_SENTINELS": ["h:1"], "DEDUP_REDIS_CLUSTER": True},
            "a Redis Cluster fails over by itself",
        ),
        ({"DEDUP_REDIS_SENTINELS": ["h:1"], "DEDUP_REDIS_SENTINEL_PARAMS": "pw"}, "must be a dict"),
        (
            {"REDIS_URL": "redis+sentinel://h:1/s"},
            "put the redis\\+sentinel:// URL in DEDUP_REDIS_URL",
        ),
    ],
)
def test_bad_sentinel_settings_are_one_line_errors(settings, message):
    with pytest.raises(DedupConfigError, match=message) as info:
        get_redis(Settings(settings))
    assert "\n" not in str(info.value)


# -- against real sentinels ----------------------------------------------------------------


def sentinel_settings(group: SentinelGroup, **extra) -> dict:
    return {
        "DEDUP_REDIS_SENTINELS": group.addresses,
        "DEDUP_REDIS_SENTINEL_SERVICE": group.service,
        "REDIS_PARAMS": {"socket_timeout": 2, "socket_connect_timeout": 1},
        **extra,
    }


def test_the_dupefilter_records_on_the_primary_the_sentinels_name(sentinels):
    settings = Settings({**sentinel_settings(sentinels), "DEDUP_BACKEND": "bloom"})
    df = RFPDupeFilter.from_settings(settings)
    df.open()
    assert "the primary 'mymaster' of the sentinels at 127.0.0.1:" in address(df.server)
    fps = fingerprints(100)
    assert df.backend.check_and_add_many(fps) == [False] * 100
    assert df.backend.check_and_add_many(fps) == [True] * 100


def test_no_sentinel_answering_is_said_in_one_line(sentinels):
    settings = Settings({**sentinel_settings(sentinels), "DEDUP_REDIS_SENTINEL_SERVICE": "nope"})
    df = RFPDupeFilter.from_settings(settings)
    with pytest.raises(RedisUnreachableError, match="the primary 'nope' of the sentinels") as info:
        df.open()
    assert "\n" not in str(info.value)


def test_sentinels_down_are_said_in_one_short_line():
    """redis-py's own text embeds every sentinel client's repr (about 1,500
    characters): the message names the sentinels and what to check instead."""
    settings = Settings(
        {
            "DEDUP_REDIS_SENTINELS": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"],
            "REDIS_PARAMS": {"socket_timeout": 2, "socket_connect_timeout": 1},
        }
    )
    df = RFPDupeFilter.from_settings(settings)
    with pytest.raises(RedisUnreachableError, match="no sentinel named a primary") as info:
        df.open()
    message = str(info.value)
    assert "\n" not in message and "<redis." not in message
    assert len(message) < 500
    assert "the primary 'mymaster' of the sentinels at 127.0.0.1:" in message


def test_sentinels_gone_mid_crawl_are_logged_in_one_short_line(sentinels, caplog):
    settings = Settings({**sentinel_settings(sentinels), "DEDUP_ON_ERROR": "allow"})
    df = RFPDupeFilter.from_settings(settings)
    df.open()
    assert df.request_seen(Request("http://sentinel.test/1")) is False
    sentinels.stop()
    with caplog.at_level(logging.WARNING):
        assert df.request_seen(Request("http://sentinel.test/2")) is False  # let through
    (line,) = [r.getMessage() for r in caplog.records if "letting it through" in r.getMessage()]
    assert "no sentinel named a primary" in line
    assert "<redis." not in line and len(line) < 400


class Stream:
    """What a writer thread was told through a failover: the fingerprints answered
    "new" (in order), how many of them came before the failover ended, the calls
    that failed, and any new fingerprint answered "seen" (which must never happen)."""

    def __init__(self) -> None:
        self.answered: list[str] = []
        self.settled = 0
        self.errors = 0
        self.wrongly_seen: list[str] = []


def record_through_a_failover(
    group: SentinelGroup, backend, before: int, after: int, on_kill=lambda: None
) -> Stream:
    """Record new fingerprints one by one from a thread; kill the primary once
    ``before`` were answered "new" (calling ``on_kill`` first), and go on until
    ``after`` more were answered once the sentinels name the new primary (a call
    that fails meanwhile is skipped: what it did is unknown)."""
    stream = Stream()
    enough = threading.Event()
    settled = threading.Event()
    fps = iter(fingerprints(10 * (before + after) + 100_000, "failover"))

    def writer() -> None:
        for fp in fps:
            try:
                seen = backend.check_and_add(fp)
            except Exception:
                stream.errors += 1
                continue
            if seen:
                stream.wrongly_seen.append(fp)
                continue
            stream.answered.append(fp)
            if len(stream.answered) == before:
                enough.set()
            if settled.is_set() and len(stream.answered) >= stream.settled + after:
                return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert enough.wait(120)
    on_kill()
    group.kill_primary()
    # Every answer from now on comes from the new primary (the old one is dead).
    stream.settled = len(stream.answered)
    settled.set()
    thread.join(300)
    assert not thread.is_alive()
    assert stream.wrongly_seen == []  # a new fingerprint is never answered "seen"
    return stream


@pytest.mark.parametrize("backend_name", ["set", "hash", "compact", "bloom"])
def test_a_failover_mid_stream_loses_only_what_was_not_replicated(
    sentinels, backend_name, caplog, record_property
):
    settings = Settings(
        {**sentinel_settings(sentinels), "DEDUP_BACKEND": backend_name, "DEDUP_HASH_SHARDS": 4}
    )
    backend = build_backend(settings, "s", server=get_redis(settings, socket_timeout=2))
    backend.open()
    with caplog.at_level(logging.WARNING):
        stream = record_through_a_failover(sentinels, backend, 3_000, 1_000)
    present = backend.contains_many(stream.answered)
    lost = present.count(False)
    record_property("lost_to_async_replication", lost)
    record_property("errors_during_failover", stream.errors)
    print(f"{backend_name}: {lost} of {len(stream.answered)} answered fingerprints lost")
    # Only what the old primary had not sent to the replica can be lost (crawled
    # again, never the other way); what the new primary answered is all there.
    assert lost < stream.settled // 2
    assert all(present[stream.settled :])
    if backend_name not in ("set", "compact"):  # scripts were reloaded, the record checked
        # (set and compact answer a request with one command, no script)
        assert "did not know the" in caplog.text


def test_waiting_for_a_replica_loses_nothing_answered(sentinels, record_property):
    settings = Settings(
        {
            **sentinel_settings(sentinels),
            "DEDUP_BACKEND": "hash",
            "DEDUP_WAIT_REPLICAS": 1,
            "DEDUP_WAIT_TIMEOUT": 30,
        }
    )
    backend = build_backend(settings, "s", server=get_redis(settings, socket_timeout=60))
    backend.open()
    at_kill = {}

    def on_kill() -> None:
        at_kill["unreplicated"] = backend.unreplicated
        # The new primary will have no replica: each write would wait out the timeout.
        backend.wait_for_replicas(1, 0.02)

    stream = record_through_a_failover(sentinels, backend, 3_000, 20, on_kill)
    lost = backend.contains_many(stream.answered).count(False)
    record_property("errors_during_failover", stream.errors)
    # A write answered before the kill had reached the replica (unless its WAIT timed
    # out, which 30 s do not on a live replica): none is lost.
    assert at_kill["unreplicated"] == 0
    assert lost == 0
    # After the failover WAIT found no replica: counted, the answers stand.
    assert backend.unreplicated >= 20


def test_wait_is_refused_on_a_cluster(redis_cluster):
    settings = Settings(
        {"REDIS_URL": redis_cluster.url, "DEDUP_REDIS_CLUSTER": True, "DEDUP_WAIT_REPLICAS": 1}
    )
    df = RFPDupeFilter.from_settings(settings)
    with pytest.raises(DedupConfigError, match="not to a Redis Cluster"):
        df.open()


#: A crawl whose links are checked in batches that wait out an outage.
BATCHES_WAIT = {
    "SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50},
    "DEDUP_BATCH_OUTAGE_WAIT": 300,
}


@pytest.mark.subprocess
@pytest.mark.parametrize("way", ["per-request", "batches-wait", "frontier"])
def test_a_crawl_goes_on_through_a_failover(tmp_path, sentinels, way, record_property):
    site = Site(pages=1_500, links=4).start()
    try:
        settings = {
            **sentinel_settings(sentinels),
            "DEDUP_BACKEND": "hash",
            "DEDUP_HASH_SHARDS": 4,
            "CONCURRENT_REQUESTS": 2,
            **(BATCHES_WAIT if way == "batches-wait" else {}),
            # The frontier: its queue and leases on the primary too, which a failover
            # may set back (replicas are a prefix of its history: a parent acknowledged
            # there has its children there).
            **(
                {"SCHEDULER": "scrapy_dedup_suite.frontier.scheduler.Scheduler"}
                if way == "frontier"
                else {}
            ),
        }
        import redis

        primary = redis.Redis(port=sentinels.primary.port)

        def recorded() -> int:
            # The filter's keys: its record, stamps and buckets, each of the first few
            # hundred fingerprints in a bucket of its own (10,000,000 / 256 of them).
            try:
                return int(primary.dbsize())
            except redis.ConnectionError:
                return 0

        killed = threading.Event()
        failed_over = threading.Event()  # set only when the primary was killed mid-crawl

        def kill_mid_crawl() -> None:
            while recorded() < 300:
                if killed.wait(0.01):
                    return
            sentinels.kill_primary()
            killed.set()
            failed_over.set()

        killer = threading.Thread(target=kill_mid_crawl, daemon=True)
        killer.start()
        result = crawl(tmp_path, site, settings)
        killed.set()
        killer.join(180)
        stats = result["stats"]
        assert stats["finish_reason"] == "finished"
        assert failed_over.is_set(), "the crawl ended before 300 fingerprints were recorded"
        # Every page was crawled: no new page was dropped by the failover.
        assert site.served == set(range(site.pages))
        assert stats["dedup/added"] <= site.pages
        again = stats["downloader/response_status_count/200"] - site.pages
        unchecked = stats.get("dedup/errors", 0)
        record_property("pages_crawled_again", again)
        record_property("let_through_unchecked", unchecked)
        print(
            f"failover mid-crawl ({way}): {again} of {site.pages} pages crawled again, "
            f"{unchecked} requests let through unchecked"
        )
        if way == "batches-wait":
            # Batches waited for the new primary: none was let through unchecked, and
            # only the few in flight when the primary died count their answers as new.
            assert unchecked == 0
            assert stats["dedup/retries"] >= 1
            assert again <= 100
    finally:
        site.stop()
