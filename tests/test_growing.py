"""compact with nothing to size (DEDUP_COMPACT_CAPACITY = 0): buckets that split as the
filter grows. Its answers against an exact model while two workers split it, and its
layout against a model of linear hashing; a worker that learns another's splits; a
damaged or lost level record refused; the load from the server's listpack limit; the
settings that choose it, and the sized filters it leaves as they are."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import CompactBackend, build_backend
from scrapy_dedup_suite.backends.compact_growing import (
    NEW_LOAD,
    GrowingCompactBackend,
    new_load,
    split_load,
)
from scrapy_dedup_suite.backends.growing import advanced, bucket_of, h_of, parse_level
from scrapy_dedup_suite.backends.keys import as_str, scan_keys
from scrapy_dedup_suite.backends.listpack import listpack_limits
from scrapy_dedup_suite.exceptions import (
    DedupBackendError,
    DedupConfigError,
    FilterMismatchError,
)
from scrapy_dedup_suite.server.cluster import is_cluster, masters
from scrapy_dedup_suite.server.failures import code_of, translate

ON_CLUSTER = True


def fp(i: int) -> str:
    return hashlib.sha1(b"growing %d" % i).hexdigest()


def growing(server: Any, key: str = "t:dedup", **kw: Any) -> GrowingCompactBackend:
    backend = GrowingCompactBackend(server, key, **{"shards": 2, **kw})
    backend.open()
    return backend


def check_layout(server: Any, backend: GrowingCompactBackend, written: set[str]) -> None:
    """The model of linear hashing: each group's buckets are 0 .. 2^L + s - 1 and no
    other; each fingerprint written is in the bucket bucket_of(h, L, s) of its group,
    and nowhere else; the record counts the fields written."""
    layout = backend.layout
    by_group: dict[int, dict[bytes, int]] = {}
    for group, (record, prefix) in enumerate(zip(layout.level_keys, layout.prefixes)):
        level, split, count = parse_level(server.get(record)) or (-1, -1, -1)
        assert level >= 0, f"{record} is not a level record"
        buckets = (1 << level) + split
        fields: dict[bytes, int] = {}
        for key in scan_keys(server, prefix):
            number = int(key[len(prefix) :])
            assert number < buckets, f"{key}: past the {buckets} buckets of {record}"
            for field in server.hkeys(key):
                assert field not in fields, f"{field!r} in two buckets"
                fields[field] = number
        assert count == len(fields)
        by_group[group] = fields
    assert sum(len(f) for f in by_group.values()) == len(written)
    for fingerprint in written:
        group, field = layout.locate(fingerprint)
        level, split, _ = parse_level(server.get(layout.level_keys[group])) or (0, 0, 0)
        assert by_group[group][field] == bucket_of(h_of(field), level, split)


# Two workers, each with what it learnt of the splits, on a small universe (repeats).
OPS = st.lists(
    st.tuples(st.integers(0, 1),
              st.sampled_from(["add", "add_many", "contains_many", "forget"]),
              st.lists(st.integers(0, 150), min_size=1, max_size=30)),
    min_size=1, max_size=25,
)  # fmt: skip


@given(ops=OPS, load=st.integers(1, 4), shards=st.sampled_from([1, 2, 3]))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_two_workers_splitting_it_answer_as_an_exact_set_and_keep_the_layout(
    server, ops, load, shards
):
    key = f"t:{uuid.uuid4().hex[:8]}"
    workers = [growing(server, key, shards=shards, load=load) for _ in range(2)]
    model: set[str] = set()
    for worker, op, items in ops:
        model = answered_as_a_set(workers[worker], op, [fp(i) for i in items], model)
    check_layout(server, workers[0], model)
    assert workers[1].count() == len(model)


def answered_as_a_set(backend: Any, op: str, fps: list[str], model: set[str]) -> set[str]:
    """``op`` (add, add_many, contains_many or forget) of ``fps``, its answers checked
    against the exact ``model``; the model after it."""
    if op == "add":
        for f in fps:
            assert backend.check_and_add(f) == (f in model)
            model = model | {f}
    elif op == "add_many":
        expected, batch = [], set(model)
        for f in fps:
            expected.append(f in batch)
            batch.add(f)
        assert backend.check_and_add_many(fps) == expected
        model = batch
    elif op == "forget":
        assert backend.forget_many(fps) == len(set(fps) & model)
        model = model - set(fps)
    else:
        assert op == "contains_many"
        assert backend.contains_many(fps) == [f in model for f in fps]
    return model


def test_a_worker_learns_the_splits_of_another_at_its_next_call(server):
    """A worker that opened on an empty filter meets it split to level 5 by another:
    its call writes nothing, learns the level, and is made again (two calls)."""
    early = growing(server, shards=1, load=2)
    busy = growing(server, shards=1, load=2)
    for i in range(0, 200, 10):
        busy.check_and_add_many([fp(j) for j in range(i, i + 10)])
    ((level, _),) = [(g.level, g.split) for g in busy.levels()]
    assert level >= 5 and early.layout.known == [(0, 0)]
    before = sum(calls(server).values())
    assert early.check_and_add(fp(5)) is True and early.check_and_add(fp(1000)) is False
    assert sum(calls(server).values()) - before <= 3  # (one refused, then one a request)
    assert early.layout.known[0][0] == level  # (and the pointer, moved on by its own split)
    assert early.contains(fp(1000)) and not early.contains(fp(1001))


def calls(server: Any) -> dict[str, int]:
    stats: dict[str, int] = {}
    for client in masters(server):
        for name, row in client.info("commandstats").items():
            if name in ("cmdstat_evalsha", "cmdstat_eval"):
                stats[name] = stats.get(name, 0) + int(row["calls"])
    return stats


@pytest.mark.parametrize(
    "damage", ["not a record", "3 9 10", "-1 0 0"], ids=["text", "split-past-level", "negative"]
)
def test_a_damaged_level_record_refuses_its_group_and_writes_nothing(server, damage):
    backend = growing(server, shards=1, load=2)
    backend.check_and_add_many([fp(i) for i in range(40)])
    record = backend.layout.level_keys[0]
    server.set(record, damage)
    before = {k: server.dump(k) for k in scan_keys(server, "{t:dedup")}
    for call in (lambda: backend.check_and_add(fp(999)), lambda: backend.contains(fp(999))):
        with pytest.raises(redis.ResponseError) as raised:
            call()
        error = translate(raised.value, backend, fp(999))
        assert isinstance(error, DedupBackendError)
        assert record in str(error) and "level split count" in str(error)
    with pytest.raises(DedupBackendError, match="SCHEDULER_FLUSH_ON_START = True"):
        backend.count()
    assert {k: server.dump(k) for k in scan_keys(server, "{t:dedup")} == before
    # What it advises: a clear (SCHEDULER_FLUSH_ON_START) deletes it, buckets and all.
    assert backend.clear() == len(before) + 1  # (and the record, t:dedup:meta)
    assert list(scan_keys(server, "{t:dedup")) == []
    backend.open()
    assert backend.check_and_add(fp(1)) is False


def test_a_lost_level_record_beside_its_data_is_refused_not_started_again(server):
    """A group that lost its record would put new fields in bucket 0 and never look in
    the others: refused, naming the record, until it is restored."""
    backend = growing(server, shards=1, load=2)
    backend.check_and_add_many([fp(i) for i in range(40)])
    record = backend.layout.level_keys[0]
    kept = server.get(record)
    server.delete(record)
    with pytest.raises(redis.ResponseError, match="SPLITS") as raised:
        backend.check_and_add(fp(999))
    assert "is missing" in str(translate(raised.value, backend, fp(999)))
    server.set(record, kept)
    assert backend.check_and_add(fp(1)) is True and backend.check_and_add(fp(999)) is False


@pytest.fixture
def listpack_128(server: Any) -> Iterator[None]:
    before = listpack_limits(server)
    assert before is not None
    for client in masters(server):
        client.config_set("hash-max-listpack-entries", 128)
    yield
    for client in masters(server):
        client.config_set("hash-max-listpack-entries", before[0])


@pytest.mark.single_server
@pytest.mark.parametrize("limit", [512, 128])
def test_the_load_follows_the_server_s_limit_and_every_bucket_stays_compact(server, request, limit):
    """A new filter's load: NEW_LOAD, or less where the server's
    hash-max-listpack-entries asks for it (kept in its record: another worker adopts
    it); filled far past it, no bucket leaves the compact encoding."""
    if limit == 128:
        request.getfixturevalue("listpack_128")
    backend = growing(server, shards=1)
    assert backend.load == min(NEW_LOAD, split_load(limit)) == new_load(limit)
    assert 0 < backend.load < limit // 2 and new_load(512) == NEW_LOAD < split_load(512)
    fps = [fp(i) for i in range(limit * 60)]
    backend.add_many(fps)
    census = backend.census()
    assert census.hashtables == 0 and census.fields == len(fps)
    assert census.buckets >= len(fps) // (2 * backend.load)  # (it split: not one bucket)
    assert GrowingCompactBackend(server, "t:dedup", shards=1).load == backend.load


@pytest.mark.single_server
def test_a_filter_created_with_another_load_keeps_it(server):
    """A filter whose record says load 205 (the load of a new filter before NEW_LOAD)
    keeps it when opened with nothing asked, its record and stamps unchanged, and
    answers as before."""
    old = growing(server, shards=1, load=split_load(512))
    fps = [fp(i) for i in range(1000)]
    old.add_many(fps)
    record = server.hgetall("t:dedup:meta")
    assert record[b"load"] == str(split_load(512)).encode()
    opened = GrowingCompactBackend(server, "t:dedup", shards=1)
    opened.open()
    assert opened.load == split_load(512) != NEW_LOAD
    assert server.hgetall("t:dedup:meta") == record
    assert opened.check_and_add_many([*fps[:10], fp(5000)]) == [True] * 10 + [False]


def build(server: Any, **values: Any) -> Any:
    return build_backend(Settings({"DEDUP_BACKEND": "compact", **values}), "t", server, "t:dedup")


def test_capacity_0_chooses_it_and_a_filter_keeps_the_layout_it_was_created_with(server):
    new = build(server, DEDUP_COMPACT_CAPACITY=0, DEDUP_HASH_SHARDS=4)
    assert isinstance(new, GrowingCompactBackend)
    sized = build(server, DEDUP_COMPACT_CAPACITY=5_000, DEDUP_HASH_SHARDS=4)
    sized.open()
    sized.add_many([fp(i) for i in range(100)])
    kept = build(server, DEDUP_COMPACT_CAPACITY=0, DEDUP_HASH_SHARDS=4)  # (the record says)
    assert isinstance(kept, CompactBackend) and kept.capacity == 5_000
    kept.open()
    assert kept.check_and_add(fp(1)) is True
    server.delete("t:dedup:meta")  # (its stamps say so too)
    assert build(server, DEDUP_COMPACT_CAPACITY=0, DEDUP_HASH_SHARDS=4).capacity == 5_000


def test_a_growing_filter_opened_with_a_capacity_keeps_growing(server):
    """As a sized filter opened with 0 stays sized: a filter keeps its layout (a worker
    whose settings name a capacity meets a filter converted under it)."""
    growing(server, shards=4).add_many([fp(i) for i in range(10)])
    kept = build(server, DEDUP_COMPACT_CAPACITY=5_000, DEDUP_HASH_SHARDS=4)
    assert isinstance(kept, GrowingCompactBackend)
    kept.open()
    assert kept.check_and_add(fp(3)) is True and kept.check_and_add(fp(30)) is False
    # Constructed sized all the same, it is refused, naming the setting that opens it.
    sized = CompactBackend(server, "t:dedup", capacity=5_000, shards=4)
    with pytest.raises(FilterMismatchError) as info:
        sized.open()
    assert "DEDUP_COMPACT_CAPACITY = 0" in str(info.value)


@pytest.mark.parametrize("name", ["compact", "hash"])
def test_unset_groups_are_the_filter_s_own_else_4_growing_on_one_server_16_on_a_cluster(
    server, name
):
    """DEDUP_HASH_SHARDS unset: a new growing filter gets 4 groups on one server (a group
    spreads nothing there and costs its keys), 16 on a Cluster (a group is a slot), a
    sized one 16; an existing filter keeps its own, by its record or (lost) its stamps,
    and answers for what it holds; a setting that differs is refused as before."""

    def opened(key: str, **values: Any) -> Any:
        settings = Settings({"DEDUP_BACKEND": name, **values})
        backend = build_backend(settings, "t", server, key)
        backend.open()
        return backend

    assert opened("t:new", DEDUP_COMPACT_CAPACITY=0).shards == (16 if is_cluster(server) else 4)
    assert opened("t:sized", DEDUP_COMPACT_CAPACITY=5_000).shards == 16
    fps = [fp(i) for i in range(200)]
    for capacity in (0, 5_000):
        key = f"t:eight:{capacity}"
        opened(key, DEDUP_COMPACT_CAPACITY=capacity, DEDUP_HASH_SHARDS=8).add_many(fps[:100])
        for lost_record in (False, True):
            if lost_record:
                server.delete(f"{key}:meta")
            kept = opened(key, DEDUP_COMPACT_CAPACITY=0)
            assert (kept.shards, kept.capacity) == (8, capacity), lost_record
            assert kept.contains_many(fps[:100]) == [True] * 100
            assert kept.contains_many(fps[100:]) == [False] * 100
        with pytest.raises(FilterMismatchError, match="DEDUP_HASH_SHARDS"):
            opened(key, DEDUP_COMPACT_CAPACITY=capacity, DEDUP_HASH_SHARDS=16)


def test_a_filter_in_fewer_groups_than_the_cluster_s_masters_is_said_at_open(server, caplog):
    """A filter keeps its groups: one made on a single server (4, unset) and moved to a
    Cluster of more masters sits on at most 4; the open says so, with what to set. One
    with at least a group per master, or on one server, opens quietly."""
    spread = [] if not is_cluster(server) else [len(server.get_primaries())]
    for shards, said in ((2, bool(spread)), (16, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="scrapy_dedup_suite"):
            growing(server, key=f"t:spread:{shards}", shards=shards)
        lines = [m for m in (r.getMessage() for r in caplog.records) if "group(s), so at most" in m]
        assert bool(lines) is said, (shards, lines)
        if said:
            assert (
                f"keeps its data in 2 group(s), so at most 2 of the cluster's {spread[0]}"
                in (lines[0])
            )
            assert "DEDUP_HASH_SHARDS unset gets 16" in lines[0]


@pytest.mark.single_server
def test_a_capacity_below_1000_is_refused_naming_what_is_accepted(server):
    with pytest.raises(DedupConfigError, match=r"must be 0 \(no capacity") as info:
        build(server, DEDUP_COMPACT_CAPACITY=500)
    assert "got 500" in str(info.value)
    assert build(server, DEDUP_COMPACT_CAPACITY=1000).capacity == 1000
    assert build(server, DEDUP_COMPACT_CAPACITY=0).capacity == 0


def test_dedup_info_shows_each_group_s_level_and_every_bucket_counted(server):
    backend = growing(server, shards=2, load=4)
    backend.add_many([fp(i) for i in range(300)])
    info = backend.info()
    levels = [(g.level, g.split, g.buckets) for g in backend.levels()]
    assert info["levels"] == levels and info["fields"] == 300 == backend.count()
    held = [
        server.exists(backend.layout.bucket_key(group, b))
        for group, (_, _, n) in enumerate(levels)
        for b in range(n)
    ]
    assert info["buckets"] == sum(held) > len(held) // 2  # (the buckets that hold a field)
    (said,) = backend.contents(info)
    text = "\n".join(said.describe())
    assert "300 fingerprints (counted)" in text and "no capacity" in text
    assert f"{info['buckets']:,} buckets" in text
    assert as_str(server.type(backend.layout.level_keys[0])) == "string"


def test_a_scrapy_redis_set_migrates_into_it_with_its_buckets_split_as_it_fills(server):
    """migrate-set-to-bloom --to compact with DEDUP_COMPACT_CAPACITY = 0: no capacity to
    check against, every member in, found, and the buckets split to hold them."""
    from scrapy_dedup_suite.operations.migrations import SetMigration

    fps = [fp(i) for i in range(5000)]
    for start in range(0, len(fps), 1000):
        server.sadd("{src}", *fps[start : start + 1000])
    target = GrowingCompactBackend(server, "t:dedup", shards=2, load=8)
    report = SetMigration(target, "{src}", batch=700).run()
    assert report.migrated == 5000 and report.verified == 5000
    assert all(target.contains_many(fps)) and target.count() == 5000
    assert min(g.level for g in target.levels()) >= 8  # (5,000 over 2 groups of 8 a bucket)
    assert target.census().hashtables == 0


def field_in_bucket_0(i: int, level: int) -> bytes:
    """A field whose h is 0 modulo 2^level (bucket 0 at that level), with bit ``level``
    set for odd ``i`` and h's higher bits varying with ``i``."""
    h = (((i * 40503) << 1 | (i & 1)) << level) % 2**32
    return i.to_bytes(4, "big") + h.to_bytes(4, "big")


