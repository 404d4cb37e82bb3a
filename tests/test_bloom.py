"""The Bloom backend: sizing, the bit-position scheme, parameters, accuracy."""

from __future__ import annotations

import math

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import BloomBackend
from scrapy_dedup_suite.core.bloom_math import (
    MAX_BLOCK_BITS,
    BloomParams,
    Scaling,
    SizingError,
    check_fingerprint,
)
from scrapy_dedup_suite.exceptions import (
    DedupConfigError,
    FilterMismatchError,
    InvalidFingerprintError,
)
from scrapy_dedup_suite.settings.options import BloomOptions

from .helpers import fingerprints

ON_CLUSTER = True  # tests that use `server` also run on the three-master cluster


def test_sizing_follows_the_formulas():
    p = BloomParams.from_capacity(1_000_000, 0.001)
    assert p.total_bits == math.ceil(-1_000_000 * math.log(0.001) / math.log(2) ** 2)
    assert p.total_bits == 14_377_588
    assert p.hashes == 10
    assert p.blocks == 1
    # about 1.8 bytes a fingerprint at 0.1%
    assert 1.79 < p.memory_bytes / 1_000_000 < 1.80
    assert p.designed_rate() == pytest.approx(0.001, rel=0.03)


def test_large_filters_split_into_blocks_under_512mb():
    p = BloomParams.from_capacity(1_000_000_000, 0.001)
    assert p.blocks == 4
    assert p.block_bits <= MAX_BLOCK_BITS
    assert p.total_bits >= 14_377_587_227
    spread = BloomParams.from_capacity(1_000_000_000, 0.001, blocks=16)
    assert spread.blocks == 16 and spread.block_bits * 16 >= 14_377_587_227
    with pytest.raises(SizingError, match="blocks=2 is too few"):
        BloomParams.from_capacity(1_000_000_000, 0.001, blocks=2)
    too_few = {"DEDUP_BLOOM_CAPACITY": 1_000_000_000, "DEDUP_BLOOM_BLOCKS": 2}
    with pytest.raises(DedupConfigError, match="DEDUP_BLOOM_BLOCKS=2 is too few"):
        BloomOptions.from_settings(Settings(too_few))


@pytest.mark.parametrize(
    ("capacity", "error_rate", "match"),
    [
        (0, 0.001, "DEDUP_BLOOM_CAPACITY"),
        (-5, 0.001, "DEDUP_BLOOM_CAPACITY"),
        ("many", 0.001, "DEDUP_BLOOM_CAPACITY"),
        (1000, 0, "DEDUP_BLOOM_ERROR_RATE"),
        (1000, 1, "DEDUP_BLOOM_ERROR_RATE"),
        (1000, 1.5, "DEDUP_BLOOM_ERROR_RATE"),
        (1000, "low", "DEDUP_BLOOM_ERROR_RATE"),
        (1000, float("nan"), "DEDUP_BLOOM_ERROR_RATE"),
    ],
)
def test_bad_sizing_names_the_setting(capacity, error_rate, match):
    settings = Settings({"DEDUP_BLOOM_CAPACITY": capacity, "DEDUP_BLOOM_ERROR_RATE": error_rate})
    with pytest.raises(DedupConfigError, match=match):
        BloomOptions.from_settings(settings)
    # The math itself names its parameters plainly.
    plain = "capacity" if "CAPACITY" in match else "error rate"
    with pytest.raises(SizingError, match=plain):
        BloomParams.from_capacity(capacity, error_rate)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"DEDUP_BLOOM_EXPANSION": 0}, "DEDUP_BLOOM_EXPANSION"),
        ({"DEDUP_BLOOM_SCALING": True, "DEDUP_BLOOM_TIGHTENING": 1}, "DEDUP_BLOOM_TIGHTENING"),
        ({"DEDUP_BLOOM_SCALING": True, "DEDUP_BLOOM_MAX_LAYERS": 0}, "DEDUP_BLOOM_MAX_LAYERS"),
        ({"DEDUP_BLOOM_CAPACITY": 10**18, "DEDUP_BLOOM_ERROR_RATE": 1e-9}, "DEDUP_BLOOM_CAPACITY="),
    ],
)
def test_bad_growth_names_the_setting(settings, match):
    with pytest.raises(DedupConfigError, match=match):
        BloomOptions.from_settings(Settings(settings))


