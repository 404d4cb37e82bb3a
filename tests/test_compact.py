"""The compact backend's own promises: buckets sized from the server's listpack limit
and kept in the compact encoding, one call a request that writes its stamp, a warning when a filter
outgrows its capacity, a stored bucket count that settings and servers cannot change
silently, wrong-typed buckets refused. The shared behaviour (answers, batches, races,
clear(), crawls) is the ``compact`` row of the backend table (conftest.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scrapy_dedup_suite.backends import CompactBackend
from scrapy_dedup_suite.backends.compact import bucket_count
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.backends.listpack import listpack_limits
from scrapy_dedup_suite.exceptions import FilterMismatchError, WrongKeyTypeError
from scrapy_dedup_suite.server.cluster import masters
from scrapy_dedup_suite.server.failures import translate

from .helpers import fingerprints

ON_CLUSTER = True  # sizing reads every master's limit; buckets spread over the masters


def config_all(server: Any, name: str, value: str) -> None:
    for client in masters(server):
        client.config_set(name, value)


@pytest.fixture
def listpack_128(server: Any) -> Iterator[None]:
    """Every master keeps hashes of up to 128 fields compact (put back after)."""
    before = listpack_limits(server)
    assert before is not None
    config_all(server, "hash-max-listpack-entries", "128")
    yield
    config_all(server, "hash-max-listpack-entries", str(before[0]))


def encodings(server: Any, backend: CompactBackend) -> dict[str, int]:
    """How many of the filter's existing buckets have each encoding."""
    out: dict[str, int] = {}
    for keys in backend.bucket_keys():
        for key in keys:
            kind = server.object("encoding", key)
            if kind is not None:
                name = kind.decode() if isinstance(kind, bytes) else kind
                out[name] = out.get(name, 0) + 1
    return out


def test_buckets_filled_to_capacity_keep_the_compact_encoding(server):
    backend = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    backend.open()
    limit = listpack_limits(server)
    assert limit is not None
    assert backend.buckets == bucket_count(20_000, limit[0], 4)
    assert backend.add_many(fingerprints(20_000)) == 20_000
    found = encodings(server, backend)
    assert set(found) == {"listpack"}, found
    assert backend.count() == 20_000
    sample = backend.sample()
    assert sample.hashtables == 0 and sample.warning("t:c") is None
    assert 0.8 * 20_000 < sample.estimated_fields < 1.2 * 20_000


def test_sizing_reads_the_servers_listpack_limit(server, listpack_128):
    backend = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    backend.open()
    assert backend.buckets == bucket_count(20_000, 128, 4) == 313  # 64 a bucket
    backend.add_many(fingerprints(20_000))
    assert set(encodings(server, backend)) == {"listpack"}
    # Sized for the default 512 instead, most buckets would have left it.
    assert bucket_count(20_000, 512, 4) * 128 < 20_000


def test_the_stored_bucket_count_outlives_a_lower_limit_and_says_so(server, caplog):
    first = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    first.open()
    fps = fingerprints(500)
    first.add_many(fps)
    limit = listpack_limits(server)
    assert limit is not None
    config_all(server, "hash-max-listpack-entries", "64")
    try:
        again = CompactBackend(server, "t:c", capacity=20_000, shards=4)
        with caplog.at_level(logging.WARNING):
            again.open()
        assert again.buckets == first.buckets  # the record's, not the new limit's
        assert again.contains_many(fps) == [True] * 500
        assert "hash-max-listpack-entries is 64" in caplog.text
    finally:
        config_all(server, "hash-max-listpack-entries", str(limit[0]))


def test_past_capacity_answers_stay_exact_and_a_warning_names_the_setting(server, caplog):
    backend = CompactBackend(server, "t:c", capacity=1_000, shards=4)
    backend.open()
    fps = fingerprints(4_000)  # 1,000 a bucket: past any default limit
    assert backend.check_and_add_many(fps) == [False] * 4_000
    assert backend.check_and_add_many(fps) == [True] * 4_000
    assert "hashtable" in encodings(server, backend)
    with caplog.at_level(logging.WARNING):
        CompactBackend(server, "t:c", capacity=1_000, shards=4).open()
    assert "DEDUP_COMPACT_CAPACITY" in caplog.text and "answers stay exact" in caplog.text
    warning = backend.sample().warning("t:c")
    assert warning is not None and "holds about" in warning


