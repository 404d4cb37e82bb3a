"""The hash backend the janitor's way: per-fingerprint expiry timestamps on the Redis
server's clock, on any server (the server's own field expiry: test_field_expiry.py)."""

from __future__ import annotations

import time

import pytest

from scrapy_dedup_suite.exceptions import DedupConfigError, FilterMismatchError

from .helpers import fingerprints, janitor_hash

ON_CLUSTER = True  # tests that use `server` also run on the three-master cluster


def server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def test_field_holds_expiry_by_server_clock(server):
    backend = janitor_hash(server, "t:h", expire=3600, shards=4)
    backend.open()
    (fp,) = fingerprints(1)
    before = server_ms(server)
    backend.check_and_add(fp)
    after = server_ms(server)
    stored = int(server.hget(backend.shard_of(fp), fp))
    assert before + 3_600_000 <= stored <= after + 3_600_000


def test_expired_fingerprint_is_new_again_and_refreshed(server):
    backend = janitor_hash(server, "t:h", expire=0.6, shards=2)
    backend.open()
    a, b = fingerprints(2)
    assert backend.check_and_add(a) is False
    assert backend.check_and_add(a) is True
    assert backend.check_and_add(b, expire=60) is False
    time.sleep(0.8)
    assert backend.contains(a) is False
    assert backend.contains(b) is True
    assert backend.check_and_add(a) is False  # re-recorded
    assert backend.check_and_add(a) is True
    assert backend.check_and_add(b) is True


def test_expired_fields_stay_until_purged(server):
    backend = janitor_hash(server, "t:h", expire=0.2, shards=1)
    backend.open()
    backend.add_many(fingerprints(10))
    time.sleep(0.3)
    assert backend.contains_many(fingerprints(10)) == [False] * 10
    assert backend.info()["fields"] == 10


def test_fingerprints_spread_over_shards(server):
    backend = janitor_hash(server, "t:h", shards=8)
    backend.open()
    backend.add_many(fingerprints(800))
    sizes = [server.hlen(k) for k in backend.shard_keys]
    assert sum(sizes) == 800
    assert min(sizes) > 50


def test_shard_count_is_fixed_at_creation(server):
    janitor_hash(server, "t:h", shards=4).open()
    with pytest.raises(FilterMismatchError, match="shards: stored '4', configured '8'"):
        janitor_hash(server, "t:h", shards=8).open()


def test_a_corrupt_expiry_is_an_error_not_overwritten(server):
    backend = janitor_hash(server, "t:h", shards=1)
    backend.open()
    (fp,) = fingerprints(1)
    server.hset("t:h:0", fp, "yesterday")
    import redis

    with pytest.raises(redis.ResponseError, match="not an expiry timestamp"):
        backend.check_and_add(fp)
    assert server.hget("t:h:0", fp) == b"yesterday"


@pytest.mark.parametrize("expire", [0, -1, "soon", float("inf")])
def test_bad_expire(server, expire):
    with pytest.raises(DedupConfigError, match="DEDUP_EXPIRE"):
        janitor_hash(server, "t:h", expire=expire)
    backend = janitor_hash(server, "t:h")
    with pytest.raises(DedupConfigError, match="dedup_expire"):
        backend.check_and_add(fingerprints(1)[0], expire=expire)


def test_bad_shards(server):
    with pytest.raises(DedupConfigError, match="DEDUP_HASH_SHARDS"):
        janitor_hash(server, "t:h", shards=0)


def test_a_damaged_field_refuses_the_whole_batch_before_writing(server):
    backend = janitor_hash(server, "t:h", expire=3600, shards=1)
    backend.open()
    batch = fingerprints(10, "damaged")
    server.hset(backend.shard_of(batch[-1]), batch[-1], "not a number")
    with pytest.raises(Exception, match="is not an expiry timestamp"):
        backend.check_and_add_many(batch)
    # All or nothing: the nine before the damaged field were not recorded either.
    assert server.hlen(backend.shard_of(batch[0])) == 1
    assert backend.check_and_add_many(batch[:9]) == [False] * 9
    assert backend.check_and_add_many(batch[:9] + batch[:1]) == [True] * 10
