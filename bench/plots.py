"""The benchmark figures as pictures, which the documentation shows (docs/benchmarks.md):

    python -m bench.plots [--out docs/figures] [--quick | --smoke] [--server BINARY]

- ``memory.png``: Redis bytes per fingerprint against the number of fingerprints, log-log,
  for scrapy-redis's set and each backend that stores them (bench.memory's rows);
- ``crawl.png``: pages per second of a real crawl against the round-trip time to Redis
  (bench.crawl: Scrapy's in-memory dupefilter, scrapy-redis's, ours per request and
  batched);
- ``fp_rate.png``: the false-positive rate measured on fingerprints never added, against
  how full the filter is, for a fixed Bloom filter and a scalable one of the same first
  capacity and error rate.

Each image's footer says the machine, the server, the date and the command that made it.
``./dev bench`` runs this after the benchmark suite.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.embedded import server_binary

from . import crawl, memory
from .compact_layouts import settle
from .server_features import server as started

SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "memory": [10_000, 30_000, 100_000, 300_000, 1_000_000],
        "crawl": {"pages": 1000, "links": 20, "latencies": [0.0, 0.5, 1.0, 2.0]},
        "fp": {"capacity": 20_000, "probes": 20_000, "steps": 16},
    },
    "quick": {
        "memory": [3_000, 10_000, 30_000],
        "crawl": {"pages": 200, "links": 10, "latencies": [0.0, 1.0]},
        "fp": {"capacity": 5_000, "probes": 5_000, "steps": 8},
    },
    "smoke": {
        "memory": [1_000, 2_000],
        "crawl": {"pages": 20, "links": 3, "latencies": [0.0]},
        "fp": {"capacity": 1_000, "probes": 1_000, "steps": 4},
    },
}


def footer(fig: Any, server: str, command: str) -> None:
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    fig.text(0.01, 0.01, f"{machine}; {server}; {when}; {command}", fontsize=7, color="grey")


def save(fig: Any, ax: Any, path: Path, **note: str) -> None:
    """Grid, legend and footer, then the image at ``path``."""
    import matplotlib.pyplot as plt

    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    footer(fig, **note)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def server_name(client: redis.Redis) -> str:
    info = client.info("server")
    if "valkey_version" in info:
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info['redis_version']}"


def memory_series(client: redis.Redis, sizes: list[int]) -> dict[str, list[float]]:
    """Bytes per fingerprint of each of bench.memory's rows at each size."""
    out: dict[str, list[float]] = {}
    for n in sizes:
        for name, per in memory.measure(client, n):
            if per is not None:
                out.setdefault(name, []).append(per)
        print(f"  memory: {n:,} fingerprints", flush=True)
    return out


def fp_series(client: redis.Redis, capacity: int, probes: int, steps: int) -> dict[str, Any]:
    """The false-positive rate on ``probes`` fingerprints never added, after each of
    ``steps`` fills up to 4x ``capacity``, for a fixed filter and a scalable one."""
    absent = [hashlib.sha1(b"absent%d" % i).hexdigest() for i in range(probes)]
    fills = [4 * capacity * (i + 1) // steps for i in range(steps)]
    out: dict[str, Any] = {"fills": [f / capacity for f in fills]}
    for name, extra in (("fixed", {}), ("scalable (expansion 2)", {"DEDUP_BLOOM_EXPANSION": 2})):
        settle(client)
        settings = {
            "DEDUP_BACKEND": "bloom",
            "DEDUP_BLOOM_CAPACITY": capacity,
            "DEDUP_BLOOM_ERROR_RATE": 0.01,
            **extra,
        }
        backend = build_backend(Settings(settings), "p", server=client, key="p")
        backend.open()
        added, rates = 0, []
        for fill in fills:
            backend.add_many(hashlib.sha1(b"fp%d" % i).hexdigest() for i in range(added, fill))
            added = fill
            rates.append(sum(backend.contains_many(absent)) / probes)
        out[name] = rates
        print(f"  false positives: {name}", flush=True)
    return out


def draw_memory(series: dict[str, list[float]], sizes: list[int], path: Path, **note: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, values in series.items():
        ax.plot(sizes, values, marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fingerprints stored")
    ax.set_ylabel("Redis memory per fingerprint (bytes, used_memory growth / n)")
    ax.set_title("Memory per fingerprint")
    save(fig, ax, path, **note)


def draw_crawl(rows: list[crawl.Row], path: Path, **note: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    memory = [r[3] for r in rows if r[0] == "memory"]  # (crawled before each latency)
    ceiling = sum(memory) / len(memory)
    latencies = sorted({r[1] for r in rows if r[0] != "memory"})
    ax.axhline(ceiling, color="grey", linestyle="--", label="Scrapy's in-memory dupefilter")
    for name in dict.fromkeys(r[0] for r in rows if r[0] != "memory"):
        points = sorted((r[2], r[3]) for r in rows if r[0] == name)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.set_xlabel(f"Redis round trip (PING, ms; {', '.join(f'{x:g}' for x in latencies)} ms added)")
    ax.set_ylabel("pages crawled per second")
    ax.set_title("A real crawl against the round trip to Redis")
    ax.set_ylim(bottom=0)
    save(fig, ax, path, **note)


def draw_fp(series: dict[str, Any], capacity: int, path: Path, **note: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, rates in series.items():
        if name != "fills":
            ax.plot(series["fills"], rates, marker="o", label=name)
    ax.axhline(0.01, color="grey", linestyle="--", label="designed error rate (1%)")
    ax.axvline(1.0, color="grey", linestyle=":", label=f"capacity ({capacity:,})")
    ax.set_yscale("symlog", linthresh=1e-3)  # log above 0.1%, linear down to 0 (none seen)
    ax.set_ylim(bottom=0, top=1)
    ax.set_xlabel("fingerprints added / the first capacity")
    ax.set_ylabel("false-positive rate measured on fingerprints never added")
    ax.set_title("Bloom filters past their capacity: fixed and scalable")
    save(fig, ax, path, **note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, a minute or two")
    size.add_argument("--smoke", action="store_true", help="tiny sizes, to check it runs")
    parser.add_argument("--out", default="docs/figures", help="where the images go")
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    opts = parser.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        parser.error("matplotlib is needed (pip install -e '.[bench]')")
    kind = "smoke" if opts.smoke else "quick" if opts.quick else "full"
    sizes = SIZES[kind]
    command = "python -m bench.plots" + ("" if kind == "full" else f" --{kind}")
    binary = opts.server or shutil.which("redis-server") or server_binary()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    with started(binary) as client:
        name = server_name(client)
        series = memory_series(client, sizes["memory"])
        draw_memory(series, sizes["memory"], out / "memory.png", server=name, command=command)
        fp = sizes["fp"]
        rates = fp_series(client, fp["capacity"], fp["probes"], fp["steps"])
        draw_fp(rates, fp["capacity"], out / "fp_rate.png", server=name, command=command)
    c = sizes["crawl"]
    rows = crawl.measure(c["pages"], c["links"], c["latencies"], ["bloom"], 16, binary)
    draw_crawl(rows, out / "crawl.png", server=name, command=command)
    print(f"written: {', '.join(str(out / n) for n in ('memory.png', 'crawl.png', 'fp_rate.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
