"""The benchmark suite: every backend beside what users run today, in one process run.

    python -m bench            # the full run (n = 1,000,000), what docs/benchmarks.md quotes
    python -m bench --quick    # under a minute
    python -m bench --smoke    # seconds; the test suite runs it so it cannot rot

It starts its own server on 127.0.0.1 (redis-server from PATH, else the
embedded valkey-server), runs every row on the same generated requests, prints
one table and writes ``results.json`` and ``results.png`` to ``--out``.
Throughput is measured with one client, as a crawler process does; figures are
ratios measured in the same run, since the machine may be shared and noisy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import redis
from scrapy import Request

from scrapy_dedup_suite.backends import BloomBackend, HashBackend, build_backend
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.core.fingerprint import scrapy_redis_fingerprint
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary
from scrapy_dedup_suite.janitor import Janitor
from scrapy_dedup_suite.operations.migrations import SetMigration

SIZES = {
    # n: fingerprints for memory and false-positive rate; speed: requests per
    # throughput phase; legacy: the same for scrapy-redis-bloomfilter (9 round
    # trips a request); migrate / janitor: sizes of those runs.
    "full": {
        "n": 1_000_000,
        "speed": 50_000,
        "legacy": 5_000,
        "migrate": 1_000_000,
        "janitor": 1_000_000,
        "rounds": 3,
        "crowd": 5_000,
        "scaling": 100_000,
    },
    "quick": {
        "n": 50_000,
        "speed": 2_000,
        "legacy": 500,
        "migrate": 200_000,
        "janitor": 100_000,
        "rounds": 3,
        "crowd": 1_000,
        "scaling": 20_000,
    },
    "smoke": {
        "n": 2_000,
        "speed": 200,
        "legacy": 100,
        "migrate": 5_000,
        "janitor": 2_000,
        "rounds": 1,
        "crowd": 200,
        "scaling": 2_000,
    },
}
ERROR_RATE = 0.001


class CountingConnection(redis.Connection):
    """Counts what the client sends: one per command or pipeline (a round trip)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool)


def requests(n: int, salt: str) -> list[Request]:
    return [Request(f"http://bench.test/{salt}/item?id={i}&page={i % 97}") for i in range(n)]


def fingerprints(n: int, salt: str) -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


@dataclass
class Row:
    name: str
    new_per_s: float = 0.0
    dup_per_s: float = 0.0
    round_trips: float = 0.0
    bytes_per_fp: float | None = None
    theory_bytes_per_fp: float | None = None
    fp_rate: float | None = None
    designed_fp_rate: float | None = None
    vs_set: float = 0.0
    vs_ceiling: float = 0.0
    notes: str = ""


@dataclass
class Results:
    machine: str
    server: str
    sizes: dict[str, int]
    rows: list[Row] = field(default_factory=list)
    ceilings: dict[str, float] = field(default_factory=dict)
    migration: dict[str, float] = field(default_factory=dict)
    janitor: dict[str, dict[str, float]] = field(default_factory=dict)  # by layout
    concurrency: dict[str, dict[str, int]] = field(default_factory=dict)
    cluster: dict[str, dict[str, float]] = field(default_factory=dict)
    scaling: list[dict[str, float]] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)


def rate(fn: Callable[[Any], Any], items: list[Any]) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return len(items) / (time.perf_counter() - start)


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


# -- the rows ------------------------------------------------------------------------------
# Each row has a kind; throughput() builds it with a key of its own so that all rows
# live in one Redis and are measured in interleaved rounds; footprint() rebuilds it
# alone in a flushed Redis, fills it to n fingerprints and measures memory and accuracy.

OURS = ("set", "hash", "hash-shards", "compact", "bloom", "windowed-bloom")
#: Row names beyond a backend's: the hash layout every filter had before the buckets.
NOTES = {"windowed-bloom": " (7 buckets)", "hash-shards": " (layout 1)"}


