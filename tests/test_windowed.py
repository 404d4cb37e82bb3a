"""The windowed Bloom filter: buckets, their expiry, calendar windows."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from scrapy_dedup_suite.backends import WindowedBloomBackend
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.exceptions import DedupConfigError, FilterMismatchError

from .helpers import all_keys, fingerprints
from .servers import poll_until

ON_CLUSTER = True  # tests that use `server` also run on the three-master cluster

PARAMS = BloomParams.from_capacity(10_000, 0.001)


def ts(text: str, tz: str = "UTC") -> float:
    from zoneinfo import ZoneInfo

    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.slow
def test_real_expiry_with_a_window_of_seconds(server):
    """Seen at t: filtered until at least t + (count-1) x window, gone by t + count x window."""
    window = WindowSpec.parse(2, 2)
    backend = WindowedBloomBackend(server, "t:w", PARAMS, window)
    backend.open()
    (fp,) = fingerprints(1)
    t = backend.now()
    assert backend.check_and_add(fp) is False
    key = backend.live_keys()[0][0]
    pttl = server.pttl(key)
    assert 0 < pttl <= 4000
    # The bucket's key expires exactly when the bucket leaves the window.
    assert window.expire_at(t) - t == pytest.approx(pttl / 1000, abs=0.05)
    assert backend.check_and_add(fp) is True  # within t + (count-1) x window
    # Past t + count x window (by the server's clock) the key is gone.
    poll_until(lambda: backend.now() > t + 4.05, timeout=60)
    assert not server.exists(key)  # freed by Redis itself
    assert backend.contains(fp) is False
    assert backend.check_and_add(fp) is False


def test_new_fingerprints_go_to_the_current_bucket_only(server):
    clock = Clock(ts("2026-03-10T12:00:00"))
    backend = WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("day", 3), clock=clock)
    backend.open()
    a, b = fingerprints(2)
    backend.check_and_add(a)
    clock.now += 86400
    assert backend.check_and_add(a) is True  # held by yesterday's bucket: not copied
    backend.check_and_add(b)
    assert backend.live_keys()[0] == [
        "{t:w:0}:20260311",
        "{t:w:0}:20260310",
        "{t:w:0}:20260309",
    ]
    assert server.bitcount("{t:w:0}:20260311") == PARAMS.hashes  # b only
    clock.now += 2 * 86400
    # a's bucket (10th) has left the window: a is new again, b (11th) is not.
    assert backend.contains(a) is False
    assert backend.contains(b) is True


def test_month_buckets_in_a_time_zone(server):
    clock = Clock(ts("2026-01-15T10:00:00", "Europe/Paris"))
    window = WindowSpec.parse("month", 2, "Europe/Paris")
    backend = WindowedBloomBackend(server, "t:m", PARAMS, window, clock=clock)
    backend.open()
    (fp,) = fingerprints(1)
    backend.check_and_add(fp)
    assert backend.live_keys()[0] == ["{t:m:0}:202601", "{t:m:0}:202512"]
    # The key expires at local midnight, 1 March (Paris), relative to "now".
    expected = ts("2026-03-01T00:00:00", "Europe/Paris") - clock.now
    assert server.pttl("{t:m:0}:202601") / 1000 == pytest.approx(expected, abs=1)
    clock.now = ts("2026-02-28T23:59:00", "Europe/Paris")
    assert backend.check_and_add(fp) is True
    # 23:30 UTC on 28 Feb is already March in Paris.
    clock.now = ts("2026-02-28T23:30:00", "UTC")
    assert backend.live_keys()[0][0] == "{t:m:0}:202603"
    assert backend.contains(fp) is False


def test_day_boundaries_follow_the_time_zone():
    w = WindowSpec.parse("day", 2, "America/New_York")
    b = w.bucket(ts("2026-11-01T23:30:00", "America/New_York"))
    assert b.label == "20261101"
    # DST ended that day: it lasted 25 hours.
    assert b.end - b.start == 25 * 3600


def test_hour_labels_stay_unique_when_a_local_hour_repeats():
    w = WindowSpec.parse("hour", 3, "Europe/Paris")
    first = ts("2026-10-25T00:30:00", "UTC")  # 02:30 CEST
    second = first + 3600  # 02:30 CET, the same local hour again
    assert w.bucket(first).label != w.bucket(second).label
    assert w.bucket(second).start - w.bucket(first).start == 3600


def test_window_in_seconds_is_epoch_aligned():
    w = WindowSpec.parse("60", 5)
    b = w.bucket(1_000_030.0)
    assert (b.start, b.end, b.label) == (1_000_020, 1_000_080, "1000020")
    assert [x.label for x in w.live(1_000_030.0)][:2] == ["1000020", "999960"]
    assert w.expire_at(1_000_030.0) == 1_000_020 + 5 * 60


def test_lost_expiry_is_restored(server):
    backend = WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("hour", 2))
    backend.open()
    a, b = fingerprints(2)
    backend.check_and_add(a)
    key = backend.live_keys()[0][0]
    server.persist(key)
    assert server.pttl(key) == -1
    backend.check_and_add(b)
    assert 0 < server.pttl(key) <= 2 * 3600 * 1000


def test_buckets_of_one_block_share_a_hash_tag(server):
    params = BloomParams.from_capacity(10_000, 0.01, blocks=3)
    backend = WindowedBloomBackend(server, "s:w", params, WindowSpec.parse("day", 7))
    for block, keys in enumerate(backend.live_keys()):
        assert len(keys) == 7
        assert all(k.startswith(f"{{s:w:{block}}}:") for k in keys)


def test_window_parameters_are_checked_on_open(server):
    WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("day", 7)).open()
    with pytest.raises(FilterMismatchError, match="window_count"):
        WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("day", 3)).open()
    with pytest.raises(FilterMismatchError, match="window: stored 'day', configured 'hour'"):
        WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("hour", 7)).open()


@pytest.mark.parametrize(("created", "other", "advice"), [(30, 60, "30"), ("day", 60, "'day'")])
def test_the_advice_on_a_window_mismatch_is_a_value_the_setting_takes(
    server, created, other, advice
):
    WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse(created, 3)).open()
    with pytest.raises(FilterMismatchError) as caught:
        WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse(other, 3)).open()
    assert f"Set DEDUP_WINDOW = {advice} as when it was created" in str(caught.value)
    # Taken as the advice says, the setting is accepted and opens the filter.
    value = eval(advice)  # the Python literal a settings.py would hold
    WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse(value, 3)).open()


def test_clock_follows_the_server(server):
    backend = WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("day", 2))
    seconds, micros = server.time()
    assert backend.now() == pytest.approx(seconds + micros / 1e6, abs=0.5)


def test_clear_removes_every_bucket(server):
    clock = Clock(ts("2026-03-10T12:00:00"))
    backend = WindowedBloomBackend(server, "t:w", PARAMS, WindowSpec.parse("day", 3), clock=clock)
    backend.open()
    for day in range(3):
        backend.add_many(fingerprints(10, salt=str(day)))
        clock.now += 86400
    server.set("{t:w:0}:notabucket", "keep")
    server.set("t:w:0", "keep")
    assert len(backend.bucket_keys_in_redis()) == 3
    assert backend.clear() == 5  # 3 buckets, the block's stamp and the record
    assert all_keys(server) == [b"t:w:0", b"{t:w:0}:notabucket"]


def scans(server) -> int:
    """SCAN calls every node of ``server`` has served."""
    stats = server.info("commandstats")
    if "cmdstat_scan" in stats or not stats:
        return int(stats.get("cmdstat_scan", {}).get("calls", 0))
    return sum(int(node.get("cmdstat_scan", {}).get("calls", 0)) for node in stats.values())


def test_open_and_the_janitor_find_buckets_by_the_clock_not_by_scan(server):
    """Opening, checking types and restoring expiries walk the recent buckets named by
    the clock: no SCAN over a keyspace that may hold millions of other keys."""
    clock = Clock(ts("2026-03-10T12:00:00"))
    window = WindowSpec.parse("day", 3)
    backend = WindowedBloomBackend(server, "t:w", PARAMS, window, clock=clock)
    before = scans(server)
    backend.open()
    backend.add_many(fingerprints(10))
    backend.restore_expiry()
    backend.info()
    assert scans(server) == before


def test_a_bucket_that_lost_its_expiry_while_live_is_found_after_it_left(server):
    """A bucket whose expiry was removed (a restore from a backup, say) outlives the
    window; the janitor still finds it for a window's length after, and gives it an
    expiry; clear() finds it too."""
    clock = Clock(ts("2026-03-10T12:00:00"))
    window = WindowSpec.parse("day", 3)
    backend = WindowedBloomBackend(server, "t:w", PARAMS, window, clock=clock)
    backend.open()
    backend.add_many(fingerprints(10))
    old = backend.live_keys()[0][0]
    server.persist(old)
    clock.now += 4 * 86400  # the bucket left the window a day ago
    assert old not in [k for keys in backend.live_keys() for k in keys]
    assert old in backend.bucket_keys_in_redis()
    assert backend.clear() == 3  # the bucket, the block's stamp and the record
    assert all_keys(server) == []
    backend.open()
    backend.add_many(fingerprints(10))
    again = backend.live_keys()[0][0]
    server.persist(again)
    clock.now += 4 * 86400
    assert backend.restore_expiry() == [again]
    assert server.pttl(again) != -1  # it left the window: it goes at once
    poll_until(lambda: not server.exists(again))  # by its restored expiry


@pytest.mark.parametrize(
    ("window", "count", "tz", "match"),
    [
        ("week", 3, "UTC", "DEDUP_WINDOW must be 'hour', 'day', 'month'"),
        (0, 3, "UTC", "DEDUP_WINDOW"),
        ("day", 0, "UTC", "DEDUP_WINDOW_COUNT"),
        ("day", "x", "UTC", "DEDUP_WINDOW_COUNT"),
        ("day", 3, "Mars/Olympus", "DEDUP_WINDOW_TZ"),
    ],
)
def test_bad_window_settings(window, count, tz, match):
    with pytest.raises(DedupConfigError, match=match):
        WindowSpec.parse(window, count, tz)


def test_utc_default_zone():
    w = WindowSpec.parse("day", 1)
    now = datetime(2026, 11, 21, 23, 59, tzinfo=timezone.utc).timestamp()
    assert w.bucket(now).label == "20261121"
