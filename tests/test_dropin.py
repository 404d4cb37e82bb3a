"""Drop-in for scrapy-redis: what its scheduler, its subclasses and its API do, with
every backend; differential tests against scrapy-redis's own class."""

from __future__ import annotations

import logging
import threading

import pytest
import scrapy
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter as ScrapyRedisDupeFilter

from scrapy_dedup_suite.backends import BloomBackend, SetBackend
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import FilterMismatchError

from .conftest import BACKENDS, ROWS
from .helpers import all_keys, crawl, fingerprints, settings_for

ON_CLUSTER = True


class MySpider(scrapy.Spider):
    name = "myspider"


# -- clear() while others record: the filter stays usable --------------------------------


@pytest.mark.parametrize("row", ROWS)
def test_scrapy_redis_flush_on_start_then_a_later_run(
    tmp_path, site, redis_server, redis_settings, server, row
):
    """Run 1 persists; run 2 flushes on start (clear()) and records again; run 3 must
    open the filter and find everything seen (it used to refuse the keys as orphans)."""
    settings = settings_for(
        redis_settings, row, "scrapy-redis", redis_server.url, SCHEDULER_PERSIST=True
    )
    first = crawl(tmp_path, site, settings, "first")["stats"]
    assert first["dedup/added"] == site.pages
    second = crawl(tmp_path, site, {**settings, "SCHEDULER_FLUSH_ON_START": True}, "second")
    assert second["stats"]["dedup/added"] == site.pages, second["log"][-3000:]
    third = crawl(tmp_path, site, settings, "third")
    assert "Traceback" not in third["log"], third["log"][-3000:]
    assert third["stats"]["dedup/filtered"] == 1  # its start page: all was seen
    assert "downloader/response_count" not in third["stats"]


def test_a_worker_goes_on_recording_after_another_clears(make_backend, server):
    cleaner, worker = make_backend(), make_backend()
    cleaner.open()
    worker.open()
    fps = fingerprints(400, salt="clear")
    worker.add_many(fps[:100])
    cleaner.clear()
    # The worker goes on: what it records now is new, and kept with its stamps.
    assert [worker.check_and_add(fp) for fp in fps[100:200]] == [False] * 100
    later = make_backend()
    later.open()  # used to raise FilterMismatchError: data keys without their record
    assert later.contains_many(fps[100:200]) == [True] * 100
    assert later.check_and_add(fps[300]) is False
    assert worker.check_and_add(fps[300]) is True


def test_flushall_under_a_running_worker(make_backend, server):
    worker = make_backend()
    worker.open()
    fps = fingerprints(200, salt="flush")
    worker.add_many(fps[:50])
    server.flushall()  # scripts survive FLUSHALL: no NOSCRIPT tells the worker
    assert [worker.check_and_add(fp) for fp in fps[50:150]] == [False] * 100
    later = make_backend()
    later.open()
    assert later.contains_many(fps[50:150]) == [True] * 100


def test_clears_racing_a_recording_worker(make_backend, server, topology):
    cleaner, worker = make_backend(), make_backend()
    cleaner.open()
    worker.open()
    fps = fingerprints(1500, salt="race")
    done = threading.Event()
    errors: list[BaseException] = []

    def record() -> None:
        try:
            for fp in fps[:1000]:
                worker.check_and_add(fp)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=record)
    thread.start()
    clears = 0
    while not done.is_set() or clears == 0:
        cleaner.clear()
        clears += 1
    thread.join()
    assert errors == []
    # Whatever the interleaving, the filter opens and records.
    assert [worker.check_and_add(fp) for fp in fps[1000:1100]] == [False] * 100
    later = make_backend()
    later.open()
    assert later.contains_many(fps[1000:1100]) == [True] * 100


def test_a_lost_record_is_rebuilt_from_the_stamps_and_other_ones_refused(
    make_backend, server, caplog
):
    first = make_backend()
    first.open()
    fps = fingerprints(100, salt="lost")
    first.add_many(fps)
    spec = first.meta_spec()
    if spec is None:  # scrapy-redis's set keeps no parameter record, nor the test's own
        assert first.name in ("set", "digest-set")
        return
    server.delete(spec.key)
    with caplog.at_level(logging.WARNING):
        again = make_backend()
        again.open()
    assert "recreating the record" in caplog.text
    assert again.contains_many(fps) == [True] * 100
    assert server.exists(spec.key)


def test_stamps_with_other_parameters_are_refused(server, topology):
    small = BloomBackend(server, "t:other", BloomParams.from_capacity(10_000, 0.001, blocks=2))
    small.open()
    small.add_many(fingerprints(100))
    server.delete(small.meta_key)
    big = BloomBackend(server, "t:other", BloomParams.from_capacity(90_000, 0.001, blocks=2))
    with pytest.raises(FilterMismatchError, match=r"block_bits.*found in the stamp"):
        big.open()
    assert not server.exists(small.meta_key)  # nothing was written