def kinds(n: int) -> list[tuple[str, dict[str, Any]]]:
    ours = BloomParams.from_capacity(n, ERROR_RATE)
    bit = math.ceil(math.log2(ours.total_bits))
    return [
        ("scrapy-redis: set", {"kind": "scrapy-redis"}),
        ("scrapy-redis-bloomfilter: defaults: BIT=30, k=6", {"kind": "legacy", "bit": 30, "k": 6}),
        (f"scrapy-redis-bloomfilter: sized like ours: BIT={bit}, k={ours.hashes}",
         {"kind": "legacy", "bit": bit, "k": ours.hashes}),
        *((f"ours: {b}" + NOTES.get(b, ""), {"kind": b}) for b in OURS),
    ]  # fmt: skip


def our_backend(kind: str, server: redis.Redis, key: str, n: int) -> Any:
    from scrapy.settings import Settings

    if kind == "hash-shards":  # what every hash filter created before the buckets keeps
        return HashBackend(server, key, shards=16)

    settings = Settings(
        {
            "DEDUP_BACKEND": kind,
            "DEDUP_BLOOM_CAPACITY": n,
            "DEDUP_COMPACT_CAPACITY": max(1_000, n),
            "DEDUP_BLOOM_ERROR_RATE": ERROR_RATE,
            "DEDUP_WINDOW": "day",
            "DEDUP_WINDOW_COUNT": 7,
        }
    )
    return build_backend(settings, "bench", server=server, key=key)


def dupefilter(spec: dict[str, Any], url: str, key: str, n: int) -> Callable[[Request], bool]:
    """The public class users run, its request_seen()."""
    if spec["kind"] == "scrapy-redis":
        from scrapy_redis.dupefilter import RFPDupeFilter as ScrapyRedisDupeFilter

        return ScrapyRedisDupeFilter(client(url), key).request_seen
    if spec["kind"] == "legacy":
        from scrapy_redis_bloomfilter.dupefilter import RFPDupeFilter as LegacyDupeFilter

        return LegacyDupeFilter(client(url), key, False, spec["bit"], spec["k"]).request_seen
    df = RFPDupeFilter(our_backend(spec["kind"], client(url), key, n))
    df.open()
    return df.request_seen


def throughput(url: str, r: redis.Redis, res: Results, sizes: dict[str, int]) -> None:
    """request_seen() end to end, all new then all duplicates; best of interleaved rounds."""
    r.flushall()
    subjects = []
    for i, (name, spec) in enumerate(kinds(sizes["n"])):
        if spec["kind"] == "legacy" and not legacy_available():
            res.rows.append(Row(name, notes="not installed (bench extra)"))
            continue
        seen = dupefilter(spec, url, f"tp{i}:dedup", sizes["n"])
        seen(Request("http://bench.test/warm-up"))  # connect (and handshake) before counting
        count = sizes["legacy"] if spec["kind"] == "legacy" else sizes["speed"]
        row = Row(name)
        res.rows.append(row)
        subjects.append((row, seen, count))
    ping = client(url)
    cpu = requests(sizes["speed"], "cpu")
    c = res.ceilings
    for round_ in range(sizes["rounds"]):
        # The two floors, in the same rounds: one PING per call, fingerprinting alone.
        c["ping_per_s"] = max(c.get("ping_per_s", 0), rate(lambda _: ping.ping(), cpu))
        c["fingerprint_per_s"] = max(
            c.get("fingerprint_per_s", 0), rate(scrapy_redis_fingerprint, cpu)
        )
        for row, seen, count in subjects:
            reqs = requests(count, f"round{round_}")
            before = CountingConnection.sent
            row.new_per_s = max(row.new_per_s, rate(seen, reqs))
            row.dup_per_s = max(row.dup_per_s, rate(seen, reqs))
            row.round_trips = (CountingConnection.sent - before) / (2 * len(reqs))
    c["ceiling_per_s"] = 1 / (1 / c["ping_per_s"] + 1 / c["fingerprint_per_s"])


def legacy_available() -> bool:
    try:
        import scrapy_redis_bloomfilter  # noqa: F401
    except ImportError:
        return False
    return True