def test_the_math_refuses_what_no_filter_can_be_without_settings_names():
    for make in (
        lambda: Scaling(expansion=0),
        lambda: Scaling(tightening=1.0),
        lambda: Scaling(max_layers=0),
        lambda: BloomParams.from_capacity(1000, 0.01, blocks=10_000),
        lambda: BloomParams.from_bit_exponent(41, 6, 0.001),
    ):
        with pytest.raises(SizingError) as info:
            make()
        assert "DEDUP_" not in str(info.value) and "BLOOMFILTER_" not in str(info.value)


def test_legacy_bloomfilter_settings():
    p = BloomParams.from_bit_exponent(30, 6, 0.001)
    assert p.total_bits == 2**30 and p.hashes == 6 and p.blocks == 1
    big = BloomParams.from_bit_exponent(34, 6, 0.001)
    assert big.blocks == 4 and big.block_bits == 2**32
    with pytest.raises(DedupConfigError, match="BLOOMFILTER_BIT"):
        BloomOptions.from_settings(Settings({"BLOOMFILTER_BIT": 41}))
    with pytest.raises(DedupConfigError, match="BLOOMFILTER_HASH_NUMBER"):
        BloomOptions.from_settings(Settings({"BLOOMFILTER_HASH_NUMBER": 0}))
    with pytest.raises(DedupConfigError, match="BLOOMFILTER_HASH_NUMBER"):
        BloomOptions.from_settings(Settings({"BLOOMFILTER_HASH_NUMBER": 65}))


def test_reference_positions_follow_the_documented_arithmetic():
    p = BloomParams.from_capacity(1000, 0.01)
    fp = "0123456789ab" + "fedcba987654" + "00000000" + "00000000"
    block, pos = p.positions(fp)
    m = p.block_bits
    h1, h2 = 0x0123456789AB, 0xFEDCBA987654
    assert block == 0
    assert pos == [(h1 + i * h2) % m for i in range(p.hashes)]


