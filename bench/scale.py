"""Scale-out: N workers on one site and one Redis, and a queue of many hosts.

    python -m bench.scale [--workers 1,2] [--pages 1500] [--parked 0,100000]
                          [--server BINARY]

A tree of PAGES pages (5 links each, one host) crawled by N worker processes started at
once, for each N of WORKERS, with each scheduler:

- ``frontier``: this package's (compact, politeness across workers on, no delay);
- ``scrapy-redis``: scrapy-redis's scheduler and dupefilter.

For the frontier, each count of PARKED adds that many other hosts to the queue before
the crawl, one request each, every one blocked for an hour (as a site's Retry-After
would): download slots that exist, and wait, while the crawl runs. ``calls/page``
counts every command the workers sent (MONITOR; those scripts run inside left out) up to
the moment the last page was parsed, ``scripts/page`` the scripts' calls among them
(the frontier's lease and record calls; the rest are each worker's open, and the close
of a worker that ends before the last page, about 800 commands for its summary);
``pages/s`` is from the first page parsed to the last. The workers are stopped then
(the parked hosts would keep them waiting). Designed for machines with more cores than
workers: on 2 cores, 2 workers share them with the site, Redis and this bench.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from .crawl import Monitor
from .frontier_kills import SCHEDULERS, TreeSite, crawl_server, parsed, worker

QUEUE_KEY = "tree:requests"  # (the bench's spider is "tree")


def park(client: redis.Redis, hosts: int) -> None:
    """``hosts`` hosts, one request each, in the frontier's queue, each host's slot
    blocked for an hour (so that no worker takes them during the crawl)."""
    from scrapy import Request
    from scrapy.settings import Settings

    from scrapy_dedup_suite.frontier.backoff import SlotBackoff
    from scrapy_dedup_suite.frontier.queue import FrontierQueue
    from scrapy_dedup_suite.frontier.slots import SlotPolicy

    queue = FrontierQueue(client, [QUEUE_KEY])
    shard = queue.shards[0]
    policy = SlotPolicy(Settings())
    backoff = SlotBackoff(policy, [429], 1.0, 3600.0)
    for start in range(0, hosts, 1000):
        requests = [
            Request(f"http://parked{n}.test/") for n in range(start, min(start + 1000, hosts))
        ]
        queue.push(shard, [(0, policy.tag(b"\x01" + r.url.encode(), r)) for r in requests])
        for request in requests:
            backoff.block(queue, policy.key(request), 3_600_000)


def crawl(
    port: int, url: str, site: str, settings: dict, workers: int, pages: int
) -> dict[str, Any]:
    """One crawl by ``workers`` processes: pages/s and Redis calls per page."""
    with tempfile.TemporaryDirectory() as tmp:
        notes = [Path(tmp) / f"w{n}.notes" for n in range(workers)]
        with Monitor(port) as monitor:
            procs = [worker(url, site, settings, path) for path in notes]
            first = deadline = None
            done: set[int] = set()
            while len(done) < pages:
                done = {p for path in notes for p in parsed(path)}
                now = time.monotonic()
                if done and first is None:
                    first, deadline = now, now + 1800
                if deadline is not None and now > deadline:
                    raise RuntimeError(f"{len(done)} of {pages} pages in 30 minutes")
                if all(proc.poll() is not None for proc in procs) and len(done) < pages:
                    raise RuntimeError(f"the workers ended with {len(done)} of {pages} pages")
                time.sleep(0.01)
            end = time.monotonic()
            calls = monitor.count
            scripts = monitor.names["EVALSHA"] + monitor.names["EVAL"]
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(120)
    assert first is not None
    return {
        "rate": pages / max(end - first, 1e-9),
        "calls": calls / pages,
        "scripts": scripts / pages,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--workers", default="1,2", help="worker counts, listed")
    parser.add_argument("--pages", type=int, default=1500)
    parser.add_argument("--parked", default="0,100000", help="hosts parked, listed")
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    opts = parser.parse_args(argv)
    try:
        counts = [int(n) for n in opts.workers.split(",")]
        parked = [int(n) for n in opts.parked.split(",")]
    except ValueError:
        parser.error("--workers and --parked are whole numbers, listed: e.g. 1,2")
    if min(counts) < 1 or min(parked) < 0 or opts.pages < 2:
        parser.error("--workers >= 1, --parked >= 0 and --pages >= 2")
    site = TreeSite(opts.pages)
    print(f"{opts.pages} pages, one host; workers {counts}; hosts parked {parked}")
    print(f"{'row':42s} pages/s  calls/page  scripts/page")
    rows = [
        (f"frontier, {n} worker(s), {k:,} hosts parked", "frontier", n, k)
        for n in counts
        for k in parked
    ] + [(f"scrapy-redis, {n} worker(s)", "scrapy-redis", n, 0) for n in counts]
    with crawl_server(opts.server) as (client, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        for name, scheduler, n, k in rows:
            client.flushall()
            if k:
                park(client, k)
            got = crawl(port, url, site.url, SCHEDULERS[scheduler], n, opts.pages)
            print(
                f"{name:42s} {got['rate']:7.1f}  {got['calls']:10.2f}  {got['scripts']:12.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
