"""A compact (or hash) filter with nothing to size (DEDUP_COMPACT_CAPACITY = 0) filled
from empty to N fingerprints, as a crawl fills it: what a fingerprint costs at each power
of ten on the way, and what its splits cost.

    python -m bench.growing [--fingerprints 10000000] [--server BINARY] [--batch 1000]
                            [--one-by-one 100000] [--backend compact|hash] [--groups G]

The filter is built from settings on a server of its own and filled in batches of
--batch (the batch path: the middleware's, a migration's), then --one-by-one more
fingerprints one call each (the per-request path). Fingerprints are made as they are
sent, so N is bounded by the server's memory, not this process's. At each power of
ten: every key the filter owns by MEMORY USAGE (``dedup-info``'s figure), and
``used_memory`` growth since the empty server less the clients' buffers (the scripts,
12 KB once a server, included; at small sizes the first big calls' transient memory
shows too), each divided by the count. Then each path's calls, timed by the client
(median, 99th percentile, slowest), the server's SLOWLOG of calls over 1 ms during the
fill (harvested as it goes: what it keeps is memory too), and each group's level at the
end; a bucket that left the compact encoding is counted at each power of ten (none is
the goal). ``--groups``: DEDUP_HASH_SHARDS, the groups of buckets (unset by default: a
new growing filter on one server gets 4; every group keeps its keys however little it
holds, and on a Cluster is a slot of the filter's spread).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import time
from collections.abc import Iterator

import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.backends.compact_growing import GrowingCompactBackend
from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary

#: SLOWLOG's threshold during the fill, in microseconds.
SLOW_US = 1000


def fingerprints(start: int, stop: int) -> Iterator[str]:
    for i in range(start, stop):
        yield hashlib.sha1(b"grow%d" % i).hexdigest()


def percentiles(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"median {statistics.median(ordered) * 1e3:.3f} ms, 99th percentile "
        f"{p99 * 1e3:.3f} ms, slowest {ordered[-1] * 1e3:.3f} ms over {len(ordered):,} calls"
    )


def harvest(client: redis.Redis, slow: list[int]) -> None:
    """The calls SLOWLOG kept since the last harvest (their durations, us), and it
    emptied: what it keeps is memory too."""
    slow += [int(entry["duration"]) for entry in client.slowlog_get(1024)]
    client.slowlog_reset()


def memory(client: redis.Redis) -> int:
    """``used_memory`` less the clients' buffers (a call of a thousand fingerprints
    leaves its query buffer for a while: not the filter's)."""
    info = client.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


def checkpoint(client: redis.Redis, backend: GrowingCompactBackend, n: int, base: int) -> None:
    used = memory(client) - base
    info = backend.info()
    print(
        f"  {n:>12,} fingerprints: {info.memory_bytes / n:5.1f} B each by MEMORY USAGE of every "
        f"key it owns ({info.key_count:,}), {used / n:6.1f} B by used_memory; "
        f"{info['buckets']:,} buckets, {info['hashtables']} hashtable(s)",
        flush=True,
    )


def run(
    binary: str,
    n: int,
    batch: int,
    one_by_one: int,
    name: str = "compact",
    groups: int | None = None,
) -> None:
    with EmbeddedRedis(binary=binary) as server:
        client = redis.Redis(port=server.port)
        info = client.info("server")
        version = info.get("valkey_version") and f"Valkey {info['valkey_version']}"
        print(f"{version or 'Redis ' + info['redis_version']} ({binary})")
        client.config_set("slowlog-log-slower-than", SLOW_US)
        client.config_set("slowlog-max-len", 1024)
        client.slowlog_reset()
        slow: list[int] = []
        base = memory(client)
        settings = Settings(
            {"DEDUP_BACKEND": name, "DEDUP_COMPACT_CAPACITY": 0, "DEDUP_HASH_SHARDS": groups}
        )
        backend = build_backend(settings, "bench", server=client, key="bench")
        assert isinstance(backend, GrowingCompactBackend)
        backend.open()
        print(f"  {name}: load {backend.load} fields a bucket, {backend.shards} groups")
        marks = [10**k for k in range(3, 12) if 10**k <= n + one_by_one]
        batched: list[float] = []
        single: list[float] = []
        done = 0
        while done < n + one_by_one:
            per_request = done >= n
            size = 1 if per_request else min(batch, n - done)
            size = min(size, next(m for m in [*marks, n + one_by_one] if m > done) - done)
            fps = list(fingerprints(done, done + size))
            started = time.perf_counter()
            seen = backend.check_and_add(fps[0]) if per_request else backend.check_and_add_many(fps)
            (single if per_request else batched).append(time.perf_counter() - started)
            if seen is True or (isinstance(seen, list) and any(seen)):
                raise AssertionError("a new fingerprint was answered seen")
            done += size
            if done in marks or len(batched) % 200 == 0:
                harvest(client, slow)
            if done in marks:
                checkpoint(client, backend, done, base)
        print(f"  batches of {batch}: {percentiles(batched)}")
        if single:
            print(f"  one by one: {percentiles(single)}")
        harvest(client, slow)
        print(
            f"  SLOWLOG: {len(slow)} call(s) over {SLOW_US / 1000:.0f} ms"
            + (f", the slowest {max(slow) / 1000:.2f} ms" if slow else "")
        )
        levels = sorted({(g.level, g.split) for g in backend.levels()})
        print(f"  levels and split pointers of the groups: {levels}")
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fingerprints", type=int, default=10_000_000, metavar="N")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--one-by-one", type=int, default=100_000, metavar="N")
    parser.add_argument("--server", help="the server binary (default: redis-server on PATH)")
    parser.add_argument("--backend", choices=["compact", "hash"], default="compact")
    parser.add_argument("--groups", type=int, help="DEDUP_HASH_SHARDS (default: unset)")
    args = parser.parse_args()
    if args.groups is not None and args.groups < 1:
        parser.error("--groups must be at least 1")
    binary = args.server or shutil.which("redis-server") or server_binary()
    run(binary, args.fingerprints, args.batch, args.one_by_one, args.backend, args.groups)


if __name__ == "__main__":
    main()
