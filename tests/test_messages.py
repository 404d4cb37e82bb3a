"""What a user sees when Redis cannot be reached: one line naming the server and
what to check, and a documented exit code, from a crawl and from each command."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from scrapy_dedup_suite.embedded import free_port

from .helpers import ROOT, crawl, fingerprints, janitor_hash
from .servers import Site

SPIDER = """
import scrapy


class OneSpider(scrapy.Spider):
    name = "one"
    start_urls = ["http://127.0.0.1:9/"]

    def parse(self, response):
        pass
"""


def scrapy_cmd(*args: str, cwd=ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.fixture
def dead_url() -> str:
    """A URL where nothing listens."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.mark.parametrize("backend", ["set", "bloom"])
def test_a_crawl_whose_redis_is_unreachable_stops_with_one_line(tmp_path, dead_url, backend):
    (tmp_path / "one.py").write_text(SPIDER)
    proc = scrapy_cmd(
        "runspider", "one.py",
        "-s", "DUPEFILTER_CLASS=scrapy_dedup_suite.dupefilter.RFPDupeFilter",
        "-s", f"DEDUP_REDIS_URL={dead_url}",
        "-s", f"DEDUP_BACKEND={backend}",
        "-s", "TELNETCONSOLE_ENABLED=False",
        cwd=tmp_path,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    port = dead_url.rsplit(":", 1)[1].split("/")[0]
    line = next(x for x in out.splitlines() if "Cannot reach Redis" in x)
    assert f"127.0.0.1:{port}" in line and "DEDUP_REDIS_URL" in line
    assert "DEDUP_ON_ERROR does not apply at start-up" in line
    # redis-py's own traceback (socket, connect, retry) is not shown.
    assert "redis/connection.py" not in out


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("migrate-set-to-bloom", ["--spider", "s"]),
        ("migrate-set-to-bloom", ["--spider", "s", "--dry-run"]),
        ("dedup-janitor", ["--spider", "s", "--once"]),
        ("dedup-info", ["--spider", "s"]),
    ],
)
def test_a_command_whose_redis_is_unreachable_exits_6_with_one_line(dead_url, command, args):
    proc = scrapy_cmd(command, *args, "-s", f"REDIS_URL={dead_url}", "-s", "DEDUP_BACKEND=hash")
    assert proc.returncode == 6, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{command}: Cannot reach Redis at 127.0.0.1:")
    assert "REDIS_URL" in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("migrate-set-to-bloom", ["--spider", "s", "--dry-run"]),
        ("dedup-janitor", ["--spider", "s", "--once"]),
        ("dedup-info", ["--spider", "s"]),
    ],
)
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("DEDUP_BACKEND=blom", "Unknown DEDUP_BACKEND 'blom': use one of 'set'"),
        ("DEDUP_REDIS_SENTINELS=127.0.0.1", "'127.0.0.1' is not a host:port address"),
    ],
)
def test_a_command_refuses_what_the_crawl_refuses_in_one_line(
    dead_url, command, args, setting, message
):
    proc = scrapy_cmd(command, *args, "-s", f"REDIS_URL={dead_url}", "-s", setting)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{command}: ") and message in lines[0]


SUMMARY = ("EXTENSIONS", "scrapy_dedup_suite.summary.DedupSummary")


