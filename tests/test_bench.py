"""A tiny run of the benchmark suite, so that it cannot rot (figures are not checked here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from .helpers import ROOT


def smoke(module: str, out, redis_server) -> subprocess.CompletedProcess:
    """``python -m module --smoke`` writing to ``out``, on the suite's server."""
    return subprocess.run(
        [sys.executable, "-m", module, "--smoke", "--out", str(out),
         "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_bench_smoke_run(tmp_path, redis_server):
    proc = smoke("bench", tmp_path, redis_server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    names = [row["name"] for row in results["rows"]]
    assert names[0] == "scrapy-redis: set"
    assert sum(n.startswith("scrapy-redis-bloomfilter") for n in names) == 2
    assert [n for n in names if n.startswith("ours")] == [
        "ours: set",
        "ours: hash",
        "ours: hash-shards (layout 1)",
        "ours: compact",
        "ours: bloom",
        "ours: windowed-bloom (7 buckets)",
    ]
    for row in results["rows"]:
        assert row["new_per_s"] > 0 and row["dup_per_s"] > 0, row
    ours = {row["name"]: row for row in results["rows"] if row["name"].startswith("ours")}
    # Round trips are counted on the client: our backends make one per request.
    assert all(row["round_trips"] == pytest.approx(1.0, abs=0.01) for row in ours.values())
    assert results["migration"]["fingerprints_per_s"] > 0
    # Half of 2,000 fields expired, in each layout of the hash backend.
    assert {layout: j["removed"] for layout, j in results["janitor"].items()} == {
        "shards": 1000,
        "buckets": 1000,
    }
    # Four crawlers at once: ours admits each request exactly once.
    ours_crowd = results["concurrency"]["ours"]
    assert ours_crowd["admitted"] == ours_crowd["distinct"] == 200
    assert results["concurrency"]["legacy"]["admitted"] >= 200
    assert len(results["targets"]) >= 11
    assert sorted(results["cluster"]) == ["bloom", "compact", "hash", "windowed-bloom"]
    assert all(e["cluster_new_per_s"] > 0 and e["ratio"] > 0 for e in results["cluster"].values())
    assert "migrate-set-to-bloom: 5,000 members at" in proc.stdout
    assert proc.stdout.count("met ") + proc.stdout.count("MISSED ") == len(results["targets"])
    assert (tmp_path / "results.png").stat().st_size > 10_000


def test_growing_bench_fills_a_filter_and_says_each_power_of_ten(redis_server):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.growing", "--fingerprints", "10000", "--batch", "500",
         "--one-by-one", "300", "--groups", "4", "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if " fingerprints: " in line]
    assert [line.split(" fingerprints:")[0].strip() for line in said] == ["1,000", "10,000"]
    assert all("0 hashtable(s)" in line for line in said)
    assert "batches of 500: median" in proc.stdout and "over 300 calls" in proc.stdout
    assert "SLOWLOG:" in proc.stdout and "levels and split pointers" in proc.stdout
    assert ", 4 groups" in proc.stdout, proc.stdout  # (--groups: DEDUP_HASH_SHARDS)


def test_memory_bench_measures_every_row_and_growing_filters_take_less_than_the_set(
    redis_server,
):
    """At 10,000 fingerprints, where what a server keeps once would still weigh (each row
    writes once before it is measured) and a query buffer the server's cron frees in the
    middle of a row moves its figure by about 1 B (at 1,000, with both cores busy, a
    growing filter once read 0.0 B): the growing filters take less than a third of the
    set's (the issue's goal: never more than the set's, at any size)."""
    proc = run_bench("bench.memory", "--fingerprints", "10000", "--server", redis_server.binary)
    rows = {
        line.split("  ")[1].strip(): float(line.split(" B/fingerprint")[0].split()[-1])
        for line in proc.stdout.splitlines()
        if "B/fingerprint" in line
    }
    assert {"scrapy-redis set", "compact, nothing sized (splits)"} <= set(rows), proc.stdout
    growing = [rows["compact, nothing sized (splits)"], rows["hash, nothing sized (splits)"]]
    # (their goals, 16 B and 20 B, against a set's 60-110 B on the servers here)
    assert all(0 < per < rows["scrapy-redis set"] / 3 for per in growing), proc.stdout


def test_convert_growing_bench_converts_and_checks_every_fingerprint(redis_server):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.convert_growing", "--fingerprints", "300", "2000",
         "--capacity", "100000", "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["300", "2,000"]
    assert all(float(row[2]) < float(row[1]) for row in rows)  # (less memory after)


def test_request_seen_bench_runs(redis_server):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.request_seen", "--requests", "300", "--rounds", "1",
         "--sized-for", "1", "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" new ")[0].strip() for line in proc.stdout.splitlines()[1:]]
    ours = ["set", "hash", "hash+growing", "compact", "compact+growing", "bloom", "windowed-bloom"]
    assert rows == ["scrapy-redis", *(r for b in ours for r in (b, f"{b} batched"))]
    assert "(1.00x)" in proc.stdout and "(compact and hash sized for 1x)" in proc.stdout
    # A filter sized below what it is offered is refused before any server starts.
    refused = run_bench_status("bench.request_seen", "--sized-for", "0.5")
    assert refused.returncode == 2 and "--sized-for must be at least 1" in refused.stderr


def test_server_features_bench_runs(redis_server):
    from .servers import bloom_module, redis8_binary, valkey9_binary

    proc = subprocess.run(
        [sys.executable, "-m", "bench.server_features", "--fingerprints", "400", "--probes",
         "400", "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # The bench finds its own server for the module (which may not be the suite's):
    # it prints the native rows or says why it skipped them, never neither.
    assert ("native-bloom (BF.*" in out) != ("native-bloom: skipped (" in out), out
    if bloom_module()[0] is not None:
        assert "native-bloom (BF.*" in out, out
    for label, found in (("Valkey 9", valkey9_binary), ("Redis 8", redis8_binary)):
        assert (f"hash, server's field expiry ({label})" in out) == (found()[0] is not None), out
    assert "hash, DEDUP_WAIT_REPLICAS = 1" in out
    assert "false positives" in out or "skipped" in out


def test_compact_layouts_bench_runs(redis_server):
    """The measurements behind the compact layout: small buckets stay listpacks, and a
    server whose limit is lower turns the same buckets into hash tables."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.compact_layouts", "--fingerprints", "20000",
         "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {
        line.strip().split("  ")[0]: line.split()[-1]
        for line in proc.stdout.splitlines()
        if "B/fingerprint" in line
    }
    assert len(rows) >= 7, proc.stdout
    buckets = [name for name in rows if name.startswith("buckets, ") and "TTL" not in name]
    assert len(buckets) == 4 and all(rows[name] == "listpack" for name in buckets), rows
    assert rows["the same 8-byte buckets, limit lowered to 128"] == "hashtable"


def test_plots_smoke_run(tmp_path, redis_server):
    """The figures the documentation shows are drawn from real runs: three images, each
    with the footer that says how it was made."""
    proc = smoke("bench.plots", tmp_path, redis_server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("memory.png", "crawl.png", "fp_rate.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, name
    # The fixed filter's rate at 4x its capacity is far above the scalable one's.
    assert "false positives: scalable (expansion 2)" in proc.stdout


def test_request_seen_bench_counts_python_calls(redis_server):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.request_seen", "--calls", "--requests", "200",
         "--server", redis_server.binary],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split()[0]: float(line.split()[1]) for line in proc.stdout.splitlines()[1:]}
    assert list(rows) == [
        "scrapy-redis",
        "set",
        "hash",
        "hash+growing",
        "compact",
        "compact+growing",
        "bloom",
        "windowed-bloom",
    ]
    assert all(100 < calls < 1000 for calls in rows.values()), rows


def run_bench_status(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def run_bench(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_bench_status(module, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_frontier_memory_bench_runs(redis_server):
    out = run_bench("bench.frontier_memory", "--requests", "3000", "--server", redis_server.binary)
    per = {
        line.strip().split("  ")[0]: float(line.split()[-6])
        for line in out.stdout.splitlines()
        if "B/request" in line
    }
    assert set(per) == {"scrapy-redis priority queue", "scrapy-redis FIFO queue", "frontier (data)"}
    assert per["frontier (data)"] < per["scrapy-redis priority queue"] / 2, out.stdout


def test_frontier_kills_bench_runs(redis_server):
    out = run_bench(
        "bench.frontier_kills", "--kills", "1", "--pages", "200", "--server", redis_server.binary
    )
    frontier = next(line for line in out.stdout.splitlines() if "frontier" in line)
    assert "lost:     0 in all" in frontier, out.stdout
    assert "scrapy-redis" in out.stdout


def test_crawl_bench_counts_the_schedulers_calls(redis_server):
    out = run_bench(
        "bench.crawl", "--pages", "60", "--links", "5", "--latency", "0",
        "--backends", "compact", "--only-schedulers", "--server", redis_server.binary,
    )  # fmt: skip
    rows = {line[:26].strip(): line.split() for line in out.stdout.splitlines()[-5:]}
    assert set(rows) == {
        "memory", "sr scheduler", "sr scheduler, compact b.", "frontier compact",
        "frontier compact b.",
    }, out.stdout  # fmt: skip
    per_page = float(rows["frontier compact b."][-1])
    assert 0.5 < per_page < 3, out.stdout  # about one call a page, everything counted


def test_crawl_bench_repeats_rounds_and_keeps_the_rows_asked_for(redis_server):
    out = run_bench(
        "bench.crawl", "--pages", "40", "--links", "4", "--latency", "0", "--repeat", "2",
        "--rows", "b.", "--backends", "compact", "--only-schedulers",
        "--server", redis_server.binary,
    )  # fmt: skip
    crawled = [line.split()[0] for line in out.stdout.splitlines() if "pages/s (" in line]
    assert crawled.count("memory") == 2, out.stdout  # one reference crawl per round
    table = out.stdout.split("calls/page\n", 1)[1].splitlines()
    rows = {line[:26].strip(): line for line in table if line.strip()}
    assert set(rows) == {"memory", "sr scheduler, compact b.", "frontier compact b."}, out.stdout
    low, high = rows["frontier compact b."].rsplit("(", 1)[1].rstrip("x)").split("-")
    assert 0 < float(low) <= float(high), out.stdout  # the range of the two rounds' ratios


def test_a_growing_row_of_the_crawl_bench_crawls_a_growing_filter(redis_server, server):
    """``--backends compact,compact+growing``: the second is compact with nothing
    sized (a filter with that row's settings opens growing; the first, sized), and
    both are crawled; a name that is no row is refused."""
    from scrapy.settings import Settings

    from bench.backend_rows import our_backend
    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.backends.growing import Growing

    for name, growing in (("compact", False), ("compact+growing", True), ("hash+growing", True)):
        backend = build_backend(Settings(our_backend(name)), "s", server=server, key=name)
        backend.open()
        assert isinstance(backend.layout, Growing) is growing, name
    with pytest.raises(ValueError, match="compact\\+sized"):
        our_backend("compact+sized")
    refused = run_bench_status("bench.crawl", "--backends", "compact,compact+sized")
    assert refused.returncode == 2 and "--backends: 'compact+sized'" in refused.stderr
    out = run_bench(
        "bench.crawl", "--pages", "40", "--links", "4", "--latency", "0",
        "--backends", "compact,compact+growing", "--server", redis_server.binary,
    )  # fmt: skip
    crawled = {line.split()[0] for line in out.stdout.splitlines() if "pages/s (" in line}
    assert {"compact", "compact+growing"} <= crawled, out.stdout


def test_frontier_start_bench_runs(redis_server):
    out = run_bench(
        "bench.frontier_start", "--trials", "1", "--pages", "200", "--server", redis_server.binary
    )
    row = next(line for line in out.stdout.splitlines() if "trial 0" in line)
    pages = row.split("pages [", 1)[1].split("]", 1)[0].split(", ")
    assert sum(int(n) for n in pages) == 200, out.stdout  # every page, once


def test_frontier_memory_bench_makes_varied_requests_with_extras(redis_server):
    out = run_bench(
        "bench.frontier_memory", "--requests", "2000", "--urls", "varied", "--extras",
        "--priorities", "2000", "--server", redis_server.binary, "--serializer", "pickle",
    )  # fmt: skip
    assert "2,000 priorities, varied URLs" in out.stdout and "with meta and cb_kwargs" in out.stdout
    assert "frontier (pickle)" in out.stdout
    assert out.stdout.count("B/request") == 3, out.stdout


def test_frontier_held_bench_counts_a_frozen_worker_s_leases(redis_server):
    out = run_bench(
        "bench.frontier_held", "--stops", "1", "--pages", "400", "--server", redis_server.binary
    )
    assert "1 stops of a worker alone" in out.stdout, out.stdout
    held = out.stdout.split("leases held ", 1)[1].split("-", 1)[0]
    assert int(held) >= 1, out.stdout  # (the page it was parsing, at least)


def test_frontier_queue_bench_measures_the_server_s_time_for_both_queues(redis_server):
    out = run_bench(
        "bench.frontier_queue", "--requests", "2000", "--priorities", "1,2000",
        "--server", redis_server.binary,
    )  # fmt: skip
    rows = [line for line in out.stdout.splitlines() if "us/request" in line]
    assert len(rows) == 4, out.stdout  # (push and take, per number of priorities)
    assert "2,000 requests, 2,000 priorities" in out.stdout
    for row in rows:
        ours, theirs = (float(x) for x in re.findall(r"([0-9.]+) (?:us/request|\()", row)[:2])
        assert ours > 0 and theirs > 0, row


def test_idle_bench_counts_what_a_waiting_worker_sends(redis_server):
    out = run_bench(
        "bench.idle", "--seconds", "6", "--warmup", "1", "--server", redis_server.binary
    )
    rows = {line[:14].strip(): line for line in out.stdout.splitlines() if "/s" not in line}
    assert {"sr scheduler", "frontier"} <= set(rows), out.stdout
    assert "EVALSHA" in rows["frontier"] and "ZCARD" in rows["sr scheduler"], out.stdout


def test_frontier_finish_bench_times_every_worker_s_exit(redis_server):
    out = run_bench(
        "bench.frontier_finish", "--trials", "1", "--workers", "2", "--pages", "200",
        "--server", redis_server.binary,
    )  # fmt: skip
    assert "trial 0: 200 pages" in out.stdout, out.stdout  # every page, once
    assert out.stdout.rstrip().endswith("exits before it: 0"), out.stdout


def test_politeness_bench_crawls_every_row_and_measures_on_the_hosts(redis_server):
    out = run_bench(
        "bench.politeness", "--pages", "40", "--hosts", "2", "--workers", "2", "--delay",
        "0.02", "--server", redis_server.binary,
    )  # fmt: skip
    rows = {line[:26].strip(): line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {
        "scrapy, 1 process", "frontier, 2 workers", "frontier off, 2 workers",
        "scrapy-redis, 2 workers",
    }  # fmt: skip
    assert all(row[-10] == "40" for row in rows.values()), out.stdout  # every page, each row
    assert all(row[-8].endswith("x") for row in rows.values()), out.stdout
    scripts = {name: float(row[-1]) for name, row in rows.items()}  # (scripts run, per page)
    assert scripts["scrapy, 1 process"] == 0 < scripts["frontier, 2 workers"], out.stdout


def test_scale_bench_crawls_with_each_count_of_workers_and_hosts_parked(redis_server):
    out = run_bench(
        "bench.scale", "--pages", "60", "--workers", "1", "--parked", "0,50",
        "--server", redis_server.binary,
    )  # fmt: skip
    rows = {line[:42].strip(): line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {
        "frontier, 1 worker(s), 0 hosts parked", "frontier, 1 worker(s), 50 hosts parked",
        "scrapy-redis, 1 worker(s)",
    }, out.stdout  # fmt: skip
    assert all(float(row[-3]) > 0 < float(row[-2]) for row in rows.values()), out.stdout
    assert float(rows["scrapy-redis, 1 worker(s)"][-1]) == 0  # (no script: SADD, ZADD...)


def test_metrics_bench_counts_a_scrape_s_calls_whatever_the_queue_s_size(redis_server):
    out = run_bench("bench.metrics", "--requests", "100,20000", "--server", redis_server.binary)
    rows = [line.split() for line in out.stdout.splitlines()[1:3]]
    assert [r[0] for r in rows] == ["100", "20,000"], out.stdout
    assert rows[0][1] == rows[1][1] and int(rows[0][1]) > 0, out.stdout  # the same calls
    assert rows[0][4] == rows[1][4] == "0", out.stdout  # a scrape inside the interval: none


@pytest.mark.single_server
def test_the_per_request_path_reads_the_stamp_without_a_call(server):
    """Issue 52 item 6: the per-request path keeps its call counts; the stamp the add
    script is sent is read from the backend's attribute once known (the property was a
    call more per request: bench.request_seen --calls, compact 287.5 -> 286.5)."""
    import cProfile
    import pstats

    from scrapy_dedup_suite.backends import BACKENDS

    backend = BACKENDS["compact"](server, "calls:compact")
    backend.open()
    backend.check_and_add("0" * 40)
    profile = cProfile.Profile()
    profile.enable()
    for i in range(20):
        backend.check_and_add(f"{i:040x}")
    profile.disable()
    called = {name for (_, _, name) in pstats.Stats(profile).stats}  # type: ignore[attr-defined]
    assert "stamp" not in called, sorted(called)
