"""convert-to-growing: a sized compact filter into buckets that split as it grows, in
place. The growing filter answers what the sized one answered (every fingerprint seen,
new ones new), a worker left on the sized layout is refused and opens it again growing,
an interrupted conversion goes on where it stopped, and every refusal writes nothing."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import BloomBackend, build_backend
from scrapy_dedup_suite.backends.compact import CompactBackend
from scrapy_dedup_suite.backends.compact_growing import GrowingCompactBackend
from scrapy_dedup_suite.backends.groups import StoredShape, stored_shape
from scrapy_dedup_suite.backends.growing import bucket_of, h_of
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.operations.migrations.errors import TargetError
from scrapy_dedup_suite.operations.migrations.growing_layout import GrowingConversion
from scrapy_dedup_suite.server.failures import code_of
from scrapy_dedup_suite.settings.options import CompactOptions

from .helpers import all_keys, crawl, fingerprints, snapshot
from .helpers import run_command as command

ON_CLUSTER = True  # groups, stamps and buckets spread over the masters

KEY = "t:c"
SETTINGS = {"DEDUP_BACKEND": "compact", "DEDUP_COMPACT_CAPACITY": 20_000, "DEDUP_HASH_SHARDS": 4}


def options(**settings: Any) -> CompactOptions:
    return CompactOptions.from_settings(Settings({**SETTINGS, **settings}))


def sized(server: Any, n: int = 3000, key: str = KEY) -> tuple[CompactBackend, list[str]]:
    """A sized filter (79 buckets: not a multiple of the groups) holding ``n``."""
    old = build_backend(Settings(SETTINGS), "t", server=server, key=key)
    assert isinstance(old, CompactBackend)
    old.open()
    fps = fingerprints(n, "old")
    old.add_many(fps)
    return old, fps


def reopened(server: Any, key: str = KEY) -> GrowingCompactBackend:
    """What a crawl with the same settings (a capacity) opens now."""
    new = build_backend(Settings(SETTINGS), "t", server=server, key=key)
    assert isinstance(new, GrowingCompactBackend)
    new.open()
    return new


def test_the_growing_filter_answers_what_the_sized_one_answered(server):
    old, fps = sized(server)
    assert old.buckets % 4 != 0  # (a group is chosen as the sized bucket chose it)
    fresh = fingerprints(2000, "new")
    before = old.contains_many(fps + fresh)

    # DEDUP_HASH_SHARDS unset: the filter's groups (4, where a new one would get 16).
    report = GrowingConversion(server, KEY, options(DEDUP_HASH_SHARDS=None), batch=100).run()

    assert stored_shape(server, KEY, 4) == StoredShape(0, 4)
    new = reopened(server)
    assert new.grouped_by == old.buckets
    assert new.contains_many(fps + fresh) == before
    assert (report.copied, report.present, report.invalid) == (len(fps), 0, 0)
    assert report.verified > 0
    # New fingerprints are new once, and the groups split as they fill, each field in
    # the bucket linear hashing says and every bucket compact.
    assert new.check_and_add_many(fresh) == [False] * len(fresh)
    assert new.check_and_add_many(fresh[:100] + fps[:100]) == [True] * 200
    census = new.census()
    assert census.fields == len(fps) + len(fresh) and census.hashtables == 0
    assert any(level > 0 for level, _, _ in census.levels)
    for fingerprint in fresh[:50]:
        group, field = new.layout.locate(fingerprint)
        level = new.levels()[group]
        bucket = bucket_of(h_of(field), level.level, level.split)
        assert server.hexists(new.layout.bucket_key(group, bucket), field)


def test_a_worker_left_on_the_sized_layout_is_refused_and_opens_it_growing(server):
    old, fps = sized(server)
    GrowingConversion(server, KEY, options()).run()
    with pytest.raises(redis.ResponseError) as refused:
        old.check_and_add_many(fingerprints(20, "late"))
    assert code_of(refused.value) == "dedup:STAMP"
    said = str(refused.value)  # (the stamp's key, what it says, what this worker's filter is)
    assert "says the data beside it was written as backend=compact;" in said
    assert "sized_for=0;" in said and f"this filter is {old.stamp}" in said
    assert reopened(server).contains_many(fps[:200]) == [True] * 200


def test_delete_source_removes_what_was_copied_and_keeps_what_is_no_fingerprint(server):
    old, fps = sized(server)
    bucket = old.bucket_key(7)
    server.hset(bucket, "short", "")  # (not 8 bytes: not a fingerprint's field)
    report = GrowingConversion(server, KEY, options(), verify="all").run(delete_source=True)
    assert report.invalid == 1 and report.verified == len(fps)
    assert (report.removed, report.kept) == (len(fps), 1)
    assert server.hgetall(bucket) == {b"short": b""}
    assert [k for k in all_keys(server) if k.decode().rpartition(":")[2].isdigit()
            and b":grow:" not in k] == [bucket.encode()]  # fmt: skip
    assert reopened(server).contains_many(fps) == [True] * len(fps)


class Stop(Exception):
    pass


def test_an_interrupted_conversion_goes_on_where_it_stopped(server):
    _, fps = sized(server)
    calls = []

    def stop_after_a_few(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 10:
            raise Stop

    with pytest.raises(Stop):
        GrowingConversion(server, KEY, options(), batch=100, progress=stop_after_a_few).run()
    # Switched already: a crawler started now opens the growing filter.
    assert stored_shape(server, KEY, 4) == StoredShape(0, 4)
    state = server.hgetall(f"{KEY}:migration")
    assert state[b"mode"] == b"convert-to-growing"
    saved = int(state[b"position"])
    assert 0 < saved < 79

    # Other groups than the conversion's are refused, with what to set...
    with pytest.raises(TargetError, match="Set DEDUP_HASH_SHARDS = 4"):
        GrowingConversion(server, KEY, options(DEDUP_HASH_SHARDS=8)).plan()
    # ... and the conversion goes on from the bucket it saved (the groups unset: its own).
    rerun = GrowingConversion(server, KEY, options(DEDUP_HASH_SHARDS=None), verify="all")
    plan = rerun.plan()
    assert (plan.state, plan.position) == ("resume", saved)
    report = rerun.run()
    assert report.verified == len(fps)
    assert 0 < report.copied + report.present < len(fps)  # (it did not start over)
    assert reopened(server).count() == len(fps)
    assert server.exists(f"{KEY}:migration") == 0
    # Run once more: the sized buckets left are copied again, nothing is lost.
    last = GrowingConversion(server, KEY, options()).run()
    assert (last.plan.state, last.copied, last.present) == ("resume", 0, len(fps))


def test_nothing_to_convert_in_a_filter_created_growing(server):
    new = build_backend(Settings({**SETTINGS, "DEDUP_COMPACT_CAPACITY": 0}), "t", server, KEY)
    new.open()
    new.add_many(fingerprints(100))
    report = GrowingConversion(server, KEY, options(DEDUP_HASH_SHARDS=None)).run()
    assert report.plan.state == "done"
    assert "nothing to convert" in report.summary()


def test_a_converted_filter_that_lost_a_level_record_is_refused_not_started_again(server):
    """Sized buckets left (no --delete-source), then a group's level record lost: a
    rerun does not create it anew at level 0 (which would hide what the group split);
    the copy is refused naming the record, and nothing is written."""
    sized(server)
    GrowingConversion(server, KEY, options()).run()
    growing = reopened(server)
    growing.check_and_add_many(fingerprints(3000, "more"))  # (every group splits)
    record = growing.layout.level_keys[1]
    server.delete(record)
    before = snapshot(server)
    with pytest.raises(TargetError, match="dedup:SPLITS") as refused:
        GrowingConversion(server, KEY, options()).run()
    assert record in str(refused.value) and "run it again" in str(refused.value)
    assert snapshot(server) == before


# -- the command -------------------------------------------------------------------------


def run_command(redis_settings: dict, *args: str) -> subprocess.CompletedProcess:
    return command("convert-to-growing", redis_settings, *args, settings=SETTINGS)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("prepare", "args", "code", "message"),
    [
        (lambda s: None, ["--spider", "t"], 3, "No compact filter at 't:dedup-compact'"),
        (
            lambda s: BloomBackend(
                s, "t:dedup-compact", BloomParams.from_capacity(5000, 0.01)
            ).open(),
            ["--spider", "t"],
            3,
            "holds a bloom filter, not a compact filter",
        ),
        (
            lambda s: sized(s, 100, "t:dedup-compact"),
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
    if code != 2:  # (a usage error is Scrapy's, with its usage)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert snapshot(server) == before


@pytest.mark.subprocess
def test_a_sized_bucket_of_another_type_is_refused_before_the_switch(redis_settings, server):
    old, _ = sized(server, 100, "t:dedup-compact")
    server.delete(old.bucket_key(3))
    server.set(old.bucket_key(3), "a string")
    before = snapshot(server)
    result = run_command(redis_settings, "--spider", "t")
    assert result.returncode == 3, result.stderr
    assert old.bucket_key(3) in result.stderr and "Nothing was written" in result.stderr
    assert snapshot(server) == before


@pytest.mark.subprocess
def test_the_command_dry_run_then_converts(redis_settings, server):
    _, fps = sized(server, 1500, "t:dedup-compact")
    before = snapshot(server)
    dry = run_command(redis_settings, "--spider", "t", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "1,500 fields in 79 buckets of 4 group(s)" in dry.stdout
    assert snapshot(server) == before
    done = run_command(redis_settings, "--spider", "t", "--delete-source")
    assert done.returncode == 0, done.stderr
    assert "1,500 fingerprints copied" in done.stdout
    assert "1,500 fields removed" in done.stdout
    new = build_backend(Settings(SETTINGS), "t", server=server)
    assert isinstance(new, GrowingCompactBackend)
    assert new.contains_many(fps) == [True] * len(fps)
    again = run_command(redis_settings, "--spider", "t")
    assert again.returncode == 0, again.stderr
    assert "nothing to convert" in again.stdout


@pytest.mark.subprocess
@pytest.mark.single_server
def test_a_crawl_after_the_conversion_fetches_what_it_would_have(
    tmp_path, site, redis_settings, server
):
    """The same crawl twice over a sized filter, once converted between the two."""
    settings = {**redis_settings, **SETTINGS}

    def first_crawl() -> None:
        server.flushall()
        stats = crawl(tmp_path, site, settings, "first")["stats"]
        assert stats["dedup/added"] == site.pages
        assert server.hget("site:dedup-compact:meta", "sized_for") == b"20000"

    first_crawl()
    control = crawl(tmp_path, site, settings, "control")["stats"]
    first_crawl()
    converted = run_command(redis_settings, "--spider", "site", "--delete-source")
    assert converted.returncode == 0, converted.stderr
    assert f"{site.pages:,} fingerprints copied" in converted.stdout
    second = crawl(tmp_path, site, settings, "second")["stats"]
    assert server.hget("site:dedup-compact:meta", "sized_for") == b"0"
    for name in ("downloader/response_count", "dedup/added", "dedup/filtered"):
        assert second.get(name, 0) == control.get(name, 0), name