@pytest.mark.parametrize(
    ("component", "setting", "message"),
    [
        (SUMMARY, "DEDUP_BACKEND=blom", "Unknown DEDUP_BACKEND 'blom': use one of 'set'"),
        (SUMMARY, "DEDUP_BLOOM_CAPACITY=-5", "DEDUP_BLOOM_CAPACITY must be a whole number"),
        (SUMMARY, "DEDUP_BLOOM_ERROR_RATE=2", "DEDUP_BLOOM_ERROR_RATE must be a false-positive"),
        (
            ("EXTENSIONS", "scrapy_dedup_suite.janitor.JanitorExtension"),
            "DEDUP_BACKEND=blom",
            "Unknown DEDUP_BACKEND 'blom'",
        ),
        (
            ("SPIDER_MIDDLEWARES", "scrapy_dedup_suite.middleware.BatchDedupMiddleware"),
            "DEDUP_BACKEND=blom",
            "Unknown DEDUP_BACKEND 'blom'",
        ),
    ],
)
def test_a_bad_setting_ends_the_crawl_with_its_own_error_before_the_engine_starts(
    tmp_path, dead_url, component, setting, message
):
    """With one of the package's components that Scrapy builds before its engine, a
    setting the dupefilter would refuse ends the crawl there: the package's message as
    one line, last; no traceback, none of the engine's shutdown errors."""
    (tmp_path / "one.py").write_text(SPIDER)
    kind, path = component
    proc = scrapy_cmd(
        "runspider", "one.py",
        "-s", "DUPEFILTER_CLASS=scrapy_dedup_suite.dupefilter.RFPDupeFilter",
        "-s", f"DEDUP_REDIS_URL={dead_url}",
        "-s", "DEDUP_BACKEND=bloom",
        "-s", setting,
        "-s", f"{kind}={json.dumps({path: 500})}",
        "-s", "TELNETCONSOLE_ENABLED=False",
        cwd=tmp_path,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert_one_line_last(out, message)
    assert "Spider opened" not in out


def test_a_filter_opened_with_another_capacity_says_so_in_the_users_terms(redis_server):
    url = redis_server.url
    common = ["-s", f"REDIS_URL={url}", "-s", "DEDUP_BACKEND=bloom"]
    client = redis.Redis.from_url(url)
    client.flushall()
    client.sadd("s:dupefilter", *fingerprints(100, "capacity"))
    made = scrapy_cmd("migrate-set-to-bloom", "--spider", "s", "--capacity", "200000", *common)
    assert made.returncode == 0, made.stderr[-2000:]
    again = scrapy_cmd("migrate-set-to-bloom", "--spider", "s", "--capacity", "1000", *common)
    assert again.returncode == 4
    message = again.stderr.strip().splitlines()[-1]
    assert "capacity: stored '200,000', configured '1000'" in message
    assert "(DEDUP_BLOOM_CAPACITY, or --capacity of migrate-set-to-bloom)" in message
    assert "Set DEDUP_BLOOM_CAPACITY = 200000 as when it was created" in message
    assert "block_bits" not in message


def test_an_empty_filter_beside_another_backends_fingerprints_warns(tmp_path, site, redis_server):
    base = {"REDIS_URL": redis_server.url, "DEDUP_BLOOM_CAPACITY": 100_000}
    redis.Redis.from_url(redis_server.url).flushall()
    first = crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "set"}, "set")
    assert "holds nothing yet" not in first["log"]  # nothing anywhere: nothing to say
    # bloom after set: the set's fingerprints are not seen; said once, with the fix.
    second = crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "bloom"}, "bloom")
    warning = next(x for x in second["log"].splitlines() if "holds nothing yet" in x)
    assert "'site:dupefilter' is a scrapy-redis fingerprint set of 200" in warning
    assert "`scrapy migrate-set-to-bloom --spider site --to bloom`" in warning
    assert second["stats"]["dedup/added"] == site.pages  # re-crawled, as the warning said
    # hash after bloom and set: both named, the set's conversion into hash offered.
    third = crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "hash"}, "hash")
    warning = next(x for x in third["log"].splitlines() if "holds nothing yet" in x)
    assert "site:bloomfilter:meta records a bloom filter" in warning
    assert "set DEDUP_BACKEND = 'bloom' to go on with it" in warning
    assert "set DEDUP_BACKEND = 'set' to go on with it" in warning
    assert "`scrapy migrate-set-to-bloom --spider site --to hash`" in warning
    # A filter that holds fingerprints is not warned about.
    again = crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "bloom"}, "bloom-again")
    assert "holds nothing yet" not in again["log"]


