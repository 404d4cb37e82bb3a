"""convert-hash-layout: a hash filter of layout 1 (shards) into buckets, in place. The
converted filter answers what the old one answered (every unexpired fingerprint seen,
with no shorter expiry; new ones new), a worker left on the old layout is refused, an
interrupted conversion goes on where it stopped, and every refusal writes nothing."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import BloomBackend, HashBackend, build_backend
from scrapy_dedup_suite.backends.expiry import stored_layout
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.operations.migrations.errors import TargetError
from scrapy_dedup_suite.operations.migrations.hash_layout import HashLayoutConversion
from scrapy_dedup_suite.server.failures import code_of
from scrapy_dedup_suite.settings.options import HashOptions

from .helpers import crawl, fingerprints, snapshot, stored_expiry_ms
from .helpers import run_command as command
from .servers import poll_until

ON_CLUSTER = True  # shards, stamps and buckets spread over the masters

KEY = "t:h"
SETTINGS = {"DEDUP_BACKEND": "hash", "DEDUP_COMPACT_CAPACITY": 20_000, "DEDUP_HASH_SHARDS": 4}


def options(**settings: Any) -> HashOptions:
    return HashOptions.from_settings(Settings({**SETTINGS, **settings}))


def server_ms(server: Any) -> int:
    seconds, micros = server.time()
    return int(seconds) * 1000 + int(micros) // 1000


def layout_1(server: Any, field_expiry: bool = False) -> HashBackend:
    old = HashBackend(server, KEY, shards=4, field_expiry=field_expiry)
    old.open()
    return old


def seeded(server: Any) -> tuple[HashBackend, list[str], list[str], list[str]]:
    """A layout-1 filter holding fingerprints that expired, ones that stay an hour
    (DEDUP_EXPIRE) and ones that stay two (a request's own expiry)."""
    old = layout_1(server)
    expired, hour, two = fingerprints(200, "x"), fingerprints(1500, "h"), fingerprints(300, "t")
    old.add_many(expired, expire=0.05)
    old.add_many(hour, expire=3600)
    old.add_many(two, expire=7200)
    deadline = max(stored_expiry_ms(old, fp) for fp in expired)
    poll_until(lambda: server_ms(server) >= deadline, timeout=30)
    return old, expired, hour, two


def test_the_buckets_answer_what_the_shards_answered(server):
    old, expired, hour, two = seeded(server)
    before = {fp: stored_expiry_ms(old, fp) for fp in hour + two}
    fresh = fingerprints(500, "new")
    asked = expired + hour + two + fresh
    # What the old filter answers, without recording (the fresh ones are not in it).
    answers_before = old.contains_many(asked)
    started = server_ms(server)

    # DEDUP_HASH_SHARDS unset: the filter's shards (4, where a new one would get 16).
    report = HashLayoutConversion(server, KEY, options(DEDUP_HASH_SHARDS=None), batch=100).run()
    took = server_ms(server) - started

    assert stored_layout(server, KEY, 4) == "buckets"
    new = build_backend(Settings(SETTINGS), "t", server=server, key=KEY)
    assert isinstance(new, HashBucketsBackend)
    new.open()
    assert new.contains_many(asked) == answers_before
    assert report.copied == len(hour) + len(two)
    assert report.expired == len(expired)
    assert report.present == report.invalid == 0
    assert report.verified > 0
    for fp, was in before.items():  # each keeps its expiry: never less, about a second more
        assert was <= stored_expiry_ms(new, fp) <= was + 1000 + took
    # The expired ones were left behind (no field in the buckets), and the shards kept.
    assert new.count() == len(hour) + len(two)
    assert old._fields() == len(asked) - len(fresh)
    # A crawl going on records and answers in the buckets.
    assert new.check_and_add_many(fresh + hour[:10]) == [False] * len(fresh) + [True] * 10
    assert server.exists(f"{KEY}:migration") == 0


def test_a_worker_left_on_the_old_layout_is_refused(server):
    old, _, hour, _ = seeded(server)
    HashLayoutConversion(server, KEY, options()).run()
    with pytest.raises(redis.ResponseError) as refused:
        old.check_and_add_many(fingerprints(20, "late"))
    assert code_of(refused.value) == "dedup:STAMP"
    # ... and one that opens it again gets the buckets.
    again = build_backend(Settings(SETTINGS), "t", server=server, key=KEY)
    again.open()
    assert again.contains_many(hour[:50]) == [True] * 50


def test_delete_source_removes_what_was_copied_and_keeps_a_damaged_field(server):
    old, expired, hour, two = seeded(server)
    shard = old.shard_of("damaged")
    server.hset(shard, "damaged", "not an expiry")
    report = HashLayoutConversion(server, KEY, options(), verify="all").run(delete_source=True)
    assert report.invalid == 1
    assert report.verified == len(hour) + len(two)
    assert report.removed == len(expired) + len(hour) + len(two)
    assert report.kept == 1 and not report.source_deleted
    assert server.hgetall(shard) == {b"damaged": b"not an expiry"}
    assert all(server.exists(k) == 0 for k in old.shard_keys if k != shard)
    new = build_backend(Settings(SETTINGS), "t", server=server, key=KEY)
    assert new.contains_many(hour + two) == [True] * (len(hour) + len(two))


class Stop(Exception):
    pass


def test_an_interrupted_conversion_goes_on_where_it_stopped(server):
    _, _, hour, two = seeded(server)
    calls = []

    def stop_after_a_few(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 5:
            raise Stop

    with pytest.raises(Stop):
        HashLayoutConversion(server, KEY, options(), batch=50, progress=stop_after_a_few).run()
    # Switched already: a crawler started now opens the buckets.
    assert stored_layout(server, KEY, 4) == "buckets"
    state = server.hgetall(f"{KEY}:migration")
    assert state[b"mode"] == b"convert-hash-layout"

    # Settings that differ from the conversion's are refused, with what to set...
    other = HashLayoutConversion(server, KEY, options(DEDUP_COMPACT_CAPACITY=40_000))
    with pytest.raises(TargetError, match="Set DEDUP_COMPACT_CAPACITY = 20000"):
        other.plan()
    # ... and the conversion goes on from the shard and cursor it saved.
    rerun = HashLayoutConversion(server, KEY, options(), batch=50, verify="all")
    plan = rerun.plan()
    assert plan.state == "resume"
    assert (plan.shard, plan.cursor) == (int(state[b"shard"]), int(state[b"cursor"]))
    assert (plan.shard, plan.cursor) != (0, 0)
    report = rerun.run()
    assert report.verified == len(hour) + len(two)
    # The rerun read only what the first run had not: it did not start over.
    assert 0 < report.copied + report.present < len(hour) + len(two)
    assert new_count(server) == len(hour) + len(two)
    assert server.exists(f"{KEY}:migration") == 0
    # Run once more: the shards that are left are checked again, nothing is lost.
    last = HashLayoutConversion(server, KEY, options()).run()
    assert last.plan.state == "resume" and last.copied == 0
    assert last.present == len(hour) + len(two)


def new_count(server: Any) -> int:
    return build_backend(Settings(SETTINGS), "t", server=server, key=KEY).count()


def test_a_filter_the_server_expires_keeps_its_field_ttls(expiring):
    old = layout_1(expiring, field_expiry=True)
    fps = fingerprints(500)
    old.add_many(fps, expire=3600)
    ttl = {fp: expiring.hpexpiretime(old.shard_of(fp), fp)[0] for fp in fps}
    started = server_ms(expiring)
    report = HashLayoutConversion(expiring, KEY, options()).run()
    took = server_ms(expiring) - started
    assert report.copied == len(fps)
    new = build_backend(Settings(SETTINGS), "t", server=expiring, key=KEY)
    assert isinstance(new, HashBucketsBackend)
    new.open()
    assert new.expiry.name == "server"
    assert expiring.hget(f"{KEY}:meta", "expiry") == b"server"
    for fp in fps:
        bucket, field = new.locate(fp)
        (kept,) = expiring.hpexpiretime(new.bucket_key(bucket), field)
        assert ttl[fp] <= kept <= ttl[fp] + took


def test_nothing_to_convert_in_a_bucket_filter(server):
    new = build_backend(Settings(SETTINGS), "t", server=server, key=KEY)
    new.open()
    new.add_many(fingerprints(100))
    report = HashLayoutConversion(server, KEY, options()).run()
    assert report.plan.state == "done"
    assert "nothing to convert" in report.summary()


# -- the command -------------------------------------------------------------------------


def run_command(redis_settings: dict, *args: str) -> subprocess.CompletedProcess:
    return command("convert-hash-layout", redis_settings, *args, settings=SETTINGS)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("prepare", "args", "code", "message"),
    [
        (lambda s: None, ["--spider", "t"], 3, "No hash filter at 't:dedup-hash'"),
        (
            lambda s: BloomBackend(s, "t:dedup-hash", BloomParams.from_capacity(5000, 0.01)).open(),
            ["--spider", "t"],
            3,
            "holds a bloom filter, not a hash filter",
        ),
        (
            lambda s: HashBackend(s, "t:dedup-hash", shards=4, field_expiry=False).add_many(
                fingerprints(1500)
            ),
            ["--spider", "t", "-s", "DEDUP_COMPACT_CAPACITY=1000"],
            4,
            "Set DEDUP_COMPACT_CAPACITY = 1000000",
        ),
        (
            lambda s: HashBackend(s, "t:dedup-hash", shards=4, field_expiry=False).open(),
            ["--spider", "t", "-s", "DEDUP_HASH_SHARDS=8"],
            4,
            "DEDUP_HASH_SHARDS = 4",
        ),
        (lambda s: None, [], 2, "Say which filter"),
        (lambda s: None, ["--key", "k", "--batch", "0"], 2, "--batch"),
    ],
)
def test_refusals_write_nothing(redis_settings, server, prepare, args, code, message):
    prepare(server)
    before = snapshot(server)
    result = run_command(redis_settings, *args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr, result.stderr
    assert snapshot(server) == before


@pytest.mark.subprocess
def test_the_command_dry_run_then_converts(redis_settings, server):
    fps = fingerprints(1500)
    HashBackend(server, "t:dedup-hash", shards=4, field_expiry=False).add_many(fps)
    before = snapshot(server)
    dry = run_command(redis_settings, "--spider", "t", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "1,500 fields in 4 shard(s)" in dry.stdout
    assert snapshot(server) == before
    # The capacity refusal's advice is accepted as given.
    small = run_command(redis_settings, "--spider", "t", "-s", "DEDUP_COMPACT_CAPACITY=1000")
    assert small.returncode == 4
    assert "Set DEDUP_COMPACT_CAPACITY = 1000000" in small.stderr
    done = run_command(
        redis_settings, "--spider", "t", "-s", "DEDUP_COMPACT_CAPACITY=1000000", "--delete-source"
    )
    assert done.returncode == 0, done.stderr
    assert "1,500 fingerprints copied" in done.stdout
    assert "source shards deleted" in done.stdout
    settings = Settings({**SETTINGS, "DEDUP_COMPACT_CAPACITY": 1_000_000})
    new = build_backend(settings, "t", server=server)
    assert new.contains_many(fps) == [True] * len(fps)
    again = run_command(redis_settings, "--spider", "t", "-s", "DEDUP_COMPACT_CAPACITY=1000000")
    assert again.returncode == 0, again.stderr
    assert "nothing to convert" in again.stdout


@pytest.mark.subprocess
@pytest.mark.single_server
def test_a_crawl_after_the_conversion_fetches_what_it_would_have(
    tmp_path, site, redis_settings, server
):
    """The same crawl twice over a layout-1 filter, once converted between the two."""
    settings = {**redis_settings, **SETTINGS}

    def first_crawl() -> None:
        server.flushall()
        HashBackend(server, "site:dedup-hash", shards=4, field_expiry=False).open()
        stats = crawl(tmp_path, site, settings, "first")["stats"]
        assert stats["dedup/added"] == site.pages
        assert server.hget("site:dedup-hash:meta", "layout") == b"1"

    first_crawl()
    control_crawl = crawl(tmp_path, site, settings, "control")
    control = control_crawl["stats"]
    # Opening a filter of layout 1 says how to convert it.
    assert "`scrapy convert-hash-layout --key site:dedup-hash`" in control_crawl["log"]
    first_crawl()
    converted = run_command(redis_settings, "--spider", "site", "--delete-source")
    assert converted.returncode == 0, converted.stderr
    assert f"{site.pages:,} fingerprints copied" in converted.stdout
    second = crawl(tmp_path, site, settings, "second")["stats"]
    assert server.hget("site:dedup-hash:meta", "layout") == b"buckets"
    for name in ("downloader/response_count", "dedup/added", "dedup/filtered"):
        assert second.get(name, 0) == control.get(name, 0), name
