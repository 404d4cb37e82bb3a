"""What a crawl pays per request: ``request_seen`` of scrapy-redis's dupefilter and of
ours for each backend, built as scrapy-redis's scheduler builds them (``from_spider``,
with a crawler's stats), fingerprinting included, on a server of its own.

    python -m bench.request_seen [--requests 20000] [--rounds 2] [--batch 50]
                                 [--server redis-server]

Each round offers N new requests, then the same N again (duplicates), to each filter
in turn; the best round of each is reported, as requests/s and as a ratio to
scrapy-redis's in the same run. The ``batched`` rows offer the same requests in
batches of --batch (a page's links) through the path BatchDedupMiddleware takes
(``df.batches``: ``prepare``, ``check``, ``account``), fingerprinting included.
"""

from __future__ import annotations

import argparse
import shutil
import time

import redis
import scrapy
from scrapy import Request
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter as ScrapyRedisDupeFilter

from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary

BACKENDS = ("set", "hash", "compact", "bloom", "windowed-bloom")


class BenchSpider(scrapy.Spider):
    name = "bench"


def offer(df, requests: list[Request]) -> tuple[float, float]:
    """Requests/s for the new requests, then for the same ones again."""
    started = time.perf_counter()
    new = sum(not df.request_seen(r) for r in requests)
    first = time.perf_counter() - started
    started = time.perf_counter()
    seen = sum(df.request_seen(r) for r in requests)
    second = time.perf_counter() - started
    if new != len(requests) or seen != len(requests):
        raise AssertionError(f"{df!r}: {new} new and {seen} seen of {len(requests)}")
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


def measure(url: str, n: int, rounds: int, batch: int = 50) -> dict[str, tuple[float, float]]:
    requests = [Request(f"http://bench.test/page/{i}?a=1") for i in range(n)]
    client = redis.Redis.from_url(url)
    best: dict[str, tuple[float, float]] = {}

    def keep(name: str, rates: tuple[float, float]) -> None:
        old = best.get(name, (0.0, 0.0))
        best[name] = (max(old[0], rates[0]), max(old[1], rates[1]))

    for _ in range(rounds):  # interleaved: every filter sees the same machine load
        client.flushall()
        spider = BenchSpider.from_crawler(get_crawler(BenchSpider, {"REDIS_URL": url}))
        keep("scrapy-redis", offer(ScrapyRedisDupeFilter.from_spider(spider), requests))
        for backend in BACKENDS:
            client.flushall()
            settings = {
                "REDIS_URL": url,
                "DEDUP_BACKEND": backend,
                "DEDUP_BLOOM_CAPACITY": 2 * n,
                "DEDUP_COMPACT_CAPACITY": max(1_000, 2 * n),
            }
            spider = BenchSpider.from_crawler(get_crawler(BenchSpider, settings))
            keep(backend, offer(RFPDupeFilter.from_spider(spider), requests))
            client.flushall()
            spider = BenchSpider.from_crawler(get_crawler(BenchSpider, settings))
            df = RFPDupeFilter.from_spider(spider)
            keep(f"{backend} batched", offer_batches(df, requests, batch))
    client.close()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_seen", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, metavar="N")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=50, help="requests per batch (a page's links)")
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    opts = parser.parse_args(argv)
    if opts.requests < 1 or opts.rounds < 1 or opts.batch < 1:
        parser.error("--requests, --rounds and --batch must be at least 1")
    binary = opts.server or shutil.which("redis-server") or server_binary()
    with EmbeddedRedis(binary=binary) as server:
        best = measure(server.url, opts.requests, opts.rounds, opts.batch)
    ref_new, ref_seen = best["scrapy-redis"]
    print(f"request_seen, {opts.requests:,} new then the same again, best of {opts.rounds}:")
    for name, (new, seen) in best.items():
        print(
            f"  {name:23s} new {new:8,.0f}/s ({new / ref_new:.2f}x)   "
            f"duplicate {seen:8,.0f}/s ({seen / ref_seen:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
