"""The dupefilter: construction from settings, fingerprints, stats, errors."""

from __future__ import annotations

import logging
import re

import pytest
import redis
import scrapy
from scrapy import Request
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter as ScrapyRedisDupeFilter

from scrapy_dedup_suite.backends import BACKENDS, DedupBackend, SetBackend
from scrapy_dedup_suite.core.fingerprint import scrapy_redis_fingerprint
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.embedded import free_port
from scrapy_dedup_suite.exceptions import DedupBackendError, DedupConfigError, WrongKeyTypeError

from .conftest import NAMES
from .helpers import stored_expiry_ms
from .servers import poll_until


class MySpider(scrapy.Spider):
    name = "myspider"


class RecordingBackend(SetBackend):
    """A custom backend loaded by dotted path."""

    name = "recording"


def make(redis_server, spider_from: str = "crawler", **settings) -> RFPDupeFilter:
    crawler = get_crawler(MySpider, {"REDIS_URL": redis_server.url, **settings})
    if spider_from == "spider":
        spider = MySpider.from_crawler(crawler)
        return RFPDupeFilter.from_spider(spider)
    df = RFPDupeFilter.from_crawler(crawler)
    df.open()
    return df


def requests(n: int) -> list[Request]:
    return [Request(f"http://example.test/item?id={i}&b=2&a=1") for i in range(n)]


VARIED = [
    Request("http://example.test/"),
    Request("http://example.test/?b=2&a=1"),
    Request("http://example.test/?a=1&b=2#frag"),
    Request("HTTP://Example.TEST/p%61th?q=%E2%82%AC"),
    Request("http://example.test/post", method="POST", body=b"x=1&y=\xff"),
    Request("http://example.test/post", method="post", body="x=1"),
    Request("http://example.test/", headers={"Accept": "text/html"}),
    Request("http://example.test/ünïcode/päth?q=ü"),
]


@pytest.mark.parametrize("request_", VARIED, ids=range(len(VARIED)))
def test_default_fingerprint_is_scrapy_redis_exactly(request_):
    expected = ScrapyRedisDupeFilter(None, "k").request_fingerprint(request_)
    assert scrapy_redis_fingerprint(request_) == expected
    assert len(expected) == 40


def test_scrapy_fingerprinter_option(redis_server, server):
    df = make(redis_server, DEDUP_FINGERPRINTER="scrapy")
    crawler_fp = df.fingerprint(VARIED[6])
    assert crawler_fp == get_crawler(MySpider).request_fingerprinter.fingerprint(VARIED[6]).hex()
    # Scrapy's fingerprinter ignores headers by default too, but differs from scrapy-redis's.
    assert crawler_fp != scrapy_redis_fingerprint(VARIED[6])
    with pytest.raises(DedupConfigError, match="DEDUP_FINGERPRINTER must be one of"):
        make(redis_server, DEDUP_FINGERPRINTER="md5")


@pytest.mark.parametrize("spider_from", ["crawler", "spider"])
def test_set_backend_shares_scrapy_redis_data_both_ways(redis_server, server, spider_from):
    theirs = ScrapyRedisDupeFilter(server, "myspider:dupefilter")
    reqs = requests(20)
    for r in reqs[:10]:
        assert theirs.request_seen(r) is False
    ours = make(redis_server, spider_from, DEDUP_BACKEND="set")
    assert ours.key == "myspider:dupefilter"
    assert [ours.request_seen(r) for r in reqs] == [True] * 10 + [False] * 10
    assert [theirs.request_seen(r) for r in reqs] == [True] * 20


@pytest.mark.parametrize("backend", NAMES)
def test_default_keys_and_scheduler_key_setting(redis_server, server, backend):
    df = make(redis_server, DEDUP_BACKEND=backend)
    expected = {
        "set": "myspider:dupefilter",
        "hash": "myspider:dedup-hash",
        "compact": "myspider:dedup-compact",
        "bloom": "myspider:bloomfilter",
        "windowed-bloom": "myspider:windowed-bloom",
        "native-bloom": "myspider:native-bloom",
        "windowed-native-bloom": "myspider:windowed-native-bloom",
    }[backend]
    assert df.key == expected
    df = make(redis_server, DEDUP_BACKEND=backend, SCHEDULER_DUPEFILTER_KEY="dd:%(spider)s")
    assert df.key == "dd:myspider"


