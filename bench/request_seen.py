"""What a crawl pays per request: ``request_seen`` of scrapy-redis's dupefilter and of
ours for each backend, built as scrapy-redis's scheduler builds them (``from_spider``,
with a crawler's stats), fingerprinting included, on a server of its own.

    python -m bench.request_seen [--requests 20000] [--rounds 2] [--batch 50]
                                 [--sized-for 2] [--server redis-server] [--calls]

Each round offers N new requests, then the same N again (duplicates), to each filter
in turn; the best round of each is reported, as requests/s and as a ratio to
scrapy-redis's in the same run. The ``batched`` rows offer the same requests in
batches of --batch (a page's links) through the path BatchDedupMiddleware takes
(``df.batches``: ``prepare``, ``check``, ``account``), fingerprinting included.
``--sized-for X``: the sized bucket filters' capacity (compact, hash) in multiples of N
(2: half full once the N are in; 1: full, as their memory figures are measured); the
Bloom filters stay sized for 2N (at capacity they take some new requests for seen).

``--calls`` counts instead of timing: the Python calls (cProfile's total) per
``request_seen`` of N new requests, after a warm-up of N/4: the work on the hot path,
which does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import time
from collections.abc import Iterator
from typing import Any

import redis
import scrapy
from scrapy import Request
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter as ScrapyRedisDupeFilter

from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary

from .backend_rows import our_backend

BACKENDS = (
    "set", "hash", "hash+growing", "compact", "compact+growing", "bloom", "windowed-bloom"
)  # fmt: skip


class BenchSpider(scrapy.Spider):
    name = "bench"


def offer(name: str, df: Any, requests: list[Request]) -> tuple[float, float]:
    """Requests/s for the new requests, then for the same ones again (``name``: the
    row's, for the error that says an answer was wrong)."""
    started = time.perf_counter()
    new = sum(not df.request_seen(r) for r in requests)
    first = time.perf_counter() - started
    started = time.perf_counter()
    seen = sum(df.request_seen(r) for r in requests)
    second = time.perf_counter() - started
    if new != len(requests) or seen != len(requests):
        raise AssertionError(f"{name}: {new} new and {seen} seen of {len(requests)}")
    return len(requests) / first, len(requests) / second


def offer_batches(df, requests: list[Request], size: int) -> tuple[float, float]:
    """As :func:`offer`, in batches of ``size`` as BatchDedupMiddleware sends them."""

    def once() -> tuple[float, int]:
        started = time.perf_counter()
        admitted = 0
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            batch = df.batches.prepare(chunk)
            new = df.batches.account(batch, df.batches.check(batch))
            admitted += sum(not df.request_seen(r) for r in new)  # as the scheduler admits them
        return time.perf_counter() - started, admitted

    first, new = once()
    second, again = once()
    if new != len(requests) or again != 0:
        raise AssertionError(f"{df!r}: {new} new, then {again} new again, of {len(requests)}")
    return len(requests) / first, len(requests) / second


def bench_settings(url: str, backend: str, n: int, sized_for: float = 2) -> dict[str, Any]:
    """A filter of ``backend`` for what a run of ``n`` requests offers: a Bloom filter
    sized for twice that, a filter of buckets for ``sized_for`` times
    (``compact+growing``, ``hash+growing``: nothing sized, DEDUP_COMPACT_CAPACITY = 0)."""
    return {
        "REDIS_URL": url,
        "DEDUP_BLOOM_CAPACITY": 2 * n,
        "DEDUP_COMPACT_CAPACITY": max(1_000, round(sized_for * n)),
        **our_backend(backend),
    }


def measure(
    url: str, n: int, rounds: int, batch: int = 50, sized_for: float = 2
) -> dict[str, tuple[float, float]]:
    requests = [Request(f"http://bench.test/page/{i}?a=1") for i in range(n)]
    client = redis.Redis.from_url(url)
    best: dict[str, tuple[float, float]] = {}

    def keep(name: str, rates: tuple[float, float]) -> None:
        old = best.get(name, (0.0, 0.0))
        best[name] = (max(old[0], rates[0]), max(old[1], rates[1]))

    for _ in range(rounds):  # interleaved: every filter sees the same machine load
        client.flushall()
        spider = BenchSpider.from_crawler(get_crawler(BenchSpider, {"REDIS_URL": url}))
        keep(
            "scrapy-redis",
            offer("scrapy-redis", ScrapyRedisDupeFilter.from_spider(spider), requests),
        )
        for backend in BACKENDS:
            client.flushall()
            settings = bench_settings(url, backend, n, sized_for)
            spider = BenchSpider.from_crawler(get_crawler(BenchSpider, settings))
            keep(backend, offer(backend, RFPDupeFilter.from_spider(spider), requests))
            client.flushall()
            spider = BenchSpider.from_crawler(get_crawler(BenchSpider, settings))
            df = RFPDupeFilter.from_spider(spider)
            keep(f"{backend} batched", offer_batches(df, requests, batch))
    client.close()
    return best


def filters(url: str, n: int) -> Iterator[tuple[str, Any]]:
    """scrapy-redis's dupefilter, then ours for each backend, as its scheduler builds
    them, each on the server flushed just before it is built."""
    client = redis.Redis.from_url(url)
    try:
        client.flushall()
        spider = BenchSpider.from_crawler(get_crawler(BenchSpider, {"REDIS_URL": url}))
        yield "scrapy-redis", ScrapyRedisDupeFilter.from_spider(spider)
        for backend in BACKENDS:
            client.flushall()
            spider = BenchSpider.from_crawler(
                get_crawler(BenchSpider, bench_settings(url, backend, n))
            )
            yield backend, RFPDupeFilter.from_spider(spider)
    finally:
        client.close()


def count_calls(url: str, n: int) -> dict[str, float]:
    """Python calls per request_seen of ``n`` new requests, after ``n // 4`` others."""
    warm = [Request(f"http://bench.test/warm/{i}?a=1") for i in range(max(1, n // 4))]
    requests = [Request(f"http://bench.test/page/{i}?a=1") for i in range(n)]
    calls: dict[str, float] = {}
    for name, df in filters(url, n):
        for request in warm:
            df.request_seen(request)
        profile = cProfile.Profile()
        profile.enable()
        new = sum(not df.request_seen(r) for r in requests)
        profile.disable()
        if new != n:
            raise AssertionError(f"{name}: {new} new of {n}")
        calls[name] = pstats.Stats(profile).total_calls / n  # type: ignore[attr-defined]
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_seen", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, metavar="N")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=50, help="requests per batch (a page's links)")
    parser.add_argument(
        "--sized-for",
        type=float,
        default=2.0,
        metavar="X",
        help="compact's and hash's capacity in multiples of --requests (1: full at the end)",
    )
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    parser.add_argument(
        "--calls", action="store_true", help="count Python calls per request instead of timing"
    )
    opts = parser.parse_args(argv)
    if opts.requests < 1 or opts.rounds < 1 or opts.batch < 1:
        parser.error("--requests, --rounds and --batch must be at least 1")
    if not opts.sized_for >= 1:
        parser.error("--sized-for must be at least 1 (a filter sized below what it holds)")
    binary = opts.server or shutil.which("redis-server") or server_binary()
    if opts.calls:
        with EmbeddedRedis(binary=binary) as server:
            calls = count_calls(server.url, opts.requests)
        print(f"Python calls per request_seen, {opts.requests:,} new requests:")
        for name, count in calls.items():
            print(f"  {name:23s} {count:7.1f} ({count / calls['scrapy-redis']:.2f}x scrapy-redis)")
        return 0
    with EmbeddedRedis(binary=binary) as server:
        best = measure(server.url, opts.requests, opts.rounds, opts.batch, opts.sized_for)
    ref_new, ref_seen = best["scrapy-redis"]
    print(
        f"request_seen, {opts.requests:,} new then the same again, best of {opts.rounds} "
        f"(compact and hash sized for {opts.sized_for:g}x):"
    )
    for name, (new, seen) in best.items():
        print(
            f"  {name:23s} new {new:8,.0f}/s ({new / ref_new:.2f}x)   "
            f"duplicate {seen:8,.0f}/s ({seen / ref_seen:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