def split_at(
    server: Any, backend: Any, level: int, values: dict[bytes, str]
) -> tuple[set[bytes], int]:
    """Group 0 of ``backend`` (one group, load 1) at ``level`` with pointer 0, its
    bucket 0 holding ``values`` and its record due to split; then a new fingerprint
    written (its call learns the level and splits bucket 0). Returns the fields of
    bucket 0 and of bucket 2^level after it, each checked to be where bit ``level``
    of its h says, and the count the record said before."""
    layout = backend.layout
    server.hset(layout.bucket_key(0, 0), mapping=values)  # type: ignore[arg-type]
    count = max(2**level, len(values))  # (due at the next write)
    server.set(layout.level_keys[0], f"{level} 0 {count}")
    assert backend.check_and_add(fp(10**6)) is False
    assert [(g.level, g.split) for g in backend.levels()] == [advanced(level, 0, 1)]
    stay = set(server.hkeys(layout.bucket_key(0, 0)))
    move = set(server.hkeys(layout.bucket_key(0, 1 << level)))
    assert stay and move
    assert all(h_of(f) >> level & 1 == 0 for f in stay)
    assert all(h_of(f) >> level & 1 == 1 for f in move)
    return stay | move, count


@pytest.mark.parametrize("level", [0, 7, 8, 15, 16, 23, 24, 31])
def test_a_split_at_any_level_moves_the_fields_whose_bit_of_that_level_is_set(server, level):
    """Bit L of h is read from one byte of the field (byte 8 - L // 8): at every level,
    whichever byte holds it, bucket 0's fields with that bit set move to bucket 2^L and
    the others stay, none lost, and the record counts the one written."""
    backend = growing(server, shards=1, load=1)
    fields = [field_in_bucket_0(i, level) for i in range(40)]
    held, count = split_at(server, backend, level, dict.fromkeys(fields, ""))
    assert set(fields) <= held and len(held) <= len(fields) + 1
    assert backend.levels()[0].written == count + 1