@pytest.mark.parametrize("spider_from", ["crawler", "spider"])
@pytest.mark.parametrize("backend", NAMES)
def test_stats(redis_server, server, backend, spider_from):
    df = make(redis_server, spider_from, DEDUP_BACKEND=backend, DEDUP_BLOOM_CAPACITY=10_000)
    reqs = requests(5)
    for r in reqs + reqs[:3]:
        df.request_seen(r)
    stats = df.stats.get_stats()
    assert stats["dedup/backend"] == backend
    assert stats["dedup/added"] == 5
    assert stats["dedup/filtered"] == 3
    if "bloom" in backend:
        assert stats["bloomfilter/filtered"] == 3
    else:
        assert "bloomfilter/filtered" not in stats


def test_close_never_deletes(redis_server, server):
    df = make(redis_server, DEDUP_BACKEND="bloom", DEDUP_BLOOM_CAPACITY=1000)
    df.request_seen(requests(1)[0])
    keys = sorted(server.keys("*"))
    df.close("finished")
    assert sorted(server.keys("*")) == keys
    df.clear()
    assert server.keys("*") == []


def test_request_meta_dedup_expire(redis_server, server):
    # The janitor's way (timestamps in fields) on any server.
    df = make(redis_server, DEDUP_BACKEND="hash", DEDUP_EXPIRE=3600, DEDUP_HASH_FIELD_EXPIRY=False)
    short = Request("http://example.test/short", meta={"dedup_expire": 0.3})
    assert df.request_seen(short) is False
    assert df.request_seen(short) is True
    # The field's expiry, by the server's clock, is the request's own (a new filter's
    # buckets keep whole seconds, rounded up).
    expiry_ms = stored_expiry_ms(df.backend, df.fingerprint(short))
    now_ms = int(server.time()[0]) * 1000 + int(server.time()[1]) // 1000
    assert 0 < expiry_ms - now_ms <= 300 + 1000
    poll_until(lambda: df.request_seen(short) is False)


@pytest.mark.parametrize("value", ["soon", -5, 0, 10**12, [60], float("inf"), float("nan")])
def test_a_bad_dedup_expire_is_counted_once_and_the_request_checked(
    redis_server, server, value, caplog
):
    # The janitor's way (timestamps in fields) on any server.
    df = make(redis_server, DEDUP_BACKEND="hash", DEDUP_EXPIRE=3600, DEDUP_HASH_FIELD_EXPIRY=False)
    bad = [Request(f"http://example.test/bad/{i}", meta={"dedup_expire": value}) for i in range(3)]
    with caplog.at_level(logging.ERROR, logger="scrapy_dedup_suite.dupefilter"):
        assert [df.request_seen(r) for r in bad] == [False, False, False]
        assert [df.request_seen(r) for r in bad] == [True, True, True]
    errors = [r for r in caplog.records if "dedup_expire" in r.getMessage()]
    assert len(errors) == 1, caplog.text
    assert "DEDUP_EXPIRE applies" in errors[0].getMessage()
    assert df.stats.get_value("dedup/invalid_expire") == 6
    # The filter's own expiry (3600 s) applied to them.
    fp = df.fingerprint(bad[0])
    expiry_ms = stored_expiry_ms(df.backend, fp)
    assert expiry_ms - int(server.time()[0]) * 1000 > 3000 * 1000


def test_unknown_backend_lists_valid_names(redis_server):
    with pytest.raises(DedupConfigError) as info:
        make(redis_server, DEDUP_BACKEND="bloomy")
    for name in BACKENDS:
        assert repr(name) in str(info.value)
    with pytest.raises(DedupConfigError, match=r"could not be imported.*'set'"):
        make(redis_server, DEDUP_BACKEND="no.such.module.Backend")
    with pytest.raises(DedupConfigError, match="not a subclass"):
        make(redis_server, DEDUP_BACKEND="collections.OrderedDict")