def test_a_bloom_filter_at_the_sets_own_key_warns(tmp_path, site, redis_server):
    base = {
        "REDIS_URL": redis_server.url,
        "DEDUP_BLOOM_CAPACITY": 100_000,
        "SCHEDULER_DUPEFILTER_KEY": "%(spider)s:dupefilter",
    }
    redis.Redis.from_url(redis_server.url).flushall()
    crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "set"}, "set")
    bloom = crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "bloom"}, "bloom")
    warning = next(x for x in bloom["log"].splitlines() if "holds nothing yet" in x)
    assert "'site:dupefilter' is a scrapy-redis fingerprint set of 200" in warning


@pytest.mark.parametrize(
    ("size", "shown"),
    [(0, "0 B"), (1023, "1,023 B"), (20_971_827, "20.0 MiB"), (17.1 * 2**20, "17.1 MiB"),
     (3 * 2**30, "3.0 GiB"), (5 * 2**40, "5.0 TiB")],
)  # fmt: skip
def test_memory_is_written_one_way(size, shown):
    from scrapy_dedup_suite.core.config import human_bytes

    assert human_bytes(size) == shown


def test_dedup_info_shows_what_each_backend_holds(redis_server):
    from scrapy_dedup_suite.backends import BloomBackend, CompactBackend, SetBackend
    from scrapy_dedup_suite.core.bloom_math import BloomParams

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    fps = fingerprints(300, "info")
    SetBackend(client, "site:dupefilter").add_many(fps)
    hashes = janitor_hash(client, "site:dedup-hash", shards=4)
    hashes.open()
    hashes.add_many(fps[:100], expire=0.001)
    hashes.add_many(fps[100:], expire=3600)
    bloom = BloomBackend(client, "site:bloomfilter", BloomParams.from_capacity(50_000, 0.001))
    bloom.open()
    bloom.add_many(fps)
    compact = CompactBackend(client, "site:dedup-compact", capacity=20_000, shards=4)
    compact.open()
    compact.add_many(fps)
    before = sorted(client.scan_iter())
    url = redis_server.url
    common = ["--spider", "site", "-s", f"REDIS_URL={url}", "-s", "DEDUP_HASH_SHARDS=4",
              "-s", "DEDUP_COMPACT_CAPACITY=20000"]  # fmt: skip
    text = scrapy_cmd("dedup-info", *common)
    assert text.returncode == 0, text.stderr[-2000:]
    out = text.stdout
    assert "set (DEDUP_BACKEND) at 'site:dupefilter': 1 key(s)" in out
    assert "300 fingerprints (exact)" in out
    assert "300 fields in 4 shard(s)" in out and "of 300 sampled, 100 expired" in out
    # What the fields hold (3,600 s), not only the configured DEDUP_EXPIRE (7 days).
    last = re.search(r"the last expires in ([\d,]+) s", out)
    assert last and 3000 < int(last.group(1).replace(",", "")) <= 3600
    assert "new ones get 604800 s (DEDUP_EXPIRE as configured now" in out
    # The bloom filter was made for another capacity than the settings': shown as stored.
    assert "bloom at 'site:bloomfilter': stored with other parameters" in out
    assert "capacity: stored '50,000', configured '10,000,000'" in out
    assert "windowed-bloom at 'site:windowed-bloom': nothing stored" in out
    # The buckets are counted (HLEN of each that exists), not estimated from the sample.
    buckets = compact.buckets
    held = compact.census()[0]
    assert f"300 fingerprints (counted) in {held} of {buckets} buckets over 4 shard(s)" in out
    assert f"of {buckets} sampled buckets, 0 left the compact encoding" in out
    as_json = scrapy_cmd("dedup-info", *common, "-s", "DEDUP_BLOOM_CAPACITY=50000", "--json")
    found = json.loads(as_json.stdout)
    assert found["bloom"]["stored"] and 290 < found["bloom"]["estimated_items"] < 310
    (fill,) = found["bloom"]["filters"]  # the janitor's report of it, as JSON
    assert fill["capacity"] == 50_000 and 290 < fill["estimated_items"] < 310
    (fields,) = found["hash"]["contents"]
    assert fields["kind"] == "HashFields" and fields["sample"]["expired"] == 100
    assert found["windowed-bloom"]["stored"] is False
    (sampled,) = found["compact"]["contents"]
    assert sampled["kind"] == "CompactBuckets" and sampled["sampled_fields"] == 300
    # It only reads: the keys are those written above, and no more.
    assert sorted(client.scan_iter()) == before


