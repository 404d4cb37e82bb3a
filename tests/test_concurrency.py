"""Many crawler processes at once: each distinct request is admitted exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from .conftest import NAMES

ON_CLUSTER = True  # the crowd also runs against the three-master cluster

ROOT = Path(__file__).resolve().parent.parent
PROCESSES, REQUESTS = 4, 3000


def run_crowd(
    url: str, topology: str, backend: str, requests: int, settings: dict | None = None
) -> Counter:
    """PROCESSES crawler processes offer the same ``requests`` requests, each in its own
    order, at the same moment; returns how often each fingerprint was admitted."""

    def crawler(seed: int) -> subprocess.Popen[str]:
        cluster = "1" if topology == "cluster" else "0"
        args = [url, cluster, backend, str(seed), str(requests), json.dumps(settings or {})]
        return subprocess.Popen(
            [sys.executable, "-m", "tests.admit", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    procs = [crawler(seed) for seed in range(PROCESSES)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:  # all offer the same requests, each in its own order, at once
        p.stdin.write("go\n")
        p.stdin.flush()
    admitted: Counter = Counter()
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        admitted.update(json.loads(out))
    return admitted


@pytest.mark.parametrize("backend", NAMES)
def test_concurrent_crawlers_admit_each_request_once(redis_url, topology, server, backend):
    admitted = run_crowd(redis_url, topology, backend, REQUESTS)
    # Never admitted twice, by any two processes.
    assert max(admitted.values()) == 1
    if backend in ("set", "hash"):
        assert sum(admitted.values()) == REQUESTS
    else:
        # A Bloom filter may take a new request for a duplicate (3,000 items in a
        # filter for 100,000 at 0.1%: the expected number is far below one).
        assert REQUESTS - 2 <= sum(admitted.values()) <= REQUESTS
