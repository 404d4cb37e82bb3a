"""The native-bloom backends: what is particular to the server's own Bloom filters.

The shared behaviour (answers, batches, clear, faults, crawls) runs in every module
over the backend table, native rows included; here: sizing, the parameters a filter
is checked against at open, a lost filter coming back with its own parameters, a
full NONSCALING filter, bucket expiry, and servers without the module.
"""

from __future__ import annotations

import logging
import re

import pytest
from scrapy import Request
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import (
    NativeBloomBackend,
    WindowedNativeBloomBackend,
    build_backend,
)
from scrapy_dedup_suite.backends.native import NoBloomModuleError
from scrapy_dedup_suite.core.bloom_math import SizingError
from scrapy_dedup_suite.core.native_math import (
    NATIVE_MAX_BYTES,
    NATIVE_MAX_CAPACITY,
    NativeParams,
    native_bits_per_item,
)
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import DedupBackendError, DedupConfigError, FilterMismatchError

from .helpers import fingerprints
from .servers import RedisServer, redis_server_binary

ON_CLUSTER = True


@pytest.fixture
def native(server):
    return server


def bf_info(server, key):
    info = server.execute_command("BF.INFO", key)
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in info.items()}


# -- sizing (pure) --------------------------------------------------------------------


def test_billions_are_split_into_blocks_each_under_the_servers_limits():
    p = NativeParams.create(5_000_000_000, 0.001, 0, 2)
    assert p.blocks > 1
    assert p.block_capacity <= NATIVE_MAX_CAPACITY
    assert p.block_capacity * native_bits_per_item(0.001) / 8 <= NATIVE_MAX_BYTES * 1.01
    assert NativeParams.create(1_000_000, 0.001, 0, 0).blocks == 1


def test_too_few_blocks_is_refused_with_how_many_are_needed():
    with pytest.raises(SizingError, match=r"too few: .* use [0-9]+ or more"):
        NativeParams.create(5_000_000_000, 0.001, 2, 0)


def test_settings_of_the_lua_filter_are_refused():
    settings = Settings({"DEDUP_BACKEND": "native-bloom", "DEDUP_BLOOM_TIGHTENING": 0.8})
    with pytest.raises(DedupConfigError, match="DEDUP_BLOOM_TIGHTENING does not apply"):
        build_backend(settings, "s", server=object())


def test_settings_choose_scaling_and_expansion():
    settings = Settings({"DEDUP_BACKEND": "native-bloom", "DEDUP_BLOOM_EXPANSION": 4})
    backend = build_backend(settings, "s", server=object())
    assert backend.params.expansion == 4
    settings = Settings({"DEDUP_BACKEND": "windowed-native-bloom"})
    backend = build_backend(settings, "s", server=object())
    assert backend.params.expansion == 0 and backend.key == "s:windowed-native-bloom"


# -- against a server with the module ------------------------------------------------------


def test_filters_are_created_with_the_configured_parameters(native):
    params = NativeParams.create(10_000, 0.001, 4, 0)
    backend = NativeBloomBackend(native, "t:n", params)
    backend.open()
    backend.add_many(fingerprints(100))
    for key in backend.prefixes:
        info = bf_info(native, key)
        assert info["Capacity"] == params.block_capacity
        assert info["Expansion rate"] is None  # NONSCALING


def test_a_flushed_filter_comes_back_with_its_own_parameters(native):
    params = NativeParams.create(10_000, 0.001, 1, 2)
    backend = NativeBloomBackend(native, "t:n", params)
    backend.open()
    native.flushall()
    # Not the server's defaults (capacity 100): BF.INSERT creates it as configured.
    assert backend.check_and_add_many(fingerprints(10)) == [False] * 10
    assert bf_info(native, backend.prefixes[0])["Capacity"] == 10_000
    assert backend.check_and_add_many(fingerprints(10)) == [True] * 10


def test_a_filter_made_with_other_parameters_is_refused_at_open(native):
    backend = NativeBloomBackend(native, "t:n", NativeParams.create(10_000, 0.001, 1, 2))
    native.execute_command("BF.RESERVE", backend.prefixes[0], 0.001, 500, "EXPANSION", 2)
    with pytest.raises(FilterMismatchError, match=r"holds 500 items .* DEDUP_BLOOM_CAPACITY"):
        backend.open()
    native.delete(backend.prefixes[0])
    native.execute_command("BF.RESERVE", backend.prefixes[0], 0.001, 10_000, "NONSCALING")
    with pytest.raises(FilterMismatchError, match="created NONSCALING"):
        backend.open()
    assert native.type(backend.prefixes[0]) == b"MBbloom--"  # left as it was