def footprint(url: str, r: redis.Redis, res: Results, sizes: dict[str, int]) -> None:
    """Each filter alone in Redis, filled to n: bytes per fingerprint, false-positive rate."""
    n = sizes["n"]
    theory = -math.log(ERROR_RATE) / math.log(2) ** 2 / 8
    rows = {row.name: row for row in res.rows}
    for name, spec in kinds(n):
        row = rows[name]
        if row.notes:
            continue
        r.flushall()
        base = used_memory(r)
        never = fingerprints(n, "never")
        if spec["kind"] == "scrapy-redis":
            fill = fingerprints(n, "fill")
            pipe = r.pipeline(transaction=False)
            for i in range(0, n, 10_000):
                pipe.sadd("fp:dupefilter", *fill[i : i + 10_000])
            pipe.execute()
            row.bytes_per_fp = (used_memory(r) - base) / n
            row.fp_rate = sum(bool(x) for x in r.smismember("fp:dupefilter", never[:10_000])) / 1e4
        elif spec["kind"] == "legacy":
            legacy_footprint(r, row, spec, n, base, never)
        else:
            backend = our_backend(spec["kind"], r, "fp:dedup", n)
            backend.open()
            backend.add_many(fingerprints(n, "fill"))
            row.bytes_per_fp = (used_memory(r) - base) / n
            row.fp_rate = sum(backend.contains_many(never)) / n
            if spec["kind"] in ("bloom", "windowed-bloom"):
                row.theory_bytes_per_fp = theory
                row.designed_fp_rate = backend.params.designed_rate()


