"""A sized compact filter converted into the growing layout (``scrapy convert-to-growing``):
what its fingerprints cost before and after, and how fast the copy goes.

    python -m bench.convert_growing [--fingerprints 300 100000 1000000]
                                    [--capacity 10000000] [--server BINARY] [--record]

For each count N, on a server of its own: a compact filter sized for --capacity (the
default's) is filled with N fingerprints, measured (every key it owns by MEMORY USAGE,
``dedup-info``'s figure), converted with --delete-source, measured again; then the
copy's fingerprints a second, and whether every fingerprint is seen afterwards and
none of N new ones. ``--record`` keeps the bytes a fingerprint before and after in
bench/figures.json (``converted N, sized`` and ``converted N, growing``), which the
pages quote.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import time

import redis

from scrapy_dedup_suite.backends.compact import CompactBackend
from scrapy_dedup_suite.backends.compact_growing import GrowingCompactBackend
from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary
from scrapy_dedup_suite.operations.migrations.growing_layout import GrowingConversion
from scrapy_dedup_suite.settings.options import CompactOptions

from .figures import record_figure

KEY = "bench:dedup-compact"


def fingerprints(n: int, salt: str) -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def one(url: str, n: int, capacity: int, shards: int) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.flushall()
    sized = CompactBackend(client, KEY, capacity=capacity, shards=shards)
    sized.open()
    old = fingerprints(n, "old")
    sized.add_many(old)
    before = sized.info().memory_bytes
    started = time.perf_counter()
    report = GrowingConversion(client, KEY, CompactOptions(capacity, shards)).run(
        delete_source=True
    )
    took = time.perf_counter() - started
    growing = GrowingCompactBackend(client, KEY, shards=shards)
    growing.open()
    after = growing.info().memory_bytes
    seen = sum(growing.contains_many(old))
    new = fingerprints(min(n, 10_000), "new")
    fresh = sum(not s for s in growing.check_and_add_many(new))
    if seen != n or fresh != len(new) or report.copied != n or report.kept:
        raise AssertionError(f"{n}: {seen} seen, {fresh} new of {len(new)}, {report}")
    return {"before": before / n, "after": after / n, "rate": n / took}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fingerprints", type=int, nargs="+", default=[300, 100_000, 1_000_000])
    parser.add_argument("--capacity", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--server", default=None)
    parser.add_argument("--record", action="store_true", help="keep the figures (see above)")
    opts = parser.parse_args(argv)
    binary = opts.server or shutil.which("redis-server") or server_binary()
    with EmbeddedRedis(binary=binary) as server:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        print(f"server {binary} ({version}); sized for {opts.capacity:,}, {opts.shards} groups")
        print(f"{'fingerprints':>12}  {'sized B/fp':>10}  {'growing B/fp':>12}  {'copied/s':>9}")
        for n in opts.fingerprints:
            r = one(server.url, n, opts.capacity, opts.shards)
            print(f"{n:>12,}  {r['before']:>10.1f}  {r['after']:>12.1f}  {r['rate']:>9,.0f}")
            if opts.record:
                measured = (
                    f"python -m bench.convert_growing --fingerprints {n} --capacity "
                    f"{opts.capacity} --shards {opts.shards} (redis-server {version}; MEMORY "
                    "USAGE of the filter's keys before and after, with --delete-source)"
                )
                for label, value in (("sized", r["before"]), ("growing", r["after"])):
                    record_figure(f"converted {n}, {label}", f"{value:.1f} B", measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