def test_custom_backend_by_dotted_path(redis_server, server):
    df = make(redis_server, DEDUP_BACKEND="tests.test_dupefilter.RecordingBackend")
    assert isinstance(df.backend, RecordingBackend)
    assert isinstance(df.backend, DedupBackend)
    assert df.key == "myspider:dedup"
    r = requests(1)[0]
    assert df.request_seen(r) is False and df.request_seen(r) is True


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_ERROR_RATE": 1.5}, "DEDUP_BLOOM_ERROR_RATE"),
        ({"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_ERROR_RATE": "0"}, "DEDUP_BLOOM_ERROR_RATE"),
        ({"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_CAPACITY": 0}, "DEDUP_BLOOM_CAPACITY"),
        ({"DEDUP_BACKEND": "windowed-bloom", "DEDUP_WINDOW": "week"}, "DEDUP_WINDOW"),
        ({"DEDUP_BACKEND": "windowed-bloom", "DEDUP_WINDOW_COUNT": 0}, "DEDUP_WINDOW_COUNT"),
        ({"DEDUP_BACKEND": "hash", "DEDUP_EXPIRE": -3}, "DEDUP_EXPIRE"),
        ({"DEDUP_BACKEND": "hash", "DEDUP_HASH_SHARDS": "many"}, "DEDUP_HASH_SHARDS"),
        ({"DEDUP_ON_ERROR": "ignore"}, "DEDUP_ON_ERROR must be one of 'allow', 'raise'"),
        ({"SCHEDULER_DUPEFILTER_KEY": "%(name)s:x"}, "SCHEDULER_DUPEFILTER_KEY"),
        ({"REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL"),
        (
            {"DEDUP_BACKEND": "bloom", "BLOOMFILTER_BIT": 20, "DEDUP_BLOOM_CAPACITY": 10},
            "BLOOMFILTER_BIT",
        ),
        # Absurd sizes: refused at once with the largest sensible value, never a hang.
        (
            {"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_CAPACITY": 10**15},
            r"DEDUP_BLOOM_CAPACITY=1,000,000,000,000,000 .* the largest filter is 4,096 blocks",
        ),
        ({"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_BLOCKS": 10**6}, r"DEDUP_BLOOM_BLOCKS=.*4,096"),
        (
            {"DEDUP_BACKEND": "windowed-bloom", "DEDUP_WINDOW": 1, "DEDUP_WINDOW_COUNT": 10**7},
            r"DEDUP_WINDOW_COUNT .* from 1 to 1,000",
        ),
        (
            {"DEDUP_BACKEND": "windowed-bloom", "DEDUP_WINDOW": 10**9, "DEDUP_WINDOW_COUNT": 7},
            "at most 100 years",
        ),
        ({"DEDUP_BACKEND": "hash", "DEDUP_HASH_SHARDS": 10**6}, r"DEDUP_HASH_SHARDS .* 4,096"),
        ({"SCHEDULER_DUPEFILTER_KEY": "%s"}, r"only placeholder is %\(spider\)s"),
        ({"REDIS_PARAMS": {"socket_timeout": "abc"}}, r"REDIS_PARAMS\['socket_timeout'\]"),
        ({"REDIS_PARAMS": "password=x"}, "REDIS_PARAMS must be a dict of redis-py client"),
        ({"REDIS_URL": 6379}, "REDIS_URL must be a string such as 'redis://"),
        ({"DEDUP_SOCKET_TIMEOUT": 0}, "DEDUP_SOCKET_TIMEOUT"),
        ({"DEDUP_ERROR_RETRIES": 10**9}, "DEDUP_ERROR_RETRIES must be a whole number from 0 to 10"),
        (
            {"DEDUP_BACKEND": "bloom", "BLOOMFILTER_BIT": 30, "BLOOMFILTER_HASH_NUMBER": 10**9},
            "BLOOMFILTER_HASH_NUMBER must be a whole number from 1 to 64",
        ),
    ],
)
def test_bad_settings_fail_at_start(redis_server, settings, match):
    crawler = get_crawler(MySpider, {"REDIS_URL": redis_server.url, **settings})
    with pytest.raises(DedupConfigError, match=match):
        RFPDupeFilter.from_crawler(crawler)


def test_a_literal_percent_in_the_key_template(redis_server, server):
    df = make(redis_server, SCHEDULER_DUPEFILTER_KEY="100%%:%(spider)s")
    assert df.key == "100%:myspider"


def test_legacy_bloomfilter_settings_size_the_filter(redis_server, server):
    df = make(redis_server, DEDUP_BACKEND="bloom", BLOOMFILTER_BIT=20, BLOOMFILTER_HASH_NUMBER=4)
    assert df.backend.params.total_bits == 2**20
    assert df.backend.params.hashes == 4


def test_wrong_type_fails_at_start_under_scrapy_redis(redis_server, server):
    server.sadd("myspider:bloomfilter:meta", "x")
    with pytest.raises(WrongKeyTypeError, match="myspider:bloomfilter:meta"):
        make(redis_server, "spider", DEDUP_BACKEND="bloom")
    server.delete("myspider:bloomfilter:meta")
    server.sadd("{myspider:bloomfilter:0}", "fp")
    with pytest.raises(WrongKeyTypeError, match="migrate-set-to-bloom"):
        make(redis_server, "spider", DEDUP_BACKEND="bloom")
    assert server.smembers("{myspider:bloomfilter:0}") == {b"fp"}