def test_another_capacity_is_refused_with_advice_that_is_accepted(server):
    CompactBackend(server, "t:c", capacity=20_000, shards=4).open()
    with pytest.raises(FilterMismatchError, match="DEDUP_COMPACT_CAPACITY = 20000") as info:
        CompactBackend(server, "t:c", capacity=50_000, shards=4).open()
    assert "\n" not in str(info.value)
    CompactBackend(server, "t:c", capacity=20_000, shards=4).open()  # the advice works


#: What clients send to manage connections and read these statistics, not data.
CONNECTION_COMMANDS = tuple(
    f"cmdstat_{name}"
    for name in ("info", "config", "client", "cluster", "hello", "ping", "command")
)


def test_a_request_is_one_call_that_writes_its_stamp(server):
    """One round trip a request (one EVALSHA), and the bucket it writes never exists
    without its group's stamp, as on the batch path."""
    backend = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    backend.open()
    (fp,) = fingerprints(1)
    stamp, bucket = backend.fingerprint_types(fp)
    server.delete(stamp)  # (open wrote none for this group yet, or another worker cleared)
    for client in masters(server):
        client.config_resetstat()
    assert backend.check_and_add(fp) is False
    assert backend.check_and_add(fp) is True
    calls: dict[str, int] = {}
    for client in masters(server):
        for name, stat in client.info("commandstats").items():
            if not name.startswith(CONNECTION_COMMANDS):
                calls[name] = calls.get(name, 0) + int(stat["calls"])
    assert calls["cmdstat_evalsha"] == 2
    assert calls["cmdstat_hset"] == 1  # (inside the script, counted by the server too)
    assert server.exists(bucket) and server.get(stamp) == backend.stamp.encode()


def test_a_filter_written_per_request_whose_record_is_lost_is_not_opened_as_another(server):
    """The record lost, a filter recorded request by request is known by its stamps:
    another DEDUP_COMPACT_CAPACITY is refused (a new filter opened silently would take
    every page for new), and the capacity it names opens what was recorded."""
    backend = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    backend.open()
    fps = fingerprints(200)
    assert [backend.check_and_add(fp) for fp in fps] == [False] * 200
    server.delete(backend.meta_key)
    with pytest.raises(FilterMismatchError, match="DEDUP_COMPACT_CAPACITY = 20000"):
        CompactBackend(server, "t:c", capacity=50_000, shards=4).open()
    again = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    again.open()
    assert again.contains_many(fps) == [True] * 200


def test_a_bucket_of_another_type_is_named_and_never_deleted(server):
    backend = CompactBackend(server, "t:c", capacity=20_000, shards=4)
    backend.open()
    (fp,) = fingerprints(1, salt="wrong")
    (bucket,) = [k for k, kind in backend.fingerprint_types(fp).items() if kind == "hash"]
    server.rpush(bucket, "foreign")
    with pytest.raises(redis.ResponseError) as raised:
        backend.check_and_add(fp)
    error = translate(raised.value, backend, fp)
    assert isinstance(error, WrongKeyTypeError) and bucket in str(error)
    # A batch refuses it too: its call (on a cluster, the call for that bucket's slot,
    # which carries the other buckets of its group) writes nothing.
    (stamp,) = [k for k, kind in backend.fingerprint_types(fp).items() if kind == "string"]
    others = [
        other
        for other in fingerprints(1_000, salt="other")
        if stamp in backend.fingerprint_types(other)
        and bucket not in backend.fingerprint_types(other)
    ][:50]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        backend.check_and_add_many([*others, fp])
    assert backend.contains_many(others) == [False] * 50
    # clear() checks every bucket first: nothing is deleted.
    with pytest.raises(WrongKeyTypeError):
        backend.clear()
    assert server.lrange(bucket, 0, -1) == [b"foreign"]
    assert server.exists(backend.meta_key)