def test_the_set_converts_into_hash_from_the_command_line(tmp_path, site, redis_server):
    """The conversion the warning offers for hash, then a crawl that filters it all."""
    base = {"REDIS_URL": redis_server.url, "DEDUP_HASH_SHARDS": 4}
    redis.Redis.from_url(redis_server.url).flushall()
    crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "set"}, "set")
    args = ["--spider", "site", "--to", "hash", "-s", f"REDIS_URL={redis_server.url}"]
    dry = scrapy_cmd("migrate-set-to-bloom", *args, "--dry-run", "-s", "DEDUP_HASH_SHARDS=4")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "exact; each stays seen for 604,800 s (DEDUP_EXPIRE)" in dry.stdout
    assert "warning" not in dry.stderr
    done = scrapy_cmd("migrate-set-to-bloom", *args, "-s", "DEDUP_HASH_SHARDS=4")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "migrated 200 fingerprints" in done.stdout
    again = crawl(tmp_path, site, {**base, "DEDUP_BACKEND": "hash"}, "hash")
    assert "downloader/response_count" not in again["stats"]  # the start page too was seen
    assert "holds nothing yet" not in again["log"]


def test_a_dry_run_says_what_the_sets_size_implies(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.sadd("s:dupefilter", *fingerprints(3000, "sizing"))
    args = ["--spider", "s", "--dry-run", "-s", f"REDIS_URL={redis_server.url}"]
    default = scrapy_cmd("migrate-set-to-bloom", *args)
    assert default.returncode == 0, default.stderr[-2000:]
    hint = next(x for x in default.stdout.splitlines() if x.startswith("sizing"))
    assert "3,333x what the set holds" in hint
    assert "DEDUP_BLOOM_CAPACITY = 30000" in hint and "instead of 17.1 MiB" in hint
    sized = scrapy_cmd("migrate-set-to-bloom", *args, "--capacity", "30000")
    assert "sizing" not in sized.stdout  # a capacity that fits: nothing to say
    assert client.keys("s:bloomfilter*") == []  # a dry run writes nothing


def test_an_unreachable_redis_under_scrapy_redis_scheduler_ends_with_the_packages_line(
    tmp_path, dead_url
):
    """With the add-on, a wrong REDIS_URL under scrapy-redis's scheduler: the package's
    message naming the server as the one last line (scrapy-redis's own ping, and the
    engine's 'Engine slot not assigned', never come)."""
    (tmp_path / "one.py").write_text(SPIDER)
    proc = scrapy_cmd(
        "runspider", "one.py",
        "-s", "ADDONS=" + json.dumps({"scrapy_dedup_suite.Addon": 300}),
        "-s", "SCHEDULER=scrapy_redis.scheduler.Scheduler",
        "-s", f"REDIS_URL={dead_url}",
        "-s", "TELNETCONSOLE_ENABLED=False",
        cwd=tmp_path,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    port = dead_url.rsplit(":", 1)[1].split("/")[0]
    assert_one_line_last(out, f"Cannot reach Redis at 127.0.0.1:{port} db 0 (from REDIS_URL)")


def assert_one_line_last(out: str, message: str) -> None:
    """The crawl's output ends with the package's error as one line, with no traceback
    anywhere (asyncio's, Twisted's or the engine's)."""
    assert "Traceback" not in out and "Engine slot not assigned" not in out, out[-4000:]
    last = out.strip().splitlines()[-1]
    assert "[scrapy_dedup_suite] ERROR: " in last and message in last, out[-4000:]


def addon_runspider(tmp_path, scheduler: str, settings: list[str], exits: int = 1) -> str:
    """``scrapy runspider`` with the add-on, ``scheduler`` and ``settings`` (NAME=VALUE),
    expected to exit with ``exits`` (1: it fails): its output."""
    (tmp_path / "one.py").write_text(SPIDER)
    given = [f"ADDONS={json.dumps({'scrapy_dedup_suite.Addon': 300})}", f"SCHEDULER={scheduler}"]
    options = [arg for name in [*given, *settings] for arg in ("-s", name)]
    proc = scrapy_cmd(
        "runspider", "one.py", *options, "-s", "TELNETCONSOLE_ENABLED=False", cwd=tmp_path
    )
    assert proc.returncode == exits, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    """A port where an HTTP server, not Redis, answers."""
    site = Site(pages=1).start()
    yield site.port
    site.stop()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:{http}/0", "did not answer in Redis's protocol"),
        ("redis://127.0.0.1:{redis}/99", "has no such database"),
        ("redsi://127.0.0.1:{redis}/0", "Cannot build a Redis client from REDIS_URL='redsi://"),
        ("redis://127.0.0.1:{dead}/0", "Cannot reach Redis at 127.0.0.1:{dead} db 0"),
    ],
    ids=["http-port", "db-out-of-range", "misspelt-scheme", "refused"],
)
@pytest.mark.parametrize("frontier", [False, True], ids=["scrapy-redis", "frontier"])
def test_every_wrong_redis_url_is_one_line_last(
    tmp_path, redis_server, http_port, dead_url, url, message, frontier
):
    ports = {"http": http_port, "redis": redis_server.port, "dead": dead_url.split(":")[2][:-2]}
    url, message = url.format(**ports), message.format(**ports)
    settings = [f"DEDUP_FRONTIER={frontier}", f"REDIS_URL={url}"]
    out = addon_runspider(tmp_path, "scrapy_redis.scheduler.Scheduler", settings)
    assert_one_line_last(out, message)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("FRONTIER_LEASE=abc", "FRONTIER_LEASE must be a number of seconds > 0"),
        ("FRONTIER_LEASE=1e9", "at most 86,400, got '1e9'"),
        ("FRONTIER_PREFETCH=-1", "FRONTIER_PREFETCH must be a whole number from 0 to 10000"),
        ("DEDUP_BACKEND=compcat", "Unknown DEDUP_BACKEND 'compcat'"),
        (
            "DUPEFILTER_CLASS=tests.crawl.OwnDupeFilter",
            "The frontier scheduler records and enqueues each request",
        ),
        ("FRONTIER_REQUEST_CLASSES=builtins.dict", "not a subclass of scrapy.Request"),
        ("SCHEDULER_SERIALIZER=no.such.module", "SCHEDULER_SERIALIZER = 'no.such.module'"),
    ],
)
def test_every_bad_frontier_setting_is_one_line_last(tmp_path, redis_server, setting, message):
    frontier = "scrapy_dedup_suite.frontier.scheduler.Scheduler"
    out = addon_runspider(tmp_path, frontier, [f"REDIS_URL={redis_server.url}", setting])
    assert_one_line_last(out, message)