def legacy_footprint(
    r: redis.Redis, row: Row, spec: dict[str, Any], n: int, base: int, never: list[str]
) -> None:
    """Filling a million through its 9-round-trip path (and its per-character
    Python hash) would take an hour: the same offsets, vectorised and checked
    against its own HashMap objects, set in one local bitmap and written at once."""
    from scrapy_redis_bloomfilter.bloomfilter import BloomFilter

    bf = BloomFilter(r, "fp:bloomfilter", spec["bit"], spec["k"])
    fill = fingerprints(n, "fill")
    check = fill[:50]
    assert [legacy_offsets(check, bf.m, s).tolist() for s in bf.seeds] == [
        [f.hash(fp) for fp in check] for f in bf.maps
    ]
    bitmap = np.zeros(bf.m // 8, np.uint8)
    for seed in bf.seeds:
        offsets = legacy_offsets(fill, bf.m, seed)
        np.bitwise_or.at(bitmap, offsets >> 3, (0x80 >> (offsets & 7)).astype(np.uint8))
    for offset in range(0, bitmap.size, 4 << 20):
        r.setrange(bf.key, offset, bitmap[offset : offset + (4 << 20)].tobytes())
    row.bytes_per_fp = (used_memory(r) - base) / n
    hit = np.ones(len(never), bool)
    for seed in bf.seeds:
        offsets = legacy_offsets(never, bf.m, seed)
        hit &= (bitmap[offsets >> 3] & (0x80 >> (offsets & 7))) != 0
    row.fp_rate = float(hit.mean())
    row.designed_fp_rate = BloomParams(n, ERROR_RATE, bf.m, spec["k"], 1).designed_rate(n)
    row.theory_bytes_per_fp = -math.log(ERROR_RATE) / math.log(2) ** 2 / 8


def legacy_offsets(fps: list[str], m: int, seed: int) -> Any:
    """scrapy-redis-bloomfilter's HashMap.hash for many values: ret = ret * (seed + 1)
    + ord(c) over the characters, masked to m - 1. Wrapping modulo 2^64 keeps the
    low bits exact, and m is a power of two."""
    chars = np.frombuffer("".join(fps).encode("ascii"), np.uint8).reshape(len(fps), -1)
    ret = np.zeros(len(fps), np.uint64)
    mult = np.uint64(seed + 1)
    with np.errstate(over="ignore"):
        for col in range(chars.shape[1]):
            ret = ret * mult + chars[:, col].astype(np.uint64)
    return (ret & np.uint64(m - 1)).astype(np.int64)


def migration(url: str, r: redis.Redis, res: Results, sizes: dict[str, int]) -> None:
    n = sizes["migrate"]
    r.flushall()
    fill = fingerprints(n, "set")
    pipe = r.pipeline(transaction=False)
    for i in range(0, n, 10_000):
        pipe.sadd("m:dupefilter", *fill[i : i + 10_000])
    pipe.execute()
    start, cursor, read = time.perf_counter(), 0, 0
    while True:
        cursor, members = r.sscan("m:dupefilter", cursor, count=10_000)
        read += len(members)
        if int(cursor) == 0:
            break
    sscan = read / (time.perf_counter() - start)
    target = BloomBackend(r, "m:bloomfilter", BloomParams.from_capacity(n, ERROR_RATE))
    report = SetMigration(target, "m:dupefilter").run()
    # Into a new scalable filter configured for a tenth of the set: the migration sizes
    # its first layer from the set and takes the bulk path, counting per block.
    from scrapy_dedup_suite.core.bloom_math import Scaling

    growth = Scaling()
    first = growth.first_layer(max(1, n // 10), ERROR_RATE)
    scalable = SetMigration(BloomBackend(r, "m:scalable", first, growth), "m:dupefilter").run()
    res.migration = {
        "members": n,
        "fingerprints_per_s": report.rate,
        "sscan_members_per_s": sscan,
        "ratio_to_sscan": report.rate / sscan,
        "scalable_fingerprints_per_s": scalable.rate,
    }


def janitor(url: str, r: redis.Redis, res: Results, sizes: dict[str, int]) -> None:
    """A janitor pass over n fields, half of them expired, in each layout of the hash
    backend (the janitor's way of expiring)."""
    n = sizes["janitor"]
    layouts = {
        "shards": lambda: HashBackend(r, "j:dedup-hash", shards=16, field_expiry=False),
        "buckets": lambda: HashBucketsBackend(
            r, "j:dedup-hash", shards=16, capacity=n, field_expiry=False
        ),
    }
    for layout, make in layouts.items():
        r.flushall()
        backend = make()
        backend.open()
        backend.add_many(fingerprints(n // 2, "old"), expire=0.001)
        backend.add_many(fingerprints(n - n // 2, "live"), expire=3600)
        time.sleep(1.01 if layout == "buckets" else 0.01)  # (whole seconds in buckets)
        r.config_set("slowlog-log-slower-than", 1000)
        r.slowlog_reset()
        report = Janitor(backend).run_pass()
        slow = [
            e for e in r.slowlog_get(128) if e["command"].split(b" ")[0] in (b"HSCAN", b"EVALSHA")
        ]
        res.janitor[layout] = {
            "fields": n,
            "removed": report.removed,
            "removed_per_s": report.removed / report.seconds,
            "scanned_per_s": report.scanned / report.seconds,
            "slowest_call_ms_client": report.slowest_call_ms,
            "slowest_call_ms_server": max((e["duration"] / 1000 for e in slow), default=0.0),
            "calls": report.calls,
        }


# -- report --------------------------------------------------------------------------------


def concurrency(url: str, r: redis.Redis, res: Results, sizes: dict[str, int]) -> None:
    """Several crawler processes offer the same requests at once: how many get through?"""
    import subprocess

    n, processes = sizes["crowd"], 4
    root = Path(__file__).resolve().parent.parent
    for kind in ("legacy", "ours"):
        if kind == "legacy" and not legacy_available():
            continue
        r.flushall()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.crowd", url, kind, "crowd:filter", str(seed), str(n)],
                cwd=root,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for seed in range(processes)
        ]
        for p in procs:
            p.stdout.readline()  # "ready"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        admitted = sum(int(p.communicate(timeout=600)[0]) for p in procs)
        res.concurrency[kind] = {"processes": processes, "distinct": n, "admitted": admitted}


def scaling(url: str, r: redis.Redis, res: Results, sizes: dict[str, int]) -> None:
    """A scalable filter and a fixed one of the same initial size, filled to 1x, 2x, 4x
    and 8x that size: measured false-positive rate, memory, request_seen() speed."""
    from scrapy_dedup_suite.backends import BloomBackend
    from scrapy_dedup_suite.core.bloom_math import Scaling

    n0 = sizes["scaling"]
    growth = Scaling(expansion=2)
    r.flushall()
    scalable = BloomBackend(client(url), "sc:grow", growth.first_layer(n0, ERROR_RATE), growth)
    scalable.open()
    fixed = BloomBackend(client(url), "sc:fixed", BloomParams.from_capacity(n0, ERROR_RATE))
    fixed.open()
    never = fingerprints(max(100_000, n0), "sc-never")
    filled = 0
    for times in (1, 2, 4, 8):
        batch = fingerprints(n0 * times - filled, f"sc-fill{times}")
        scalable.add_many(batch)
        fixed.add_many(batch)
        filled += len(batch)
        # Speed of the worst case, a fingerprint no layer holds (every layer is
        # looked at), by the one-call membership test, which records nothing.
        absent = never[: sizes["speed"]]
        speed = {"scalable": 0.0, "fixed": 0.0}
        for _ in range(sizes["rounds"]):
            for name, backend in (("scalable", scalable), ("fixed", fixed)):
                speed[name] = max(speed[name], rate(backend.contains, absent))
        info = scalable.info()
        res.scaling.append(
            {
                "times": times,
                "items": filled,
                "layers": len(info["layers"]),
                "fp_rate_scalable": sum(scalable.contains_many(never)) / len(never),
                "fp_rate_fixed": sum(fixed.contains_many(never)) / len(never),
                "designed": ERROR_RATE,
                "bytes_per_fp_scalable": info["memory_bytes"] / filled,
                "bytes_per_fp_fixed": fixed.info()["memory_bytes"] / filled,
                "lookups_per_s_scalable": speed["scalable"],
                "lookups_per_s_fixed": speed["fixed"],
            }
        )


def on_cluster(binary: str, url: str, res: Results, sizes: dict[str, int]) -> None:
    """Our backends on a 3-master Redis Cluster (same binary, same host) against the single
    server, request_seen() in interleaved rounds: what the cluster client costs."""
    from redis.cluster import RedisCluster

    from scrapy_dedup_suite.embedded import EmbeddedCluster

    with EmbeddedCluster(3, binary=binary) as cluster:
        subjects = []
        for kind in ("hash", "compact", "bloom", "windowed-bloom"):
            pair = []
            for where, server in (
                ("single", redis.Redis.from_url(url)),
                ("cluster", RedisCluster.from_url(cluster.url)),
            ):
                server.flushall()
                backend = our_backend(kind, server, f"cl:{kind}", sizes["n"])
                df = RFPDupeFilter(backend)
                df.open()
                df.request_seen(Request("http://bench.test/warm-up"))
                pair.append((where, df.request_seen))
            subjects.append((kind, pair))
        for round_ in range(sizes["rounds"]):
            reqs = requests(sizes["speed"], f"cluster{round_}")
            for kind, pair in subjects:
                for where, seen in pair:
                    entry = res.cluster.setdefault(kind, {})
                    entry[f"{where}_new_per_s"] = max(
                        entry.get(f"{where}_new_per_s", 0), rate(seen, reqs)
                    )
                    entry[f"{where}_dup_per_s"] = max(
                        entry.get(f"{where}_dup_per_s", 0), rate(seen, reqs)
                    )
        for entry in res.cluster.values():
            entry["ratio"] = min(entry["cluster_new_per_s"], entry["cluster_dup_per_s"]) / min(
                entry["single_new_per_s"], entry["single_dup_per_s"]
            )


def evaluate(res: Results) -> None:
    rows = {row.name.split(" (")[0]: row for row in res.rows}
    base = rows["scrapy-redis: set"]
    ceiling = res.ceilings["ceiling_per_s"]
    for row in res.rows:
        row.vs_set = min(row.new_per_s, row.dup_per_s) / min(base.new_per_s, base.dup_per_s)
        row.vs_ceiling = min(row.new_per_s, row.dup_per_s) / ceiling
    bloom, windowed, hash_ = rows["ours: bloom"], rows["ours: windowed-bloom"], rows["ours: hash"]

    def target(what: str, value: float, goal: float, higher: bool = True) -> None:
        met = value >= goal if higher else value <= goal
        res.targets.append(
            {"target": what, "value": round(value, 3), "goal": goal, "higher": higher, "met": met}
        )

    target("bloom throughput / scrapy-redis set", bloom.vs_set, 0.9)
    target("bloom throughput / ceiling", bloom.vs_ceiling, 0.75)
    target("windowed-bloom (7 buckets) throughput / scrapy-redis set", windowed.vs_set, 0.85)
    target("bloom round trips per request", round(bloom.round_trips, 2), 1.0, higher=False)
    target("windowed-bloom round trips per request", round(windowed.round_trips, 2), 1.0, False)
    target("hash throughput / scrapy-redis set", hash_.vs_set, 0.85)
    compact = rows["ours: compact"]
    target("compact throughput / scrapy-redis set", compact.vs_set, 1.0)
    assert compact.bytes_per_fp
    target("compact memory per fingerprint (B)", compact.bytes_per_fp, 16, False)
    assert hash_.bytes_per_fp
    target("hash memory per fingerprint (B)", hash_.bytes_per_fp, 20, False)
    assert bloom.bytes_per_fp and bloom.theory_bytes_per_fp and bloom.designed_fp_rate
    target("bloom memory / theory", bloom.bytes_per_fp / bloom.theory_bytes_per_fp, 1.15, False)
    target(
        "bloom measured / designed fp rate",
        (bloom.fp_rate or 0) / bloom.designed_fp_rate,
        1.15,
        False,
    )
    target("migration fingerprints/s", res.migration["fingerprints_per_s"], 500_000)
    target("migration / SSCAN read rate", res.migration["ratio_to_sscan"], 0.5)
    for layout, figures in res.janitor.items():
        slowest = figures["slowest_call_ms_server"]
        target(f"janitor slowest call (ms, server), {layout}", slowest, 10, False)
    legacy = [
        row for row in res.rows if row.name.startswith("scrapy-redis-bloomfilter") and row.new_per_s
    ]
    for x in res.scaling:
        target(f"scalable bloom fp rate / designed at {x['times']}x the initial capacity",
               x["fp_rate_scalable"] / x["designed"], 1.15, False)  # fmt: skip
    if legacy:
        target("bloom throughput / scrapy-redis-bloomfilter", min(bloom.new_per_s, bloom.dup_per_s)
               / max(min(x.new_per_s, x.dup_per_s) for x in legacy), 10)  # fmt: skip


def table(res: Results) -> str:
    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    head = ["row", "new/s", "dup/s", "RT/req", "B/fp", "theory B/fp", "fp rate", "designed",
            "x set", "x ceiling"]  # fmt: skip
    lines = [
        [row.name, num(row.new_per_s, ",.0f"), num(row.dup_per_s, ",.0f"),
         num(row.round_trips, ".2f"), num(row.bytes_per_fp, ",.2f"),
         num(row.theory_bytes_per_fp, ".2f"), num(row.fp_rate, ".2e"),
         num(row.designed_fp_rate, ".2e"), num(row.vs_set, ".2f"), num(row.vs_ceiling, ".2f")]
        for row in res.rows
    ]  # fmt: skip
    c = res.ceilings
    for name, value, trips, ratio in [
        ("ceiling: PING per call", c["ping_per_s"], "1.00", ""),
        ("ceiling: fingerprint only", c["fingerprint_per_s"], "0", ""),
        ("ceiling: 1/(1/ping+1/fp)", c["ceiling_per_s"], "", "1.00"),
    ]:
        line = [""] * len(head)
        line[0], line[1], line[3], line[-1] = name, f"{value:,.0f}", trips, ratio
        lines.append(line)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    m, j = res.migration, res.janitor
    out.append("")
    out.append(
        f"migrate-set-to-bloom: {m['members']:,} members at {m['fingerprints_per_s']:,.0f} "
        f"fingerprints/s; SSCAN alone reads {m['sscan_members_per_s']:,.0f}/s "
        f"(ratio {m['ratio_to_sscan']:.2f}); into a new scalable filter "
        f"{m['scalable_fingerprints_per_s']:,.0f}/s"
    )
    for layout, f in j.items():
        out.append(
            f"janitor ({layout}): {f['removed']:,} of {f['fields']:,} fields purged at "
            f"{f['removed_per_s']:,.0f}/s ({f['scanned_per_s']:,.0f} scanned/s, {f['calls']:,} "
            f"calls); slowest call {f['slowest_call_ms_client']:.2f} ms at the client, "
            f"{f['slowest_call_ms_server']:.2f} ms in Redis (SLOWLOG, calls over 1 ms)"
        )
    for kind, label in (("legacy", "scrapy-redis-bloomfilter"), ("ours", "ours: bloom")):
        if kind in res.concurrency:
            c = res.concurrency[kind]
            out.append(
                f"{c['processes']} crawlers offering the same {c['distinct']:,} requests at once, "
                f"{label}: {c['admitted']:,} admitted "
                f"({c['admitted'] - c['distinct']:+,} vs distinct)"
            )
    for x in res.scaling:
        out.append(
            f"scalable vs fixed bloom (initial capacity {res.sizes['scaling']:,}, p = "
            f"{x['designed']}) at {x['times']}x: fp rate {x['fp_rate_scalable']:.2e} vs "
            f"{x['fp_rate_fixed']:.2e}, {x['layers']} layer(s), {x['bytes_per_fp_scalable']:.2f} "
            f"vs {x['bytes_per_fp_fixed']:.2f} B/fp, absent lookups "
            f"{x['lookups_per_s_scalable']:,.0f} vs {x['lookups_per_s_fixed']:,.0f}/s"
        )
    for kind, e in res.cluster.items():
        out.append(
            f"ours: {kind} on a 3-master cluster: {e['cluster_new_per_s']:,.0f} new/s, "
            f"{e['cluster_dup_per_s']:,.0f} dup/s; single server in the same rounds "
            f"{e['single_new_per_s']:,.0f}/{e['single_dup_per_s']:,.0f} (ratio {e['ratio']:.2f})"
        )
    out.append("")
    for t in res.targets:
        mark = "met   " if t["met"] else "MISSED"
        sign = ">=" if t["higher"] else "<="
        out.append(f"{mark} {t['target']}: {t['value']:,} (goal {sign} {t['goal']:,})")
    return "\n".join(out)


def chart(res: Results, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [row for row in res.rows if row.new_per_s]
    names = [row.name.replace(": ", ":\n", 1) for row in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(15, 6))
    x = range(len(rows))
    a.bar([i - 0.2 for i in x], [row.new_per_s for row in rows], 0.4, label="new requests")
    a.bar([i + 0.2 for i in x], [row.dup_per_s for row in rows], 0.4, label="duplicates")
    a.axhline(res.ceilings["ceiling_per_s"], color="grey", linestyle="--", label="ceiling")
    a.set_ylabel("request_seen() per second, one client")
    a.set_xticks(list(x), names, rotation=60, ha="right", fontsize=7)
    a.legend()
    mem = [row for row in rows if row.bytes_per_fp]
    b.bar(range(len(mem)), [row.bytes_per_fp for row in mem], color="tab:green")
    b.set_yscale("log")
    b.set_ylabel("Redis bytes per fingerprint (log scale)")
    b.set_xticks(range(len(mem)), [row.name.replace(": ", ":\n", 1) for row in mem],
                 rotation=60, ha="right", fontsize=7)  # fmt: skip
    fig.suptitle(f"scrapy_dedup_suite benchmark, n = {res.sizes['n']:,} ({res.server})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a run of under a minute")
    size.add_argument("--smoke", action="store_true", help="a few seconds, to check it runs")
    parser.add_argument("--out", default="bench/results", help="where results.json/.png go")
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    opts = parser.parse_args(argv)
    sizes = SIZES["smoke" if opts.smoke else "quick" if opts.quick else "full"]
    binary = opts.server or shutil.which("redis-server") or server_binary()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    with EmbeddedRedis(binary=binary) as server:
        r = redis.Redis.from_url(server.url)
        info = r.info("server")
        name = (
            f"valkey {info['valkey_version']}"
            if "valkey_version" in info
            else f"redis {info['redis_version']}"
        )
        res = Results(
            machine=f"{platform.machine()} {platform.system()}, Python {platform.python_version()}",
            server=f"{name} ({r.info('memory').get('mem_allocator', '?')})",
            sizes=sizes,
        )
        print(f"benchmark: {res.server}, sizes {sizes}", file=sys.stderr, flush=True)
        for step in (throughput, footprint, migration, janitor, concurrency, scaling):
            print(f"  {step.__name__} ...", file=sys.stderr, flush=True)
            step(server.url, r, res, sizes)
        print("  on_cluster ...", file=sys.stderr, flush=True)
        on_cluster(binary, server.url, res, sizes)
    evaluate(res)
    text = table(res)
    print(text)
    (out / "results.json").write_text(json.dumps(asdict(res), indent=1))
    (out / "results.txt").write_text(text + "\n")
    if chart(res, out / "results.png"):
        print(f"\nwritten: {out / 'results.json'}, {out / 'results.png'}")
    return 0
