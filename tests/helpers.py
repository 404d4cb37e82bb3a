"""Helpers the test modules share: real crawls and crowds in subprocesses, clients,
fingerprints. Fixtures and the one table of backends are in conftest.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from scrapy_dedup_suite.backends import HashBackend
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend

ROOT = Path(__file__).resolve().parent.parent

#: The settings that build each row of the backend table (conftest.BACKENDS) from a
#: crawler, for crawls and crawler processes.
SETTINGS_ROWS: dict[str, dict[str, Any]] = {
    "set": {"DEDUP_BACKEND": "set"},
    "hash": {"DEDUP_BACKEND": "hash", "DEDUP_COMPACT_CAPACITY": 5_000},
    "compact": {"DEDUP_BACKEND": "compact", "DEDUP_COMPACT_CAPACITY": 5_000},
    "compact+growing": {"DEDUP_BACKEND": "compact", "DEDUP_COMPACT_CAPACITY": 0},
    "hash+growing": {"DEDUP_BACKEND": "hash", "DEDUP_COMPACT_CAPACITY": 0},
    "bloom": {"DEDUP_BACKEND": "bloom"},
    "windowed-bloom": {"DEDUP_BACKEND": "windowed-bloom"},
    "bloom+scaling": {"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_SCALING": True},
    "windowed-bloom+scaling": {"DEDUP_BACKEND": "windowed-bloom", "DEDUP_BLOOM_SCALING": True},
    "native-bloom": {"DEDUP_BACKEND": "native-bloom"},
    "windowed-native-bloom": {
        "DEDUP_BACKEND": "windowed-native-bloom",
        "DEDUP_BLOOM_SCALING": True,
    },
    "digest-set": {"DEDUP_BACKEND": "tests.digest_backend.DigestSetBackend"},
}

SCHEDULERS = {
    "scrapy": "scrapy.core.scheduler.Scheduler",
    "scrapy-redis": "scrapy_redis.scheduler.Scheduler",
    "frontier": "scrapy_dedup_suite.frontier.scheduler.Scheduler",
}


def crawl(
    tmp_path: Path, site, settings: dict, name: str = "run", start_dont_filter: bool = False
) -> dict:
    args = {
        "start_url": f"{site.url}/page/0",
        "settings": settings,
        "start_dont_filter": start_dont_filter,
    }
    return run_script("tests.crawl", args, tmp_path / f"{name}.json")


def run_script(module: str, args: dict, out: Path, timeout: float = 180) -> dict:
    """``python -m module '{json args, "out": out}'`` in a fresh process; its JSON
    output, with its log (stderr) under "log"."""
    proc = subprocess.run(
        [sys.executable, "-m", module, json.dumps({**args, "out": str(out)})],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    result["log"] = proc.stderr
    return result


def crawl_worker(tmp_path: Path, url: str, settings: dict, name: str, **more: Any):
    """A crawl of the site at ``url`` from its page 0 in its own process
    (tests.crawl_cases; ``more``: more of its arguments); each page it parses is noted
    at once in ``<name>.notes``."""
    args = {"site": url, "start": [0], "settings": settings, **more}
    args.update(pages_file=str(tmp_path / f"{name}.notes"), out=str(tmp_path / f"{name}.json"))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.crawl_cases", json.dumps(args)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def settings_for(
    redis_settings: dict, backend: str, scheduler: str, queue_url: str = "", **extra
) -> dict:
    """A crawl's settings: ``backend`` is a row of the backend table (or a DEDUP_BACKEND)."""
    where = dict(redis_settings)
    if where["DEDUP_REDIS_CLUSTER"] and scheduler == "scrapy-redis":
        # scrapy-redis's queue stays on a single server; the fingerprints go to the cluster.
        where = {**where, "REDIS_URL": queue_url, "DEDUP_REDIS_URL": where["REDIS_URL"]}
    return {
        **where,
        "SCHEDULER": SCHEDULERS[scheduler],
        **SETTINGS_ROWS.get(backend, {"DEDUP_BACKEND": backend}),
        "DEDUP_BLOOM_CAPACITY": 100_000,
        "DEDUP_HASH_SHARDS": 4,
        "DEDUP_WINDOW_COUNT": 3,
        # The test sites answer 503 for pages that fail: the frontier's shared back-off
        # blocks the host for 50 ms, not 10 s, each time (test_frontier_slots.py tests
        # the back-off itself).
        **({"FRONTIER_BACKOFF": 0.05} if scheduler == "frontier" else {}),
        **extra,
    }


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


def setting_args(redis_settings: dict) -> list[str]:
    """``-s NAME=VALUE`` options that reach the server (or cluster) under test."""
    return [arg for name, value in redis_settings.items() for arg in ("-s", f"{name}={value}")]


def run_command(
    name: str, redis_settings: dict, *args: str, settings: dict | None = None
) -> subprocess.CompletedProcess:
    """``scrapy NAME`` in a subprocess outside any project, on the server under test,
    with ``settings`` given as ``-s`` options before ``args``."""
    given = [arg for key, value in (settings or {}).items() for arg in ("-s", f"{key}={value}")]
    return subprocess.run(
        [sys.executable, "-m", "scrapy.cmdline", name, *setting_args(redis_settings), *given,
         *args],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def snapshot(server: Any) -> dict:
    """Every key's DUMP: what a refusal must leave as it was."""
    return {k: server.dump(k) for k in all_keys(server)}


def connect(url: str, topology: str) -> Any:
    """A client as scrapy-redis builds it (bytes replies); a RedisCluster on the cluster."""
    if topology == "cluster":
        return RedisCluster.from_url(url)
    return redis.Redis.from_url(url)


def all_keys(client: Any) -> list[bytes]:
    """Every key on the server or on every master of the cluster, sorted."""
    return sorted(client.scan_iter(match="*", count=1000))


def janitor_hash(server: Any, key: str, **kw: Any) -> HashBackend:
    """A hash filter kept the janitor's way (expiry timestamps in its fields) on any
    server, for the tests of that way; a server that expires fields itself would
    otherwise be given the new filter (see test_field_expiry.py)."""
    return HashBackend(server, key, field_expiry=False, **kw)


def stored_expiry_ms(backend: Any, fingerprint: str) -> int:
    """The expiry a hash filter of the janitor's way stored for ``fingerprint``, in
    Unix ms (whole seconds, rounded up, in the bucket layout)."""
    if isinstance(backend, HashBucketsBackend):
        bucket, field = backend.locate(fingerprint)
        return int(backend.server.hget(backend.bucket_key(bucket), field)) * 1000
    return int(backend.server.hget(backend.shard_of(fingerprint), fingerprint))


def fingerprints(n: int, salt: str = "") -> list[str]:
    """n distinct 40-hex fingerprints (as scrapy-redis makes them)."""
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """Every core kept busy by a process that spins, for the time of the block."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