def test_the_record_names_the_setting_that_differs(native):
    first = NativeBloomBackend(native, "t:n", NativeParams.create(10_000, 0.001, 1, 0))
    first.open()
    first.add_many(fingerprints(10))
    other = NativeBloomBackend(native, "t:n", NativeParams.create(10_000, 0.01, 1, 0))
    with pytest.raises(FilterMismatchError, match=r"DEDUP_BLOOM_ERROR_RATE = 0.001"):
        other.open()
    bigger = NativeBloomBackend(native, "t:n", NativeParams.create(20_000, 0.001, 1, 0))
    with pytest.raises(FilterMismatchError, match=r"Set DEDUP_BLOOM_CAPACITY = 10000 as when"):
        bigger.open()


def test_a_scaled_filter_opens_again_with_its_sub_filters(native):
    params = NativeParams.create(1_000, 0.001, 1, 2)
    backend = NativeBloomBackend(native, "t:n", params)
    backend.open()
    fps = fingerprints(3_500)
    assert backend.add_many(fps) >= 3_490
    assert bf_info(native, backend.prefixes[0])["Number of filters"] == 3
    again = NativeBloomBackend(native, "t:n", params)
    again.open()
    assert all(again.contains_many(fps))


def test_a_scaling_filter_keeps_the_configured_rate_as_it_grows(native):
    """DEDUP_BLOOM_ERROR_RATE bounds the whole scalable filter, as for the Lua ones:
    the server makes its first sub-filter at half of it, each next one at half the
    last's."""
    params = NativeParams.create(2_000, 0.01, 1, 2)
    backend = NativeBloomBackend(native, "t:n", params)
    backend.open()
    backend.add_many(fingerprints(8_000))  # four times the capacity: three sub-filters
    assert bf_info(native, backend.prefixes[0])["Number of filters"] == 3
    # RedisBloom's BF.DEBUG lists each sub-filter's error rate ("ratio").
    debug = [x.decode() for x in native.execute_command("BF.DEBUG", backend.prefixes[0])]
    assert [d.split("ratio:")[1] for d in debug[1:]] == ["0.005", "0.0025", "0.00125"]
    assert bf_info(native, backend.prefixes[0])["Capacity"] == 2_000 + 4_000 + 8_000
    probes = fingerprints(20_000, "never-added")
    measured = sum(backend.contains_many(probes)) / len(probes)
    # Deterministic: fixed fingerprints, the server's fixed hashes.
    assert measured <= 0.01
    assert backend.info()["estimated_error_rate"] <= 0.01


def test_a_full_nonscaling_filter_raises_and_never_answers_seen(native):
    backend = NativeBloomBackend(native, "t:n", NativeParams.create(100, 0.01, 1, 0))
    backend.open()
    fps = fingerprints(300, "full")
    answers = []
    with pytest.raises(Exception, match="non scaling filter is full"):
        for fp in fps:
            answers.append(backend.check_and_add(fp))
    assert len(answers) >= 90
    # What was answered "seen" was a false positive at most (1%), never "full".
    assert sum(answers) <= 5


def test_the_dupefilter_explains_a_full_filter(native, redis_settings, caplog):
    """A full non-scaling server filter refuses new fingerprints: said in one ERROR;
    under "allow" each refused request passes once (never dropped), under "raise"
    (outside a crawl) the refusal is raised."""
    settings = {
        **redis_settings,
        "DEDUP_BACKEND": "native-bloom",
        "DEDUP_BLOOM_CAPACITY": 10,
        "DEDUP_BLOOM_ERROR_RATE": 0.01,
    }
    df = RFPDupeFilter.from_settings(Settings(settings))
    df.open()
    caplog.set_level(logging.ERROR)
    asked = [Request(f"http://example.com/{i}") for i in range(100)]
    answers = [df.request_seen(r) for r in asked]
    assert sum(answers) <= 1  # (one false positive at most before it filled)
    assert [df.request_seen(r) for r in asked] == [True] * 100  # each passed once
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and re.search(r"native-bloom.*non scaling filter is full", errors[0])
    strict = RFPDupeFilter.from_settings(Settings({**settings, "DEDUP_ON_ERROR": "raise"}))
    strict.key = df.key
    strict.open()
    with pytest.raises(DedupBackendError, match=r"native-bloom.*non scaling filter is full"):
        strict.request_seen(Request("http://example.com/new"))


def test_windowed_buckets_carry_their_expiry_and_get_it_back(native):
    backend = WindowedNativeBloomBackend(
        native, "t:w", NativeParams.create(1_000, 0.001, 2, 2), WindowSpec.parse("day", 3)
    )
    backend.open()
    backend.add_many(fingerprints(50))
    current = [keys[0] for keys in backend.live_keys()]
    assert all(0 < native.pttl(k) <= 3 * 86400 * 1000 for k in current)
    native.persist(current[0])
    assert backend.restore_expiry() == [current[0]]
    assert native.pttl(current[0]) > 0