def test_a_bucket_of_another_type_where_a_split_goes_refuses_the_call_and_loses_nothing(
    server,
):
    """The bucket a split would move fields into holds a list (another client's): the
    call that would split is refused before it writes, the bucket it would have emptied
    keeps every field, and the list is untouched."""
    backend = growing(server, shards=1, load=2)
    fps = [fp(i) for i in range(3)]
    assert backend.check_and_add_many(fps[:2]) == [False, False]  # (2 fields: due at 3)
    ((level, split),) = [(g.level, g.split) for g in backend.levels()]
    target = backend.layout.bucket_key(0, split + (1 << level))
    server.rpush(target, "foreign")
    before = {k: server.dump(k) for k in scan_keys(server, "{t:dedup")}
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        backend.check_and_add(fps[2])
    assert {k: server.dump(k) for k in scan_keys(server, "{t:dedup")} == before
    assert backend.contains_many(fps[:2]) == [True, True]


@pytest.mark.parametrize("role", ["stamp", "record"])
def test_a_key_of_another_type_in_place_of_a_stamp_or_level_record_refuses_before_writing(
    server, role
):
    """Another program's list where a group keeps its stamp or its level record, the
    group new (no other key of it yet): the call is refused (WRONGTYPE) before it writes,
    the list is kept and the group gets no bucket; a batch on one server writes nothing.
    (The calls read every stamp and record at once, where a key of another type reads as
    missing: such a group is read again key by key.)"""
    backend = growing(server, shards=2, load=2)
    layout = backend.layout
    key = (layout.stamp_keys if role == "stamp" else layout.level_keys)[0]
    server.delete(key)
    server.rpush(key, "foreign")
    fps = [fp(i) for i in range(20)]
    first = next(f for f in fps if layout.locate(f)[0] == 0)
    before = {k: server.dump(k) for k in scan_keys(server, "{t:dedup")}
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        backend.check_and_add(first)
    assert {k: server.dump(k) for k in scan_keys(server, "{t:dedup")} == before
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        backend.check_and_add_many(fps)
    assert server.lrange(key, 0, -1) == [b"foreign"]
    assert not server.exists(layout.bucket_key(0, 0))
    if not is_cluster(server):  # (one call for both groups)
        assert {k: server.dump(k) for k in scan_keys(server, "{t:dedup")} == before


