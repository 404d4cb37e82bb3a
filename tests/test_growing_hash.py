"""hash with nothing to size (DEDUP_COMPACT_CAPACITY = 0): compact's buckets that split,
each field's value its expiry. Its answers against an exact model of what has not
expired while two workers split it and the janitor purges it; each group counting the
fields it holds, so that a crawl that revisits its pages keeps its buckets; the
settings that choose it and the ones refused. Expiry is injected (a field's value set
in the past), never waited for."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.backends.growing import bucket_of, h_of, parse_level
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.backends.hash_growing import GrowingHashBackend
from scrapy_dedup_suite.backends.keys import scan_keys
from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.janitor import Janitor

from .test_growing import answered_as_a_set, field_in_bucket_0, split_at

ON_CLUSTER = True


def fp(i: int) -> str:
    return hashlib.sha1(b"growing hash %d" % i).hexdigest()


def growing(server: Any, key: str = "t:dedup", **kw: Any) -> GrowingHashBackend:
    backend = GrowingHashBackend(server, key, **{"shards": 2, "expire": 86400, **kw})
    backend.open()
    return backend


def expire_now(server: Any, backend: GrowingHashBackend, fingerprints: Iterable[str]) -> None:
    """Time passes for ``fingerprints``: their fields' expiries set in 1970, wherever
    their group's splits put them."""
    layout = backend.layout
    for fingerprint in fingerprints:
        group, field = layout.locate(fingerprint)
        level = backend.levels()[group].level
        for bucket in layout.candidates(group, field, level):
            if server.hexists(bucket, field):
                server.hset(bucket, field, "1")


def held(server: Any, backend: GrowingHashBackend) -> dict[int, dict[bytes, int]]:
    """Per group, each field and its bucket, checked against linear hashing: buckets 0
    .. 2^L + s - 1 and no other, a field in one bucket only, and the level record
    counting exactly the fields its group holds (expired or not, until a split or the
    janitor leaves them out)."""
    layout = backend.layout
    out: dict[int, dict[bytes, int]] = {}
    for group, (record, prefix) in enumerate(zip(layout.level_keys, layout.prefixes)):
        level, split, count = parse_level(server.get(record)) or (-1, -1, -1)
        assert level >= 0, f"{record} is not a level record"
        fields: dict[bytes, int] = {}
        for key in scan_keys(server, prefix):
            number = int(key[len(prefix) :])
            assert number < (1 << level) + split, f"{key}: past the buckets of {record}"
            for field in server.hkeys(key):
                assert field not in fields, f"{field!r} in two buckets"
                fields[field] = number
        assert count == len(fields), f"{record} counts {count}, its group holds {len(fields)}"
        out[group] = fields
    return out


def check_layout(server: Any, backend: GrowingHashBackend, live: set[str]) -> None:
    """Every fingerprint not expired in the bucket its group's level and pointer name."""
    fields = held(server, backend)
    for fingerprint in live:
        group, field = backend.layout.locate(fingerprint)
        level, split, _ = parse_level(server.get(backend.layout.level_keys[group])) or (0, 0, 0)
        assert fields[group][field] == bucket_of(h_of(field), level, split)


OPS = st.lists(
    st.tuples(st.integers(0, 1),
              st.sampled_from(["add", "add_many", "contains_many", "expire", "purge", "forget"]),
              st.lists(st.integers(0, 150), min_size=1, max_size=30)),
    min_size=1, max_size=25,
)  # fmt: skip


@given(ops=OPS, load=st.integers(1, 4), shards=st.sampled_from([1, 2, 3]))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_two_workers_splitting_and_purging_it_answer_as_an_exact_set_of_what_has_not_expired(
    server, ops, load, shards
):
    key = f"t:{uuid.uuid4().hex[:8]}"
    workers = [growing(server, key, shards=shards, load=load) for _ in range(2)]
    model: set[str] = set()
    for worker, op, items in ops:
        backend, fps = workers[worker], [fp(i) for i in items]
        if op == "expire":
            expire_now(server, backend, [f for f in fps if f in model])
            model -= set(fps)
        elif op == "purge":
            report = Janitor(backend, batch=7).run_pass()
            assert report.completed and report.remaining == len(model)
        elif op == "forget":  # (expired fields not yet purged are removed and counted too)
            assert backend.forget_many(fps) >= len(set(fps) & model)
            model -= set(fps)
        else:
            model = answered_as_a_set(backend, op, fps, model)
    check_layout(server, workers[0], model)