def test_scrapy_redis_s_pickled_queue_is_taken_over_only_when_asked(tmp_path, redis_server):
    """scrapy-redis's persisted queue holds pickles: the frontier's open refuses to read
    them in one line naming FRONTIER_READ_PICKLE, with no traceback, and the worker
    stops leaving them (and the fingerprints) as they were (issue 53)."""
    import pickle

    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    member = pickle.dumps({"url": "http://127.0.0.1:9/x", "callback": "parse"}, -1)
    client.zadd("one:requests", {member: 0})
    client.sadd("one:dupefilter", "0" * 40)
    frontier = "scrapy_dedup_suite.frontier.scheduler.Scheduler"
    out = addon_runspider(tmp_path, frontier, [f"REDIS_URL={redis_server.url}"], exits=0)
    assert "Traceback" not in out, out[-4000:]
    said = [line for line in out.splitlines() if "FRONTIER_READ_PICKLE" in line]
    assert len(said) == 1 and " ERROR: " in said[0], out[-4000:]
    assert "'finish_reason': 'frontier_key_refused'" in out
    assert client.zrange("one:requests", 0, -1) == [member]
    assert client.smembers("one:dupefilter") == {b"0" * 40}


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("migrate-set-to-bloom", ["--spider", "s", "--dry-run"]),
        ("dedup-janitor", ["--spider", "s", "--once"]),
        ("dedup-info", ["--spider", "s"]),
        ("dedup-forget", ["--spider", "s", "http://example.com/"]),
        ("frontier-handback", ["--spider", "s"]),
        ("convert-hash-layout", ["--spider", "s"]),
        ("convert-to-growing", ["--spider", "s"]),
    ],
)
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:{http}/0", "did not answer in Redis's protocol"),
        ("redis://127.0.0.1:{redis}/99", "has no such database"),
    ],
    ids=["http-port", "db-out-of-range"],
)
def test_a_command_given_a_url_that_is_no_redis_of_its_own_says_so_in_one_line(
    redis_server, http_port, command, args, url, message
):
    url = url.format(http=http_port, redis=redis_server.port)
    proc = scrapy_cmd(command, *args, "-s", f"REDIS_URL={url}", "-s", "DEDUP_BACKEND=hash")
    assert proc.returncode == 6, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{command}: ") and message in lines[0] and "REDIS_URL" in lines[0]