def test_a_group_stamped_by_another_filter_is_refused_naming_both_before_writing(server):
    """A group's stamp that says other parameters (another program, a filter of another
    load at the same key): the call is refused (STAMP) with the stamp's key, what it
    says and what this filter is, per request and batched, and nothing is written."""
    backend = growing(server, shards=2, load=2)
    layout = backend.layout
    fps = [fp(i) for i in range(20)]
    backend.check_and_add_many(fps[:4])
    other = backend.stamp.replace("load=2", "load=9")
    assert other != backend.stamp
    server.set(layout.stamp_keys[0], other)
    first = next(f for f in fps[4:] if layout.locate(f)[0] == 0)
    before = {k: server.dump(k) for k in scan_keys(server, "{t:dedup")}
    said = f"stamp {layout.stamp_keys[0]} says the data beside it was written as {other}, "
    for call in (lambda: backend.check_and_add(first), lambda: backend.check_and_add_many(fps)):
        with pytest.raises(redis.ResponseError) as refused:
            call()
        assert code_of(refused.value) == "dedup:STAMP"
        assert f"{said}this filter is {backend.stamp}" in str(refused.value)
    if not is_cluster(server):  # (one call for both groups)
        assert {k: server.dump(k) for k in scan_keys(server, "{t:dedup")} == before