def test_an_older_bucket_answers_seen_and_nothing_is_added_to_the_current(native):
    class Clock:
        now = 1_700_000_000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    backend = WindowedNativeBloomBackend(
        native, "t:w", NativeParams.create(1_000, 0.001, 1, 2), WindowSpec.parse(60, 3), clock=clock
    )
    backend.open()
    fps = fingerprints(20, "old")
    assert backend.check_and_add_many(fps) == [False] * 20
    clock.now += 60
    assert backend.check_and_add_many(fps) == [True] * 20
    current = backend.live_keys()[0][0]
    assert not native.exists(current)  # only read
    clock.now += 3 * 60  # every bucket that held them has left the window
    assert backend.check_and_add_many(fps) == [False] * 20


@pytest.mark.single_server
def test_a_server_without_the_module_is_refused_with_where_to_get_it():
    plain = RedisServer(redis_server_binary(), bloom=False).start()
    try:
        import redis

        client = redis.Redis(port=plain.port)
        with pytest.raises(NoBloomModuleError, match=r"no BF.* commands.*Redis 8.*valkey-bloom"):
            NativeBloomBackend(client, "t:n").open()
        assert client.keys() == []  # nothing written
    finally:
        plain.stop()


def test_dedup_info_reports_the_servers_filters(native, redis_settings):
    from scrapy_dedup_suite.commands.dedup_info import inspect, render

    settings = Settings({**redis_settings, "DEDUP_BACKEND": "native-bloom"})
    backend = build_backend(settings, "spider")
    backend.open()
    backend.add_many(fingerprints(1_000))
    text = render("spider", inspect(settings, "spider", backend.server))
    assert "native-bloom (DEDUP_BACKEND)" in text
    assert "about 1,000 items" in text
    assert "the server's own Bloom filters (BF.*), NONSCALING" in text


# -- migration into the server's filters ------------------------------------------------------


def test_a_set_migrates_into_native_bloom_resumably_and_verified(native):
    from scrapy_dedup_suite.operations.migrations import SetMigration

    members = [*fingerprints(6_000), "not-a-hex-digest"]  # the server hashes any string
    pipe = native.pipeline(transaction=False)
    pipe.sadd("src", *members)
    pipe.execute()
    target = NativeBloomBackend(native, "t:n", NativeParams.create(20_000, 0.001, 2, 0))

    class Interrupted(Exception):
        pass

    def die_after_half(done: int, total: int) -> None:
        if done >= 3_000:
            raise Interrupted

    with pytest.raises(Interrupted):
        SetMigration(target, "src", batch=500, round_size=1000, progress=die_after_half).run()
    plan = SetMigration(target, "src").plan()
    assert plan.target_exists and 2_500 < plan.items_already < len(members)
    assert "the server's Bloom filters (BF.*), 2 block(s), NONSCALING" in plan.describe()
    report = SetMigration(target, "src", verify="all").run(resume=True)
    assert report.resumed and report.verified == len(members) and report.skipped == []
    assert all(target.contains_many(members))
    info = target.info()
    assert len(members) <= info["estimated_items"] <= len(members) + 10


def test_a_set_larger_than_a_nonscaling_target_is_refused(native):
    from scrapy_dedup_suite.operations.migrations import SetMigration, TargetError

    native.sadd("src", *fingerprints(500))
    target = NativeBloomBackend(native, "t:n", NativeParams.create(100, 0.01, 1, 0))
    with pytest.raises(TargetError, match="too small"):
        SetMigration(target, "src").run()
    assert native.keys("t:n*") == []


@pytest.mark.subprocess
@pytest.mark.single_server
def test_the_command_migrates_into_native_bloom(native, redis_settings):
    from .test_migrate import run_command

    native.sadd("s:dupefilter", *fingerprints(2_000))
    result = run_command(
        redis_settings, "--spider", "s", "--to", "native-bloom", "--capacity", "10000"
    )
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout
    backend = NativeBloomBackend(native, "s:native-bloom", NativeParams.create(10_000, 0.001, 0, 0))
    assert all(backend.contains_many(fingerprints(2_000)))


def test_a_batch_that_would_overfill_a_nonscaling_filter_writes_nothing(native):
    backend = NativeBloomBackend(native, "t:n", NativeParams.create(100, 0.01, 1, 0))
    backend.open()
    for fp in fingerprints(95, "before"):
        backend.check_and_add(fp)
    key = backend.prefixes[0]
    held = native.execute_command("BF.CARD", key)
    batch = fingerprints(20, "batch")
    with pytest.raises(Exception, match="non scaling filter is full"):
        backend.check_and_add_many(batch)
    # All or nothing: none of the batch was recorded, so none of its pages is lost.
    assert native.execute_command("BF.CARD", key) == held
    assert not any(backend.contains_many(batch))
    # What fits still goes in.
    backend.check_and_add_many(batch[: 100 - held])
    assert held < native.execute_command("BF.CARD", key) <= 100