def test_a_crawl_that_revisits_its_pages_keeps_its_buckets(server):
    """Six rounds of 400 pages, each round's expired and purged before the next: a
    group counts what it holds, so the buckets of the first round take every later one
    (a count of what was written would split them again each round)."""
    backend = growing(server, shards=1, load=8)
    levels = []
    for cycle in range(6):
        fps = [fp(1000 * cycle + i) for i in range(400)]
        assert backend.check_and_add_many(fps) == [False] * 400
        levels.append(backend.levels()[0].buckets)
        expire_now(server, backend, fps)
        assert Janitor(backend).run_pass().removed == 400
        assert backend.levels()[0].written == 0
    assert levels == [levels[0]] * 6 and levels[0] >= 400 // 16


def test_a_split_leaves_out_the_expired_fields_and_counts_them_off(server):
    backend = growing(server, shards=1, load=4)
    old = [fp(i) for i in range(200)]
    backend.add_many(old)
    expire_now(server, backend, old)
    before = backend.levels()[0]
    new = [fp(i) for i in range(200, 400)]
    assert backend.check_and_add_many(new) == [False] * 200
    after = backend.levels()[0]
    assert after.buckets > before.buckets  # (it split: past its load again)
    fields = held(server, backend)[0]  # (the record counts what is there)
    assert 200 <= after.written == len(fields) < 400  # (some old ones left out)
    assert backend.contains_many(old) == [False] * 200
    assert backend.contains_many(new) == [True] * 200


@pytest.mark.parametrize("level", [0, 8, 16, 31])
def test_a_split_at_any_level_moves_each_field_with_its_expiry_and_leaves_the_expired(
    server, level
):
    """As compact's split at every byte of h (test_growing.py), each field's value
    moving with it, and the expired ones left out and counted off."""
    backend = growing(server, shards=1, load=1)
    fields = [field_in_bucket_0(i, level) for i in range(40)]
    values = {f: "1" if i % 5 == 0 else "4102444800" for i, f in enumerate(fields)}
    held_now, count = split_at(server, backend, level, values)
    live = {f for f, v in values.items() if v != "1"}
    assert live <= held_now and not held_now & (set(fields) - live)
    for bucket in (0, 1 << level):
        for field, value in server.hgetall(backend.layout.bucket_key(0, bucket)).items():
            assert field not in values or value.decode() == values[field]
    assert backend.levels()[0].written == count + 1 - (len(fields) - len(live))


def test_a_fingerprint_written_again_once_expired_is_new_and_counted_once(server):
    backend = growing(server, shards=1)
    assert backend.check_and_add(fp(1)) is False
    expire_now(server, backend, [fp(1)])
    assert backend.contains(fp(1)) is False
    assert backend.check_and_add(fp(1)) is False and backend.check_and_add(fp(1)) is True
    assert backend.levels()[0].written == 1 == backend.count()


def test_the_janitor_purges_the_expired_and_dedup_info_counts_what_is_left(server):
    backend = growing(server, shards=2, load=4)
    old, new = [fp(i) for i in range(300)], [fp(i) for i in range(300, 500)]
    backend.add_many(old + new)
    expire_now(server, backend, old)
    report = Janitor(backend, batch=50).run_pass()
    assert report.completed and report.removed == 300 and report.remaining == 200
    assert backend.count() == 200 == sum(g.written for g in backend.levels())
    assert backend.contains_many(new) == [True] * 200
    info = backend.info()
    assert info["layout"] == "growing" and info["fields"] == 200
    assert info["expired_by"] == "janitor" and info["hashtables"] == 0
    text = "\n".join(line for said in backend.contents(info) for line in said.describe())
    assert "200 fingerprints (counted)" in text and "no capacity" in text
    assert "200 fields in buckets over 2 group(s) (the janitor purges" in text
    assert "0 expired" in text


def build(server: Any, key: str = "t:dedup", **values: Any) -> Any:
    settings = Settings({"DEDUP_BACKEND": "hash", "DEDUP_HASH_SHARDS": 4, **values})
    return build_backend(settings, "t", server, key)