@pytest.mark.single_server
def test_a_backend_without_stamps_still_refuses_data_without_its_record(server):
    """The stamps stand in for a lost record only where a backend writes them."""
    from scrapy_dedup_suite.backends import HashBackend

    class Unstamped(HashBackend):
        name = "unstamped"

        def stamp_of(self, data_key):
            return None

    backend = Unstamped(server, "t:unstamped", shards=2)
    backend.open()
    server.hset("t:unstamped:0", "f" * 40, "1")
    server.delete(backend.meta_key)
    with pytest.raises(FilterMismatchError, match=r"'t:unstamped:0' exist but 't:unstamped:meta'"):
        Unstamped(server, "t:unstamped", shards=2).open()
    assert not server.exists(backend.meta_key)


@pytest.mark.single_server
def test_clear_then_reopen_in_a_new_process(tmp_path, site, redis_server, redis_settings, server):
    """A crawl in a new process after another process cleared a hash filter that a
    third one went on recording into."""
    settings = settings_for(redis_settings, "hash", "scrapy", redis_server.url)
    crawl(tmp_path, site, settings, "first")
    df = RFPDupeFilter.from_spider(make_spider(settings))
    df.clear()
    recorder = RFPDupeFilter.from_spider(make_spider(settings))
    urls = [f"{site.url}/page/{n}" for n in range(site.pages)]
    assert not any(recorder.request_seen(Request(u)) for u in urls)
    third = crawl(tmp_path, site, settings, "third")
    assert "downloader/response_count" not in third["stats"], third["log"][-3000:]


def make_spider(settings: dict) -> scrapy.Spider:
    crawler = get_crawler(MySpider, settings)
    spider = MySpider.from_crawler(crawler)
    spider.name = "site"
    return spider


# -- scrapy-redis's API -------------------------------------------------------------------


@pytest.mark.single_server
def test_scrapy_redis_constructor_and_attributes(server):
    df = RFPDupeFilter(server, "myspider:dupefilter", debug=True)
    assert df.debug is True
    assert df.key == "myspider:dupefilter"
    assert isinstance(df.backend, SetBackend)  # the DEDUP_BACKEND default: scrapy-redis's set
    req = Request("http://example.test/a")
    assert df.request_seen(req) is False
    assert df.request_seen(req) is True
    assert server.sismember("myspider:dupefilter", df.request_fingerprint(req))
    # Attributes as scrapy-redis code sets them.
    df.server = server
    assert df.request_seen(req) is True
    df.key = "other:dupefilter"
    assert df.request_seen(req) is False
    assert server.sismember("other:dupefilter", df.request_fingerprint(req))


@pytest.mark.single_server
def test_scrapy_redis_constructor_with_project_settings(server):
    settings = Settings({"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_CAPACITY": 1000})
    df = RFPDupeFilter(server, "p:bloomfilter", settings=settings)
    assert isinstance(df.backend, BloomBackend)
    assert df.backend.params.capacity == 1000
    req = Request("http://example.test/b")
    assert [df.request_seen(req), df.request_seen(req)] == [False, True]
    df.key = "elsewhere"
    assert df.request_seen(req) is False
    assert server.exists("elsewhere:meta") and server.exists("{elsewhere:0}")


@pytest.mark.single_server
def test_a_custom_backend_that_cannot_move_says_so(server):
    class Custom(SetBackend):
        name = "custom"

        def with_key(self, key):
            return super(SetBackend, self).with_key(key)

    df = RFPDupeFilter(Custom(server, "c:dupefilter"))
    with pytest.raises(AttributeError, match="SCHEDULER_DUPEFILTER_KEY"):
        df.key = "elsewhere"
    assert df.key == "c:dupefilter"


@pytest.mark.single_server
def test_constructor_errors_say_what_to_do(server):
    with pytest.raises(TypeError, match="needs the Redis key"):
        RFPDupeFilter(server)
    with pytest.raises(TypeError, match="either a backend or"):
        RFPDupeFilter(SetBackend(server, "k"), "k")


@pytest.mark.single_server
def test_from_settings_as_scrapy_redis(redis_server, server):
    df = RFPDupeFilter.from_settings(Settings({"REDIS_URL": redis_server.url}))
    ref = ScrapyRedisDupeFilter.from_settings(Settings({"REDIS_URL": redis_server.url}))
    assert df.key.startswith("dupefilter:") and ref.key.startswith("dupefilter:")
    req = Request("http://example.test/c")
    assert [df.request_seen(req), df.request_seen(req)] == [False, True]
    assert server.type(df.key) == b"set"


