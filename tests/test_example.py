"""The example project's main job, run as a user runs it, against the test Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scrapy_dedup_suite.embedded import free_port

from .helpers import ROOT

PAGES, LINKS = 300, 10
OFFERED = 1 + PAGES * LINKS


def run_example(redis_server, tmp_path, *args: str, pages: int = PAGES) -> dict:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "run.py"), *args, "--json", str(out),
         "-s", f"EXAMPLE_PAGES={pages}", "-s", f"EXAMPLE_SITE_PORT={free_port()}"],
        env={**os.environ, "REDIS_URL": redis_server.url}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    result["stdout"], result["stderr"] = proc.stdout, proc.stderr
    return result


def test_every_backend_gives_the_same_exact_stats(redis_server, server, tmp_path):
    server.set("unrelated", "kept")
    result = run_example(redis_server, tmp_path, "--all")
    rows = {row["backend"]: row for row in result["crawls"]}
    assert list(rows) == [
        "set",
        "hash",
        "compact",
        "bloom",
        "windowed-bloom",
    ]  # every backend a Lua-only server has
    for backend, row in rows.items():
        assert (row["requests_checked"], row["new"], row["filtered"]) == (
            OFFERED,
            PAGES,
            OFFERED - PAGES,
        ), backend
        assert row["redis_memory_bytes"] > 0
    for backend in ("bloom", "windowed-bloom"):
        assert 0 < rows[backend]["fill_ratio"] < 0.05
        assert rows[backend]["estimated_error_rate"] < 1e-6
    # The table a person reads, and Scrapy's own stats with bloomfilter/filtered.
    assert "Deduplication of the example crawl:" in result["stdout"]
    assert f"'bloomfilter/filtered': {OFFERED - PAGES}" in result["stderr"]
    assert server.get("unrelated") == b"kept"


def test_windowed_demo_forgets_after_the_window(redis_server, server, tmp_path):
    # Buckets of 8 s, 2 of them: the second run starts within 8 s of the first
    # (a 50-page crawl and a process start), the third after all have expired.
    result = run_example(redis_server, tmp_path, "--windowed", "--window", "8", pages=50)
    assert [r["new"] for r in result["windowed"]] == [50, 0, 50]
    assert result["windowed"][1]["filtered"] == 1  # only its start page, seen a moment ago
    # The table labels each run (its rows were three identical "windowed-bloom").
    rows = [x for x in result["stdout"].splitlines() if "windowed-bloom  " in x]
    labels = ("first run", "again, within the window", "after the window")
    assert [x.split("  ")[0].strip() for x in rows] == list(labels)


def test_migration_demo_filters_everything_after_migrating(redis_server, server, tmp_path):
    result = run_example(redis_server, tmp_path, "--migration")
    set_run, bloom_run = result["migration"]
    assert (set_run["backend"], set_run["new"]) == ("set", PAGES)
    assert (bloom_run["backend"], bloom_run["new"], bloom_run["filtered"]) == ("bloom", 0, 1)
    assert f"migrated {PAGES} fingerprints from 'example-site:dupefilter'" in result["stdout"]


def test_a_taken_site_port_fails_with_one_line(redis_server, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, str(ROOT / "example_project" / "run.py"), "--backend", "set",
             "-s", f"EXAMPLE_SITE_PORT={port}"],
            env={**os.environ, "REDIS_URL": redis_server.url}, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"demo: cannot serve the example site on 127.0.0.1:{port} (Address already in use); "
        "stop what uses that port, or pass -s EXAMPLE_SITE_PORT=<a free port>"
    ]
    assert proc.stdout == ""  # no table of zeros