def test_capacity_0_chooses_it_and_a_filter_keeps_the_layout_it_was_created_with(server):
    new = build(server, DEDUP_COMPACT_CAPACITY=0)
    assert isinstance(new, GrowingHashBackend) and new.capacity == 0
    new.open()
    new.add_many([fp(i) for i in range(10)])
    kept = build(server, DEDUP_COMPACT_CAPACITY=5_000)  # (its record says it grows)
    assert isinstance(kept, GrowingHashBackend)
    kept.open()
    assert kept.check_and_add(fp(3)) is True and kept.check_and_add(fp(30)) is False
    sized = build(server, "t:sized", DEDUP_COMPACT_CAPACITY=5_000)
    sized.open()
    sized.add_many([fp(i) for i in range(10)])
    again = build(server, "t:sized", DEDUP_COMPACT_CAPACITY=0)
    assert isinstance(again, HashBucketsBackend) and again.capacity == 5_000
    again.open()
    assert again.check_and_add(fp(3)) is True


@pytest.mark.single_server
def test_the_server_s_field_expiry_is_refused_and_the_advice_is_accepted(server):
    with pytest.raises(DedupConfigError, match="DEDUP_HASH_FIELD_EXPIRY = True") as info:
        build(server, DEDUP_COMPACT_CAPACITY=0, DEDUP_HASH_FIELD_EXPIRY=True)
    message = str(info.value)
    assert "remove DEDUP_HASH_FIELD_EXPIRY" in message and "\n" not in message
    assert "DEDUP_COMPACT_CAPACITY = 10000000" in message
    assert isinstance(build(server, DEDUP_COMPACT_CAPACITY=0), GrowingHashBackend)
    grows = build(server, DEDUP_COMPACT_CAPACITY=0, DEDUP_HASH_FIELD_EXPIRY=False)
    grows.open()
    assert grows.expiry.name == "janitor"
    grows.add_many([fp(i) for i in range(10)])
    # A stored growing filter keeps growing whatever the capacity: the advice that works
    # for it is the first one.
    with pytest.raises(DedupConfigError, match="DEDUP_HASH_FIELD_EXPIRY = True"):
        build(server, DEDUP_COMPACT_CAPACITY=10000000, DEDUP_HASH_FIELD_EXPIRY=True)
    kept = build(server, DEDUP_COMPACT_CAPACITY=10000000, DEDUP_HASH_FIELD_EXPIRY=False)
    assert isinstance(kept, GrowingHashBackend)
    kept.open()
    assert kept.check_and_add(fp(3)) is True
    sized = build(server, "t:new", DEDUP_COMPACT_CAPACITY=10000000, DEDUP_HASH_FIELD_EXPIRY=True)
    assert isinstance(sized, HashBucketsBackend)  # (the second, at a key that holds none)


def test_a_request_s_own_expiry_is_kept_through_a_split(server):
    """meta['dedup_expire'] per request: each field keeps its own expiry as its bucket
    splits."""
    backend = growing(server, shards=1, load=2)
    backend.check_and_add(fp(0), expire=7 * 86400)
    stored = stored_expiry(server, backend, fp(0))
    backend.add_many([fp(i) for i in range(1, 300)])  # (split to several levels)
    assert backend.levels()[0].level >= 5
    assert stored_expiry(server, backend, fp(0)) == stored
    assert stored_expiry(server, backend, fp(1)) < stored  # (DEDUP_EXPIRE: a day)


def stored_expiry(server: Any, backend: GrowingHashBackend, fingerprint: str) -> int:
    """The expiry stored for ``fingerprint`` (Unix seconds), in whichever bucket it is."""
    group, field = backend.layout.locate(fingerprint)
    level = backend.levels()[group].level
    buckets = backend.layout.candidates(group, field, level)
    (value,) = [server.hget(k, field) for k in buckets if server.hexists(k, field)]
    return int(value)


def test_a_level_record_of_another_type_refuses_the_purge_before_it_deletes(server):
    backend = growing(server, shards=1, load=4)
    fps = [fp(i) for i in range(50)]
    backend.add_many(fps)
    expire_now(server, backend, fps)
    levels = backend.levels()  # (read while the record is one)
    record = backend.layout.level_keys[0]
    server.delete(record)
    server.rpush(record, "not a record")
    buckets = [backend.layout.bucket_key(0, b) for b in range(levels[0].buckets)]
    before = {key: server.hgetall(key) for key in buckets}
    backend.levels = lambda: levels  # type: ignore[method-assign]  (as read before)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        backend.purge_step(0, 0, 1000)
    assert {key: server.hgetall(key) for key in buckets} == before
