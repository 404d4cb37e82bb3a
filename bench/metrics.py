"""What a scrape of the metrics costs: Redis calls and time, by the size of the queue.

    python -m bench.metrics [--requests 1000,1000000] [--server PATH]

For each size, a frontier queue of that many requests (as the default memory bench
queues them: 5 priorities) on a fresh server, and the metrics extension of a worker
on it (``DedupMetrics``, served on a free port, as a crawl opens it). Each row is one
scrape that reads Redis (the interval forced over) and one inside the interval: the
commands the server ran for it (MONITOR, what scripts run inside left out), the round
trips (pipelines count once), and the time the HTTP answer took. Ratios are to the
smallest queue, in the same run.
"""

from __future__ import annotations

import argparse
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

from scrapy import Spider
from scrapy.utils.test import get_crawler

from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary
from scrapy_dedup_suite.frontier.scheduler import Scheduler
from scrapy_dedup_suite.metrics import DedupMetrics

from .crawl import Monitor


class Metered(Spider):
    name = "metered"


def scrape(port: int) -> tuple[float, int]:
    """One scrape: seconds, and bytes answered."""
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as answer:
        size = len(answer.read())
    return time.perf_counter() - start, size


def row(binary: str, requests: int) -> dict[str, Any]:
    with EmbeddedRedis(binary=binary) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        crawler = get_crawler(Metered, {"REDIS_URL": url, "DEDUP_METRICS_PORT": 0})
        crawler.engine = SimpleNamespace(_slot=SimpleNamespace(inprogress=set()))
        scheduler = Scheduler.from_crawler(crawler)
        scheduler.open(Metered())
        crawler.engine._slot.scheduler = scheduler
        queue = scheduler.queue
        assert queue is not None
        line = b"\x01 parse  https://www.example.com/catalogue/page-%07d/items.html"
        batch = []
        for n in range(requests):
            batch.append((n % 5, line % n))
            if len(batch) == 10_000:
                queue.push(queue.shards[0], batch)
                batch = []
        queue.push(queue.shards[0], batch)
        ext = DedupMetrics.from_crawler(crawler)
        ext.spider_opened(Metered())
        assert ext.httpd is not None
        port = ext.httpd.server_address[1]
        try:
            scrape(port)  # (warm: the server's scripts, the client's connections)
            ext._queue_at = float("-inf")
            with Monitor(server.port) as read:
                seconds, size = scrape(port)
            with Monitor(server.port) as cached:
                cached_seconds, _ = scrape(port)
        finally:
            ext.spider_closed(Metered())
            scheduler.close("finished")
        return {
            "requests": requests,
            "commands": read.count,
            "by_name": dict(read.names),
            "cached_commands": cached.count,
            "cached_by_name": dict(cached.names),
            "seconds": seconds,
            "cached_seconds": cached_seconds,
            "bytes": size,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", default="1000,1000000")
    parser.add_argument("--server", default=None, help="redis-server binary")
    args = parser.parse_args()
    binary = args.server or server_binary()
    rows = [row(binary, int(n)) for n in args.requests.split(",")]
    base = rows[0]
    print(f"{'queued':>10} {'commands':>9} {'time':>9} {'ratio':>6} {'cached':>7} {'answer':>7}")
    for r in rows:
        print(
            f"{r['requests']:>10,} {r['commands']:>9} {r['seconds'] * 1000:>7.1f}ms "
            f"{r['seconds'] / base['seconds']:>5.2f}x {r['cached_commands']:>7} "
            f"{r['bytes']:>6,}B"
        )
    for r in rows:
        print(f"  {r['requests']:,}: read {r['by_name']}; cached {r['cached_by_name']}")


if __name__ == "__main__":
    main()
