"""The janitor: purge of expired hash fields, one pass at a time, resume, reports."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from scrapy_dedup_suite.backends import BloomBackend, WindowedBloomBackend
from scrapy_dedup_suite.backends.reports import FilterFill
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.janitor import Janitor

from .helpers import ROOT, crawl, fingerprints, janitor_hash, setting_args, settings_for
from .servers import poll_until

ON_CLUSTER = True  # tests that use `server` also run on the three-master cluster


def seeded_hash(server, key="t:h", expired=3000, live=2000, shards=4):
    """A hash backend holding ``expired`` expired and ``live`` live fingerprints."""
    backend = janitor_hash(server, key, shards=shards)
    backend.open()
    old = fingerprints(expired, salt="old")
    new = fingerprints(live, salt="new")
    backend.add_many(old, expire=0.05)
    backend.add_many(new, expire=3600)
    time.sleep(0.1)
    return backend, old, new


def all_fields(server, backend) -> set[str]:
    return {f.decode() for key in backend.shard_keys for f in server.hkeys(key)}


def test_purges_exactly_the_expired_and_keeps_refreshed(server):
    backend, old, new = seeded_hash(server)
    refreshed: list[str] = []

    def refresh_during_pass(shard_key, candidates):
        # A crawler refreshes some expired fingerprints after the janitor read
        # them and before it deletes them: they must survive.
        for fp in candidates[:5]:
            assert backend.check_and_add(fp) is False  # expired: new again, re-recorded
            refreshed.append(fp)

    report = Janitor(backend, batch=100, on_scan=refresh_during_pass).run_pass()
    assert refreshed
    assert report.completed and not report.skipped
    assert report.removed == len(old) - len(refreshed)
    assert report.scanned >= len(old) + len(new)
    assert all_fields(server, backend) == set(new) | set(refreshed)
    assert report.remaining == len(new) + len(refreshed)
    assert all(backend.check_and_add(fp) for fp in new + refreshed)
    # A second pass has nothing left to do.
    assert Janitor(backend).run_pass().removed == 0


def test_works_in_bounded_batches(server):
    backend, _old, _new = seeded_hash(server, expired=2000, live=0, shards=1)
    sizes: list[int] = []
    report = Janitor(backend, batch=50, on_scan=lambda k, c: sizes.append(len(c))).run_pass()
    assert report.removed == 2000
    # HSCAN's COUNT is a hint (a call may return more); purges take at most 50
    # fields each: at least 40 purge calls besides one HSCAN per batch scanned.
    assert sum(sizes) == 2000
    assert report.calls >= len(sizes) + 2000 // 50


def test_two_janitors_at_once_do_one_pass(server):
    backend, old, _new = seeded_hash(server)
    other = Janitor(janitor_hash(server, "t:h", shards=4))
    inner = []

    def start_the_other(shard_key, candidates):
        if not inner:
            inner.append(other.run_pass())

    report = Janitor(backend, batch=200, on_scan=start_the_other).run_pass()
    assert inner[0].skipped is True
    assert inner[0].removed == 0
    assert report.skipped is False and report.removed == len(old)
    # The lock is released at the end: the next pass runs.
    assert other.run_pass().skipped is False


def test_stop_resumes_in_the_next_pass(server):
    backend, old, new = seeded_hash(server, shards=2)
    janitor = Janitor(backend, batch=100)
    batches = []

    def stop_after_three(shard_key, candidates):
        batches.append(shard_key)
        if len(batches) == 3:
            janitor.stop()

    janitor.on_scan = stop_after_three
    first = janitor.run_pass()
    assert not first.completed and 0 < first.removed < len(old)
    janitor.on_scan = None
    second = janitor.run_pass()
    assert second.resumed and second.completed
    assert first.removed + second.removed == len(old)
    assert all_fields(server, backend) == set(new)


def test_a_custom_backend_gets_what_it_declares(server):
    """The janitor chooses by the capabilities a backend declares, not by its class."""
    from scrapy_dedup_suite.backends import SetBackend
    from scrapy_dedup_suite.backends.capabilities import Capabilities

    class Audited(SetBackend):
        name = "audited"
        capabilities = Capabilities(count=True, report_fill=True)

        def filter_reports(self, info=None):
            n = self.count()
            return [FilterFill(n / 100, n, 0.5, n > 100, capacity=100, error_rate=0.01)]

    backend = Audited(server, "t:audited")
    backend.add_many(fingerprints(150))
    report = Janitor(backend).run_pass()
    assert report.remaining == 150 and not report.purged
    assert report.filters == [FilterFill(1.5, 150, 0.5, True, capacity=100, error_rate=0.01)]
    assert any("past its capacity of 100" in w for w in report.warnings)
    # Declaring nothing, a backend gets the lock and the report, and nothing else.
    plain = SetBackend(server, "t:audited")
    plain.capabilities = Capabilities()  # type: ignore[misc]
    assert Janitor(plain).run_pass().remaining == 0


def test_a_backend_that_declares_a_capability_defines_its_methods():
    from scrapy_dedup_suite.backends import SetBackend
    from scrapy_dedup_suite.backends.capabilities import Capabilities

    with pytest.raises(TypeError, match="Unfinished declares report_fill but does not define"):

        class Unfinished(SetBackend):
            capabilities = Capabilities(report_fill=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [("shard", "garbage"), ("shard", "-1"), ("shard", "999"), ("cursor", "x"), ("cursor", "-5")],
)
def test_a_corrupted_progress_record_is_reset_with_a_warning(server, field, value, caplog):
    backend, old, _new = seeded_hash(server, shards=2)
    server.hset("t:h:janitor", mapping={"shard": 0, "cursor": 0, field: value})
    with caplog.at_level(logging.WARNING):
        report = Janitor(backend).run_pass()
    assert report.completed and report.removed == len(old)
    assert any("could not be read" in w for w in report.warnings)
    assert "could not be read" in caplog.text
    # And the passes after it run as usual.
    assert Janitor(backend).run_pass().warnings == []


def janitor_command(redis_settings, *args, timeout=120):
    cmd = [
        sys.executable, "-m", "scrapy.cmdline", "dedup-janitor",
        *setting_args(redis_settings), "-s", "DEDUP_BACKEND=hash",
        "-s", "DEDUP_HASH_SHARDS=4", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.subprocess
def test_killed_janitor_is_finished_by_the_next(redis_settings, server):
    backend, old, new = seeded_hash(server, key="killed:dedup-hash", expired=30000, live=1000)
    proc = janitor_command(
        redis_settings, "--spider", "killed", "--once", "--batch", "5",
        "-s", "DEDUP_JANITOR_LOCK_TIMEOUT=5",
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not server.hexists("killed:dedup-hash:janitor", "cursor"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = len(all_fields(server, backend))
    assert len(new) < left < len(old) + len(new)
    # Its lock is still held: a janitor started now skips its pass...
    again = Janitor(janitor_hash(server, "killed:dedup-hash", shards=4))
    assert again.run_pass().skipped
    # ...and once the lock has expired, the next pass resumes and finishes.
    poll_until(lambda: not server.exists("killed:dedup-hash:janitor:lock"))
    report = again.run_pass()
    assert report.resumed and report.completed
    assert all_fields(server, backend) == set(new)


@pytest.mark.subprocess
def test_command_once_prints_what_it_removed(redis_settings, server):
    seeded_hash(server, key="cmd:dedup-hash", expired=300, live=200)
    proc = janitor_command(redis_settings, "--spider", "cmd", "--once")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "removed 300 expired of 500 scanned fields (200 remain), pass finished" in out
    # DEDUP_HASH_SHARDS "auto" (unset): the filter's own.
    proc = janitor_command(
        redis_settings, "--key", "cmd:dedup-hash", "--once", "--json",
        "-s", "DEDUP_HASH_SHARDS=auto",
    )  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["removed"] == 0 and report["remaining"] == 200 and report["completed"]


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--once"], 2, "Say which dupefilter"),
        (["--spider", "cmd", "--once", "-s", "DEDUP_HASH_SHARDS=8"], 1, "shards: stored '4'"),
        (["--spider", "cmd", "--cron", "not a cron"], 2, "is not valid"),
        (["--spider", "cmd", "--interval", "-1"], 1, "DEDUP_JANITOR_INTERVAL"),
    ],
)
def test_command_errors(redis_settings, server, args, code, message):
    seeded_hash(server, key="cmd:dedup-hash", expired=1, live=1)
    proc = janitor_command(redis_settings, *args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert message in out + err


@pytest.mark.subprocess
def test_command_runs_as_a_service_until_terminated(redis_settings, server):
    backend, _old, new = seeded_hash(server, key="svc:dedup-hash", expired=100, live=10)
    proc = janitor_command(redis_settings, "--spider", "svc", "--interval", "0.3")
    first = proc.stdout.readline()  # the first pass runs at start
    assert "removed 100 expired" in first
    backend.add_many(fingerprints(50, salt="later"), expire=0.05)
    deadline = time.monotonic() + 30
    while len(all_fields(server, backend)) != len(new):
        assert proc.poll() is None
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "removed 50 expired" in out
    # Its log is a service's: Scrapy's format with timestamps, at LOG_LEVEL (INFO here).
    said = next(line for line in err.splitlines() if "Janitor for 'svc:dedup-hash' running" in line)
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[", said), said
    assert "every 0.3 s" in said


def test_a_pass_over_a_backend_with_nothing_to_purge_says_so(server):
    from scrapy_dedup_suite.backends import CompactBackend

    backend = CompactBackend(server, "t:nothing", capacity=10_000, shards=4)
    backend.open()
    backend.add_many(fingerprints(10, salt="nothing"))
    said = Janitor(backend).run_pass().summary()
    assert "nothing to do: the compact backend has no expiry to purge" in said


def test_growth_warning(server):
    backend = janitor_hash(server, "t:g", shards=1)
    backend.open()
    janitor = Janitor(backend)
    warnings = []
    for i in range(4):
        backend.add_many(fingerprints(100, salt=f"g{i}"), expire=3600)
        warnings = janitor.run_pass().warnings
    assert any("grew in each of the last 3 passes" in w for w in warnings)


def test_bloom_report_and_capacity_warning(server):
    backend = BloomBackend(server, "t:b", BloomParams.from_capacity(1000, 0.01))
    backend.open()
    backend.add_many(fingerprints(500))
    report = Janitor(backend).run_pass()
    (fill,) = report.filters
    assert 0.2 < fill.fill_ratio < 0.4
    assert fill.estimated_items == pytest.approx(500, rel=0.1)
    assert report.warnings == []
    backend.add_many(fingerprints(2500, salt="more"))
    report = Janitor(backend).run_pass()
    assert any("past its capacity of 1,000" in w for w in report.warnings)
    assert "fill" in report.summary()


def test_windowed_expiry_restored(server):
    window = WindowSpec.parse(3600, 3)
    backend = WindowedBloomBackend(server, "t:w", BloomParams.from_capacity(1000, 0.01), window)
    backend.open()
    backend.add_many(fingerprints(10))
    current = backend.live_keys()[0][0]
    # A bucket restored from a backup without its expiry, and an old one.
    server.persist(current)
    old_label = window.bucket(backend.now(), -5).label
    stale = f"{{t:w:0}}:{old_label}"
    server.setbit(stale, 10, 1)
    report = Janitor(backend).run_pass()
    assert sorted(report.restored_expiry) == sorted([current, stale])
    assert 0 < server.pttl(current) <= 3 * 3600 * 1000
    # The old bucket's moment has passed: it was given 1 ms to live.
    time.sleep(0.01)
    assert not server.exists(stale)
    assert report.filters[0].label == current.rsplit(":", 1)[1]


def test_extension_runs_during_a_crawl(tmp_path, site, redis_server, redis_settings, server):
    janitor_hash(server, "site:dedup-hash", shards=4).open()
    janitor_hash(server, "site:dedup-hash", shards=4).add_many(fingerprints(700), expire=0.05)
    time.sleep(0.1)
    settings = settings_for(
        redis_settings,
        "hash",
        "scrapy",
        redis_server.url,
        EXTENSIONS={"scrapy_dedup_suite.janitor.JanitorExtension": 500},
        DEDUP_JANITOR_INTERVAL=0.5,
        DOWNLOAD_DELAY=0.005,
    )
    started = time.monotonic()
    result = crawl(tmp_path, site, settings)
    stats = result["stats"]
    assert stats["dedup/janitor/passes"] >= 1
    assert stats["dedup/janitor/removed"] == 700
    assert stats["dedup/added"] == site.pages
    assert "Janitor: a pass every 0.5 s" in result["log"]
    # APScheduler's own lines (job added, running, executed) are left out.
    assert "apscheduler" not in result["log"]
    # The crawl ended normally, and no janitor thread outlived it.
    assert time.monotonic() - started < 60
    assert not [t for t in result["threads"] if "APScheduler" in t or "ThreadPoolExecutor" in t]


def test_an_empty_bloom_filter_reports_zero_items(server):
    backend = BloomBackend(server, "j:empty", BloomParams.from_capacity(1000, 0.01))
    backend.open()
    summary = Janitor(backend).run_pass().summary()
    assert "about 0 items" in summary
    assert "-0" not in summary


def test_the_extension_schedules_nothing_for_the_set_backend(
    tmp_path, site, redis_server, redis_settings, server
):
    settings = settings_for(
        redis_settings,
        "set",
        "scrapy",
        redis_server.url,
        EXTENSIONS={"scrapy_dedup_suite.janitor.JanitorExtension": 500},
        DEDUP_JANITOR_INTERVAL=0.5,
    )
    result = crawl(tmp_path, site, settings)
    assert "Janitor: nothing to do for the set dupefilter" in result["log"]
    assert "dedup/janitor/passes" not in result["stats"]
    assert result["stats"]["dedup/added"] == site.pages


@pytest.mark.timeout(300)
def test_a_pass_over_a_huge_capacity_costs_what_exists(server):
    """A bucket filter sized for 10**11 fingerprints (3.9e8 buckets) holding a few
    hundred: a pass walks the buckets that exist (SCAN of each group's slot), not every
    bucket there could be, and purges exactly the expired ones; purge_remaining at its
    end is as cheap (the server's own count of the purge script's calls)."""
    from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
    from scrapy_dedup_suite.server.cluster import masters
    from scrapy_dedup_suite.server.connection import server_time_ms

    from .helpers import stored_expiry_ms

    backend = HashBucketsBackend(server, "t:huge", capacity=10**11, shards=4, field_expiry=False)
    backend.open()
    old, new = fingerprints(300, salt="old"), fingerprints(200, salt="new")
    backend.add_many(old, expire=0.05)
    backend.add_many(new, expire=3600)
    deadline = max(stored_expiry_ms(backend, fp) for fp in old)
    poll_until(lambda: server_time_ms(server) >= deadline, timeout=30)
    for client in masters(server):
        client.config_resetstat()
    report = Janitor(backend, batch=100).run_pass()
    assert report.completed and report.removed == len(old)
    assert report.remaining == len(new)
    calls = sum(
        int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
        for client in masters(server)
    )
    assert calls < 100, calls  # (every bucket by number: 3.9e8 / 1,000 calls)
    assert backend.contains_many(new) == [True] * len(new)
