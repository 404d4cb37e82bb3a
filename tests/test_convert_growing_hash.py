"""convert-to-growing of a sized hash filter (the janitor's expiry): the growing filter
answers what the sized one answered, each fingerprint keeps its expiry (never earlier,
at most a second later), expired fields are not copied and go with --delete-source, and
a filter whose fields the server expires is refused with nothing written. Expiry is
injected (a field's value set in the past), never waited for."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.backends.groups import StoredShape, stored_shape
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.backends.hash_growing import GrowingHashBackend
from scrapy_dedup_suite.operations.migrations.errors import TargetError
from scrapy_dedup_suite.operations.migrations.growing_hash_layout import GrowingHashConversion
from scrapy_dedup_suite.settings.options import HashOptions

from .helpers import fingerprints, snapshot
from .helpers import run_command as command
from .test_growing_hash import stored_expiry

ON_CLUSTER = True

KEY = "t:h"
SETTINGS = {
    "DEDUP_BACKEND": "hash",
    "DEDUP_COMPACT_CAPACITY": 20_000,
    "DEDUP_HASH_SHARDS": 4,
    "DEDUP_HASH_FIELD_EXPIRY": False,
}


def options(**settings: Any) -> HashOptions:
    return HashOptions.from_settings(Settings({**SETTINGS, **settings}))


def sized(server: Any, n: int = 3000, key: str = KEY) -> tuple[HashBucketsBackend, list[str]]:
    """A sized hash filter holding ``n``, a third of them with a day's expiry (the
    rest: DEDUP_EXPIRE, a week)."""
    old = build_backend(Settings(SETTINGS), "t", server=server, key=key)
    assert isinstance(old, HashBucketsBackend)
    old.open()
    fps = fingerprints(n, "old")
    old.add_many(fps[: n // 3], expire=86400)
    old.add_many(fps[n // 3 :])
    return old, fps


def reopened(server: Any, key: str = KEY) -> GrowingHashBackend:
    """What a crawl with the same settings (a capacity) opens now."""
    new = build_backend(Settings(SETTINGS), "t", server=server, key=key)
    assert isinstance(new, GrowingHashBackend)
    new.open()
    return new


def sized_expiry(server: Any, old: HashBucketsBackend, fingerprint: str) -> int:
    bucket, field = old.layout.locate(fingerprint)
    return int(server.hget(old.bucket_key(bucket), field))


def expire_in_sized(server: Any, old: HashBucketsBackend, fps: list[str]) -> None:
    for fingerprint in fps:
        bucket, field = old.layout.locate(fingerprint)
        server.hset(old.bucket_key(bucket), field, "1")


def test_it_answers_what_the_sized_one_answered_and_keeps_each_expiry(server):
    old, fps = sized(server)
    expired = fps[-100:]
    expire_in_sized(server, old, expired)
    fresh = fingerprints(1000, "new")
    before = old.contains_many(fps + fresh)
    assert before == [True] * (len(fps) - 100) + [False] * 1100
    expiries = {f: sized_expiry(server, old, f) for f in fps[:50] + fps[-200:-100]}

    # DEDUP_HASH_SHARDS unset: the filter's groups (4, where a new one would get 16).
    report = GrowingHashConversion(server, KEY, options(DEDUP_HASH_SHARDS=None), batch=100).run()

    assert stored_shape(server, KEY, 4, "hash") == StoredShape(0, 4)
    new = reopened(server)
    assert new.grouped_by == old.buckets
    assert new.contains_many(fps + fresh) == before
    assert (report.copied, report.expired, report.invalid) == (len(fps) - 100, 100, 0)
    for fingerprint, expiry in expiries.items():  # (never earlier, at most a second later)
        assert 0 <= stored_expiry(server, new, fingerprint) - expiry <= 1
    assert new.check_and_add_many(expired + fresh) == [False] * 1100
    assert new.count() == len(fps) + 1000 == sum(g.written for g in new.levels())


def test_delete_source_removes_the_copied_and_the_expired_and_keeps_the_rest(server):
    old, fps = sized(server)
    expire_in_sized(server, old, fps[:10])
    odd = old.bucket_key(5)
    server.hset(odd, "short", "1")  # (not 8 bytes)
    bucket, field = old.layout.locate(fps[20])
    server.hset(old.bucket_key(bucket), field, "soon")  # (no expiry as its value)
    report = GrowingHashConversion(server, KEY, options(), verify="all").run(delete_source=True)
    assert (report.invalid, report.expired) == (2, 10)
    assert report.verified == len(fps) - 11
    assert (report.removed, report.kept) == (len(fps) - 1, 2)
    assert server.hgetall(odd) == {b"short": b"1"}
    assert server.hget(old.bucket_key(bucket), field) == b"soon"
    kept = fps[10:20] + fps[21:]
    assert reopened(server).contains_many(kept) == [True] * len(kept)
    assert reopened(server).contains(fps[20]) is False  # (left in its sized bucket)


@pytest.mark.single_server
def test_a_filter_whose_fields_the_server_expires_is_refused_with_nothing_written(expiring):
    way = {**SETTINGS, "DEDUP_HASH_FIELD_EXPIRY": True}
    old = build_backend(Settings(way), "t", server=expiring, key=KEY)
    old.open()
    old.add_many(fingerprints(200))
    before = snapshot(expiring)
    conversion = GrowingHashConversion(expiring, KEY, options(DEDUP_HASH_FIELD_EXPIRY=None))
    with pytest.raises(TargetError, match="lets the server expire its fields") as refused:
        conversion.run()
    assert "Keep it sized" in str(refused.value)
    assert snapshot(expiring) == before


def test_a_crawler_on_the_sized_layout_opens_it_growing_and_a_rerun_has_nothing_to_do(server):
    _, fps = sized(server, 600)
    GrowingHashConversion(server, KEY, options()).run(delete_source=True)
    assert reopened(server).contains_many(fps) == [True] * 600
    again = GrowingHashConversion(server, KEY, options()).run()
    assert again.plan.state == "done" and "a hash filter that grows" in again.summary()


# -- the command -------------------------------------------------------------------------


def run_command(redis_settings: dict, *args: str) -> subprocess.CompletedProcess:
    return command("convert-to-growing", redis_settings, *args, settings=SETTINGS)


@pytest.mark.subprocess
def test_the_command_finds_the_hash_filter_of_a_spider_and_says_what_it_did(redis_settings, server):
    _, fps = sized(server, 300, "t:dedup-hash")
    dry = run_command(redis_settings, "--spider", "t", "--dry-run")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "hash filter sized for 20,000 fingerprints, 300 fields" in dry.stdout
    done = run_command(redis_settings, "--spider", "t", "--delete-source")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "300 fingerprints copied" in done.stdout and "300 fields removed" in done.stdout
    assert reopened(server, "t:dedup-hash").contains_many(fps) == [True] * 300
    nothing = run_command(redis_settings, "--spider", "t", "-s", "DEDUP_BACKEND=compact")
    assert nothing.returncode == 3 and "No compact filter at 't:dedup-compact'" in nothing.stderr