def test_wrong_type_during_crawl_names_the_key_and_lets_each_request_through_once(
    redis_server, server, caplog
):
    """A key damaged mid-crawl: one ERROR naming it, and (DEDUP_ON_ERROR='allow') each
    request it refuses passes once, never dropped and never at every link to it."""
    df = make(redis_server, DEDUP_BACKEND="bloom", DEDUP_BLOOM_CAPACITY=1000)
    strict = make(redis_server, DEDUP_BACKEND="bloom", DEDUP_BLOOM_CAPACITY=1000)
    strict.policy.on_error = "raise"
    server.delete("{myspider:bloomfilter:0}")
    server.rpush("{myspider:bloomfilter:0}", "x")
    caplog.set_level(logging.ERROR)
    first, second = requests(2)
    assert df.request_seen(first) is False
    assert df.request_seen(second) is False
    assert [df.request_seen(r) for r in (first, second, first)] == [True] * 3
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert re.search(r"\{myspider:bloomfilter:0\}.*holds a list", errors[0])
    assert df.stats.get_value("dedup/errors") == 2  # the two let through
    assert df.stats.get_value("dedup/errors/WRONGTYPE") == 2  # (by kind, issue 56)
    assert df.stats.get_value("dedup/unrecorded_filtered") == 3
    assert server.type("{myspider:bloomfilter:0}") == b"list"  # nothing deleted
    # Without a crawl to stop, DEDUP_ON_ERROR='raise' raises the error naming the key.
    with pytest.raises(WrongKeyTypeError, match=r"\{myspider:bloomfilter:0\}.*holds a list"):
        strict.request_seen(requests(1)[0])


def unreachable(**settings) -> RFPDupeFilter:
    crawler = get_crawler(
        MySpider,
        {
            "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "REDIS_PARAMS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
            **settings,
        },
    )
    return RFPDupeFilter.from_crawler(crawler)  # not opened: Redis is down


def test_redis_down_lets_requests_through_by_default(caplog):
    df = unreachable()
    caplog.set_level(logging.WARNING)
    assert df.request_seen(requests(1)[0]) is False
    assert df.stats.get_value("dedup/errors") == 1
    assert df.stats.get_value("dedup/errors/ConnectionError") == 1
    assert "letting it through" in caplog.text


def test_redis_down_raises_when_asked():
    df = unreachable(DEDUP_ON_ERROR="raise")
    with pytest.raises(DedupBackendError, match="Redis failed") as info:
        df.request_seen(requests(1)[0])
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    assert df.stats.get_value("dedup/errors") == 1


def test_log_first_duplicate_then_only_with_debug(redis_server, server, caplog):
    caplog.set_level(logging.DEBUG, logger="scrapy_dedup_suite.dupefilter")
    spider = MySpider()
    df = make(redis_server)
    for r in requests(3):
        df.log(r, spider)
    assert caplog.text.count("Filtered duplicate request") == 1
    assert "no more duplicates will be shown" in caplog.text
    caplog.clear()
    df = make(redis_server, DUPEFILTER_DEBUG=True)
    for r in requests(3):
        df.log(r, spider)
    assert caplog.text.count("Filtered duplicate request") == 3


def test_a_crawl_longer_than_the_expiry_is_warned_of_once(redis_server, server, caplog):
    df = make(redis_server, DEDUP_BACKEND="hash", DEDUP_EXPIRE=60)
    now = [1000.0]
    df.clock = lambda: now[0]
    df.open()  # the crawl's age counts from here
    with caplog.at_level("WARNING"):
        df.request_seen(requests(1)[0])
        now[0] += 59
        df.request_seen(requests(2)[1])
        assert "longer than DEDUP_EXPIRE" not in caplog.text
        now[0] += 2
        df.request_seen(requests(3)[2])
        df.request_seen(requests(4)[3])
    assert caplog.text.count("This crawl has run longer than DEDUP_EXPIRE (60 s)") == 1


def test_a_filter_is_not_warned_about_as_another_when_every_backend_shares_its_key(
    redis_server, server, caplog
):
    """SCHEDULER_DUPEFILTER_KEY without the backend in it gives every backend one key: a
    new filter's own record there is not "this spider's fingerprints elsewhere"."""
    caplog.set_level(logging.WARNING)
    shared = {"SCHEDULER_DUPEFILTER_KEY": "%(spider)s:dupefilter"}
    make(redis_server, DEDUP_BACKEND="compact", **shared)
    assert "holds nothing yet" not in caplog.text


def test_stats_given_after_construction_are_counted_in(redis_server, server):
    df = make(redis_server)
    stats = StatsCollector(get_crawler(MySpider))
    df.stats = stats  # as code written for a filter with a plain attribute does
    for r in requests(2) * 2:
        df.request_seen(r)
    assert stats.get_value("dedup/added") == 2
    assert stats.get_value("dedup/filtered") == 2