@pytest.mark.single_server
def test_a_subclass_in_scrapy_redis_bloomfilter_style(server):
    """Subclasses call super().__init__(server, key, debug) and add their own state."""

    class Legacy(RFPDupeFilter):
        def __init__(self, server, key, debug, bit):
            super().__init__(server, key, debug)
            self.bit = bit

    df = Legacy(server, "legacy:dupefilter", False, 30)
    req = Request("http://example.test/d")
    assert [df.request_seen(req), df.request_seen(req)] == [False, True]
    assert df.bit == 30


@pytest.mark.single_server
@pytest.mark.parametrize("row", ROWS)
def test_a_subclass_request_fingerprint_is_honoured(server, row):
    class IgnoresSession(RFPDupeFilter):
        def request_fingerprint(self, request):
            return super().request_fingerprint(request.replace(url=request.url.split("?")[0]))

    backend = BACKENDS[row](server, "t:sub")
    df = IgnoresSession(backend)
    df.open()
    assert df.request_seen(Request("http://example.test/p?session=1")) is False
    assert df.request_seen(Request("http://example.test/p?session=2")) is True
    # Without the override, the two are different requests.
    plain = RFPDupeFilter(BACKENDS[row](server, "t:plain"))
    plain.open()
    assert plain.request_seen(Request("http://example.test/p?session=1")) is False
    assert plain.request_seen(Request("http://example.test/p?session=2")) is False


# -- differential: the same scenarios through scrapy-redis's class and ours ----------------


def scenario() -> list[Request]:
    """Requests that differ (or not) by method, body, canonical URL, fragment,
    headers and meta, each offered twice, interleaved."""
    base = "http://example.test/page"
    requests = [
        Request(f"{base}?b=2&a=1"),
        Request(f"{base}?a=1&b=2"),  # the same canonical URL
        Request(f"{base}?a=1&b=2#frag"),  # fragments are ignored
        Request(f"{base}?a=1&b=2", method="POST"),
        Request(f"{base}?a=1&b=2", method="POST", body=b"x=1"),
        Request(f"{base}?a=1&b=2", method="POST", body=b"x=2"),
        Request(f"{base}?a=1&b=2", headers={"Accept-Language": "de"}),  # headers ignored
        Request(f"{base}?a=1&b=2", meta={"anything": 1}),  # meta ignored
        Request("http://EXAMPLE.test/page?a=1&b=2"),
        Request("http://example.test/other"),
    ]
    return requests + list(reversed(requests))


@pytest.mark.parametrize("row", ROWS)
def test_request_seen_matches_scrapy_redis(server, topology, row):
    key_ref, key_ours = "ref:dupefilter", "ours:dupefilter"
    ours = RFPDupeFilter(BACKENDS[row](server, key_ours))
    ours.open()
    answers_ours = [ours.request_seen(r) for r in scenario()]
    ref = ScrapyRedisDupeFilter(server, key_ref)
    ref_answers = [ref.request_seen(r) for r in scenario()]
    assert answers_ours == ref_answers
    assert 4 <= sum(not a for a in answers_ours) < len(answers_ours) / 2


@pytest.mark.single_server
@pytest.mark.parametrize("debug", [False, True])
def test_logging_of_duplicates_matches_scrapy_redis(server, caplog, debug):
    crawler = get_crawler(MySpider)
    spider = MySpider.from_crawler(crawler)
    logs = {}
    for name, df in {
        "ref": ScrapyRedisDupeFilter(server, "ref:log", debug=debug),
        "ours": RFPDupeFilter(server, "ours:log", debug=debug),
    }.items():
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            for r in scenario():
                if df.request_seen(r):
                    df.log(r, spider)
        logs[name] = [rec.getMessage() for rec in caplog.records if "Filtered" in rec.getMessage()]
    assert logs["ours"] == logs["ref"]
    seen = sum(ScrapyRedisDupeFilter(server, "ref:count").request_seen(r) for r in scenario())
    assert len(logs["ours"]) == (seen if debug else 1)


@pytest.mark.single_server
def test_scrapys_own_stat_is_counted(redis_server, server):
    crawler = get_crawler(MySpider, {"REDIS_URL": redis_server.url, "DEDUP_BACKEND": "bloom"})
    df = RFPDupeFilter.from_crawler(crawler)
    df.open()
    seen = sum(df.request_seen(r) for r in scenario())
    assert seen > 0
    stats = crawler.stats
    assert stats.get_value("dupefilter/filtered") == seen
    assert stats.get_value("dedup/filtered") == seen
    assert stats.get_value("bloomfilter/filtered") == seen
    assert all_keys(server)  # it wrote to the test server