def test_the_summary_with_redis_gone_at_the_close_is_one_line(dead_url, caplog):
    """Redis gone at the close: the summary says in one WARNING that it was skipped and
    why; nothing is raised into Scrapy's signal handler (which logged a traceback)."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.summary import DedupSummary

    class OneSpider(Spider):
        name = "one"

    crawler = get_crawler(OneSpider, {"REDIS_URL": dead_url, "DEDUP_BACKEND": "compact"})
    with caplog.at_level(logging.INFO):
        DedupSummary.from_crawler(crawler).spider_closed(OneSpider(), "finished")
    said = [r for r in caplog.records if r.name == "scrapy_dedup_suite.summary"]
    assert len(said) == 1 and said[0].levelname == "WARNING" and said[0].exc_info is None
    assert "Dedup summary skipped" in said[0].getMessage()
    assert "Connection refused" in said[0].getMessage() or "Error" in said[0].getMessage()


@pytest.mark.parametrize(
    ("scheduler", "setting", "other"),
    [
        ("scrapy_redis.scheduler.Scheduler", "SCHEDULER_DUPEFILTER_KEY", None),
        ("scrapy_dedup_suite.frontier.scheduler.Scheduler", "SCHEDULER_QUEUE_KEY",
         "SCHEDULER_DUPEFILTER_KEY=eu-shop:dupefilter"),
    ],
    ids=["dupefilter", "frontier"],
)  # fmt: skip
def test_a_spider_name_with_a_brace_is_refused_in_one_line_and_its_advice_is_taken(
    tmp_path, redis_server, scheduler, setting, other
):
    """Issue 53: a spider 'shop{eu}' had keys whose Cluster hash tag was 'eu', as for any
    spider '...{eu}': the frontier's queue '{eu}:frontier' shared by them. Refused now
    before the engine starts, naming the key setting; a key without %(spider)s, as the
    message advises, is accepted."""
    (tmp_path / "one.py").write_text(SPIDER.replace('name = "one"', 'name = "shop{eu}"'))
    addon = f"ADDONS={json.dumps({'scrapy_dedup_suite.Addon': 300})}"
    given = [addon, f"SCHEDULER={scheduler}", f"REDIS_URL={redis_server.url}"]
    given += [other] if other else []
    options = [arg for name in given for arg in ("-s", name)]
    run = functools.partial(
        scrapy_cmd, "runspider", "one.py", *options, "-s", "TELNETCONSOLE_ENABLED=False",
        cwd=tmp_path,
    )  # fmt: skip
    refused = run()
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1, out[-3000:]
    assert_one_line_last(
        out, f"The spider name 'shop{{eu}}' has a brace, which in the Redis keys {setting}"
    )
    taken = run("-s", f"{setting}=eu-shop:{setting.lower()}")
    assert "has a brace" not in taken.stdout + taken.stderr, (taken.stdout + taken.stderr)[-3000:]
    assert "Spider closed (finished)" in taken.stderr, taken.stderr[-3000:]
