"""Behaviour every backend shares, parametrised over the one table of backends."""

from __future__ import annotations

import pytest
import redis

from scrapy_dedup_suite.exceptions import FilterMismatchError, WrongKeyTypeError

from .helpers import all_keys, fingerprints

ON_CLUSTER = True  # every test here also runs on the three-master cluster


def test_check_and_add_records_once(make_backend):
    backend = make_backend()
    backend.open()
    a, b = fingerprints(2)
    assert backend.check_and_add(a) is False
    assert backend.check_and_add(a) is True
    assert backend.check_and_add(b) is False
    assert backend.check_and_add(b) is True


def test_contains_records_nothing(make_backend):
    backend = make_backend()
    backend.open()
    (fp,) = fingerprints(1)
    assert backend.contains(fp) is False
    assert backend.contains(fp) is False
    assert backend.check_and_add(fp) is False
    assert backend.contains(fp) is True


def test_batched_add_and_contains(make_backend):
    backend = make_backend()
    backend.open()
    fps = fingerprints(2500)
    assert backend.add_many(fps[:1500]) == 1500
    # Re-adding is harmless and reports nothing new.
    assert backend.add_many(fps[:1500]) == 0
    found = backend.contains_many(fps)
    assert found[:1500] == [True] * 1500
    # Bloom false positives are possible in principle: about 1e-6 expected over these
    # 1000 queries for the fixed filters (3% of capacity), about 0.1 for the scalable
    # rows (compound rate 1e-4); the fingerprints are fixed, so the outcome is too.
    assert found[1500:] == [False] * 1000
    assert all(backend.check_and_add(fp) for fp in fps[:1500])


def test_state_survives_reopen(make_backend):
    first = make_backend()
    first.open()
    fps = fingerprints(50)
    first.add_many(fps)
    second = make_backend()
    second.open()
    assert second.contains_many(fps) == [True] * 50
    assert second.check_and_add(fps[0]) is True


def test_clear_deletes_owned_keys_and_nothing_else(make_backend, server):
    server.set("t:dedup-other", "keep")  # same prefix, another owner
    server.sadd("t:dedupe", "keep")
    server.set("unrelated", "keep")
    backend = make_backend()
    backend.open()
    fps = fingerprints(100)
    backend.add_many(fps)
    owned = backend.owned_keys()
    existing = [k for k in owned if server.exists(k)]
    assert existing, owned
    assert backend.clear() == len(existing)
    assert not any(server.exists(k) for k in owned)
    assert all_keys(server) == [b"t:dedup-other", b"t:dedupe", b"unrelated"]
    # Usable again after a clear.
    backend.open()
    assert backend.check_and_add(fps[0]) is False


@pytest.mark.parametrize("writer", ["list", "zset", "string-or-hash"])
def test_wrong_type_at_open_is_an_error_and_untouched(make_backend, server, backend_name, writer):
    backend = make_backend()
    expected = backend.expected_types()
    # Put a foreign value where the backend expects its first data key (a compact
    # filter checks its stamps at open, its buckets when they are used: test_compact.py).
    data_key = next(
        (k for k in expected if not k.endswith(":meta")),
        next(k for k in expected if k != f"{backend.key}:meta"),
    )
    kind = expected[data_key]
    if writer == "list":
        server.rpush(data_key, "foreign")
    elif writer == "zset":
        server.zadd(data_key, {"foreign": 1})
    else:
        # the type this backend does not use: a string for set/hash, a hash for bitmaps
        if kind == "string":
            server.hset(data_key, "foreign", "1")
        else:
            server.set(data_key, "foreign")
    before = server.dump(data_key)
    with pytest.raises(WrongKeyTypeError) as info:
        backend.open()
    assert data_key in str(info.value)
    assert info.value.expected == kind
    assert server.dump(data_key) == before
    # clear() refuses too, deleting nothing.
    with pytest.raises(WrongKeyTypeError):
        backend.clear()
    assert server.dump(data_key) == before


def test_wrong_type_during_requests_is_reported(make_backend, server):
    backend = make_backend()
    backend.open()
    (fp,) = fingerprints(1)
    backend.check_and_add(fp)
    (other,) = fingerprints(1, salt="x")
    for key in {**backend.expected_types(), **backend.fingerprint_types(other)}:
        if not key.endswith(":meta"):
            server.delete(key)
            server.rpush(key, "foreign")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        backend.check_and_add(other)


def test_info_reports_backend_and_memory(make_backend):
    backend = make_backend()
    backend.open()
    backend.add_many(fingerprints(300))
    info = backend.info()
    assert info["backend"] == backend.name
    assert info["memory_bytes"] > 0


def test_scripts_survive_script_flush(make_backend, server):
    backend = make_backend()
    backend.open()
    a, b = fingerprints(2)
    backend.check_and_add(a)
    server.script_flush()
    assert backend.check_and_add(a) is True
    server.script_flush()
    assert backend.contains_many([a, b]) == [True, False]
    server.script_flush()
    assert backend.add_many([b]) == 1


# The set backend keeps scrapy-redis's layout exactly: it has no parameter record.
@pytest.mark.parametrize(
    "backend_name", ["hash", "bloom", "windowed-bloom", "bloom+scaling", "windowed-bloom+scaling"]
)
def test_meta_of_another_backend_is_refused(make_backend, server, backend_name):
    server.hset("t:dedup:meta", mapping={"backend": "something-else", "layout": "1"})
    with pytest.raises(FilterMismatchError, match="something-else"):
        make_backend().open()


def test_a_server_that_lost_everything_is_reopened(make_backend, server):
    """After a restart without persistence (here: FLUSHALL and SCRIPT FLUSH) the next
    request recreates the parameter record with its data, so the next crawler that
    opens the filter finds a consistent filter, not orphaned keys."""
    backend = make_backend()
    backend.open()
    a, b = fingerprints(2)
    backend.check_and_add(a)
    server.flushall()
    server.script_flush()
    assert backend.check_and_add(b) is False
    assert backend.check_and_add(b) is True
    fresh = make_backend()
    fresh.open()
    assert fresh.contains(b) is True