def test_lua_sets_exactly_the_reference_bits(server):
    """The Lua scripts and the Python reference compute the same offsets, with
    Redis's bit order (offset 0 = most significant bit of byte 0)."""
    params = BloomParams.from_capacity(3000, 0.01, blocks=3)
    backend = BloomBackend(server, "t:bits", params)
    backend.open()
    fps = fingerprints(2000)
    backend.add_many(fps[:1000])
    for fp in fps[1000:1200]:
        backend.check_and_add(fp)
    local = [bytearray(math.ceil(params.block_bits / 8)) for _ in range(params.blocks)]
    for fp in fps[:1200]:
        block, offsets = params.positions(fp)
        for off in offsets:
            local[block][off // 8] |= 0x80 >> (off % 8)
    for block, key in enumerate(backend.block_keys):
        assert server.get(key) == bytes(local[block])


def test_bits_are_preallocated_at_full_size(server):
    params = BloomParams.from_capacity(100_000, 0.001, blocks=2)
    backend = BloomBackend(server, "t:alloc", params)
    backend.open()
    for key in backend.block_keys:
        assert server.strlen(key) == math.ceil(params.block_bits / 8)
        assert server.bitcount(key) == 0


def test_blocks_are_separate_keys_with_their_own_hash_tag(server):
    params = BloomParams.from_capacity(10_000, 0.01, blocks=4)
    backend = BloomBackend(server, "spider:bloomfilter", params)
    assert backend.block_keys == [f"{{spider:bloomfilter:{i}}}" for i in range(4)]
    backend.open()
    backend.add_many(fingerprints(2000))
    # Every block got a share of the fingerprints.
    assert all(server.bitcount(k) > 1000 for k in backend.block_keys)


def test_parameters_are_stored_and_checked_on_open(server):
    BloomBackend(server, "t:p", BloomParams.from_capacity(10_000, 0.01)).open()
    meta = {k.decode(): v.decode() for k, v in server.hgetall("t:p:meta").items()}
    assert meta["backend"] == "bloom"
    assert meta["scheme"] == "dh48-v1"
    assert meta["capacity"] == "10000" and meta["hashes"] == "7"
    # Same parameters: fine. Other capacity: refused, nothing changed.
    BloomBackend(server, "t:p", BloomParams.from_capacity(10_000, 0.01)).open()
    before = server.dump("{t:p:0}")
    # Said in the user's terms (capacity), not in the bits it implies.
    with pytest.raises(FilterMismatchError, match="capacity: stored '10,000', configured '20,000'"):
        BloomBackend(server, "t:p", BloomParams.from_capacity(20_000, 0.01)).open()
    assert server.dump("{t:p:0}") == before
    # A record written by another hashing scheme is refused too.
    server.hset("t:p:meta", "scheme", "dh32-v0")
    with pytest.raises(FilterMismatchError, match="scheme"):
        BloomBackend(server, "t:p", BloomParams.from_capacity(10_000, 0.01)).open()


def test_bits_without_a_parameter_record_are_refused(server):
    server.setbit("{t:o:0}", 5, 1)
    with pytest.raises(FilterMismatchError, match="record of the parameters"):
        BloomBackend(server, "t:o", BloomParams.from_capacity(10_000, 0.01)).open()
    assert server.getbit("{t:o:0}", 5) == 1
    assert not server.exists("t:o:meta")


def test_fingerprint_must_be_a_hex_digest(server):
    backend = BloomBackend(server, "t:h", BloomParams.from_capacity(10_000, 0.01))
    backend.open()
    with pytest.raises(InvalidFingerprintError):
        check_fingerprint("not-hex-at-all-not-hex-at-all-not-hex")
    import redis

    with pytest.raises(redis.ResponseError, match="not a hex digest"):
        backend.check_and_add("zz" * 20)
    multi = BloomBackend(server, "t:h2", BloomParams.from_capacity(10_000, 0.01, blocks=2))
    multi.open()
    with pytest.raises(InvalidFingerprintError):
        multi.check_and_add("short")


@pytest.mark.slow
def test_no_false_negatives_and_designed_false_positive_rate(server):
    """At capacity the measured rate stays near the designed one.

    n = 20,000 at p = 1%: the number of false positives among 20,000 new
    fingerprints is about Binomial(20000, 0.01) (mean 200, sd 14); 1.3 x p is
    more than 4 sd above the mean.
    """
    n, p = 20_000, 0.01
    backend = BloomBackend(server, "t:fp", BloomParams.from_capacity(n, p))
    backend.open()
    inserted = fingerprints(n, salt="in")
    assert backend.add_many(inserted) > n * 0.98
    assert all(backend.contains_many(inserted))
    others = fingerprints(n, salt="out")
    rate = sum(backend.contains_many(others)) / n
    assert 0.5 * p < rate < 1.3 * p
    info = backend.info()
    assert info["estimated_items"] == pytest.approx(n, rel=0.05)
    assert info["estimated_error_rate"] == pytest.approx(p, rel=0.15)
    assert info["over_capacity"] is False


@pytest.mark.single_server
def test_stamps_alone_still_name_the_fields_that_differ(server):
    """With the record gone, the stamps (which hold the compared fields only) still
    refuse other parameters, naming the fields."""
    backend = BloomBackend(server, "t:s", BloomParams.from_capacity(10_000, 0.01))
    backend.open()
    backend.check_and_add(fingerprints(1)[0])
    server.delete("t:s:meta")
    with pytest.raises(FilterMismatchError, match=r"block_bits: stored .*found in the stamp"):
        BloomBackend(server, "t:s", BloomParams.from_capacity(20_000, 0.01)).open()