@pytest.mark.parametrize("cls", [CompactBackend, HashBucketsBackend], ids=["compact", "hash"])
def test_a_huge_capacity_costs_what_exists_and_is_warned_at_creation(server, cls, caplog):
    """DEDUP_COMPACT_CAPACITY = 10**12 (3.9e9 buckets): creation says the server could
    never hold it, with the figure; count() and clear() read the buckets that exist
    (counted by the server's own command statistics), not every bucket there could be."""
    with caplog.at_level(logging.WARNING):
        backend = cls(server, "t:huge", capacity=10**12, shards=4)
        backend.open()
    assert backend.buckets > 10**9
    assert "DEDUP_COMPACT_CAPACITY = 1,000,000,000,000" in caplog.text
    assert "GiB of Redis memory at capacity" in caplog.text
    fps = fingerprints(300)
    backend.check_and_add_many(fps)
    for client in masters(server):
        client.config_resetstat()
    assert backend.count() == 300
    backend.clear()
    assert backend.count() == 0
    calls: dict[str, int] = {}
    for client in masters(server):
        for name, stat in client.info("commandstats").items():
            calls[name] = calls.get(name, 0) + int(stat["calls"])
    assert calls.get("cmdstat_hlen", 0) <= 2 * 300  # each existing bucket, twice at most
    assert calls.get("cmdstat_type", 0) <= 2 * 300 + 100  # (and the filter's other keys)
    # A small filter warns of nothing at creation.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cls(server, "t:small", capacity=10_000, shards=4).open()
    assert "at capacity" not in caplog.text


@pytest.mark.parametrize(
    ("cls", "stored"), [(CompactBackend, 2_000), (HashBucketsBackend, 61)], ids=["compact", "hash"]
)
def test_the_count_is_counted_not_estimated(server, cls, stored):
    """dedup-info's count of a bucket filter is the fingerprints its buckets hold
    (HLEN of each that exists), labelled as counted: the review found a 61-fingerprint
    hash filter reported as 'about 0 (exact)' and 2,000 in compact as 1,373 to 2,136."""
    backend = cls(server, "t:count", capacity=10_000_000, shards=4)  # the default capacity
    backend.open()
    backend.add_many(fingerprints(stored, salt="count"))
    info = backend.info()
    assert info["fields"] == stored
    assert info["keys"] == backend.census()[0] + len(backend.stamp_keys) + 1
    described = "\n".join(line for item in backend.contents() for line in item.describe())
    assert f"{stored:,} fingerprints (counted)" in described or f"{stored:,} fields" in described
    assert "(exact)" not in described


def memory_of_every_key(server: Any, key: str) -> int:
    """MEMORY USAGE summed over every key of the filter at ``key``, found by SCAN."""
    total = 0
    for client in masters(server):
        for found in client.scan_iter(match=f"*{key}*", count=1000):
            total += int(client.memory_usage(found, samples=0) or 0)
    return total


@pytest.mark.parametrize("cls", [CompactBackend, HashBucketsBackend], ids=["compact", "hash"])
@pytest.mark.parametrize(
    ("capacity", "stored", "filters"),
    [(10_000_000, 50, 5), (20_000, 20_000, 1)],
    ids=["sparse", "near-capacity"],
)
def test_the_memory_said_is_the_sum_of_every_key_s_memory_usage(
    server, cls, capacity, stored, filters
):
    """dedup-info's and the summary's memory of a bucket filter, sparse or full. The
    review found it sampled (256 of 39,063 buckets): a sparse filter whose sample met no
    bucket counted its stamps and record only (2.8 KiB for 23 KiB). Several sparse
    filters, so that sampling misses in one of them at least."""
    for n in range(filters):
        key = f"t:mem{n}"
        backend = cls(server, key, capacity=capacity, shards=4)
        backend.open()
        backend.add_many(fingerprints(stored, salt=key))
        said = backend.info().memory_bytes
        measured = memory_of_every_key(server, key)
        assert measured * 0.99 <= said <= measured * 1.01, (said, measured)
        described = "\n".join(line for item in backend.contents() for line in item.describe())
        assert "bytes a fingerprint (MEMORY USAGE, every bucket)" in described
        # Far below its capacity, it says so beside what a fingerprint costs now.
        assert ("far below its capacity" in described) is (stored < capacity / 10)
