"""Politeness across workers: how hard N workers hit each host, measured on the hosts.

    python -m bench.politeness [--workers 3] [--hosts 4] [--pages 300] [--delay 0.1]
                               [--server BINARY] [--cluster]

A tree of PAGES pages (5 links each, every page one inbound link) spread over HOSTS
local hosts, each a server of its own on its own loopback address (127.0.0.1,
127.0.0.2, ...: a download slot each to Scrapy), the first holding seven pages in ten.
Each host's server notes when each request arrives. Crawled with ``DOWNLOAD_DELAY`` =
DELAY, ``RANDOMIZE_DOWNLOAD_DELAY`` off and ``CONCURRENT_REQUESTS_PER_DOMAIN`` 1 by:

- ``scrapy, 1 process``: Scrapy's own scheduler in one process (the reference: its
  downloader keeps each host's delay);
- ``frontier, N workers`` (``FRONTIER_POLITENESS`` on: the slots' limits kept across
  the workers), ``frontier off, N workers`` (off: each worker keeps its own) and
  ``scrapy-redis, N workers``: WORKERS processes sharing the queue in Redis, started
  at once.

Per row: the smallest gap between two arrivals at a host, over the hosts, as a share of
DELAY (a polite crawl keeps it >= 1, less the clock's jitter), the median gap at the
big host, the crawl's pages per second, and when the last small host was done against
the big host, and the scripts the crawl ran on Redis per page (the frontier's record,
lease, push and block calls: its round trips, less each worker's open and close). A
worker that keeps the delay for itself alone lets N workers hit a host about N times
as often as one process does.

``--cluster``: on a Redis Cluster of three masters (the compact filter's 16 groups,
so 16 queue shards: a host's requests are recorded all over it and wait in its home
shard), without the scrapy-redis row (its queue is on one server).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis

from scrapy_dedup_suite.embedded import EmbeddedCluster, server_binary

from .frontier_kills import SCHEDULERS, crawl_server, parsed, worker

LINKS = 5
SCRAPY = {
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
}


class HostsSite:
    """``/page/N`` for N < pages, page N on host ``host_of(N)``, linking to its
    children by absolute URL; ``arrivals[host]``: when each request came; ``sent[host]``:
    when each was sent, as its sender's ``X-Sent`` header says (``time.monotonic()``,
    one clock for every process on this machine), for requests that carry one;
    ``most[host]``: the most requests it was answering at once (each answer takes
    ``pause`` s)."""

    def __init__(self, pages: int, hosts: int, pause: float = 0.0) -> None:
        self.pages, self.hosts, self.pause = pages, hosts, pause
        self.arrivals: dict[int, list[float]] = defaultdict(list)
        self.sent: dict[int, list[float]] = defaultdict(list)
        self.answering: dict[int, int] = defaultdict(int)
        self.most: dict[int, int] = defaultdict(int)
        self.lock = threading.Lock()
        #: Host -> (requests left to refuse with 429, the Retry-After sent or None).
        self.refusing: dict[int, tuple[int, str | None]] = {}
        #: Host -> its robots.txt (else a 404); its requests are not counted as arrivals.
        self.robots: dict[int, str] = {}
        self.servers = [self._serve(h) for h in range(hosts)]
        self.urls = [f"http://127.0.0.{h + 1}:{s.server_port}" for h, s in enumerate(self.servers)]

    def host_of(self, n: int) -> int:
        return 0 if self.hosts == 1 or n % 10 < 7 else 1 + n % (self.hosts - 1)

    def url(self, n: int) -> str:
        return f"{self.urls[self.host_of(n)]}/page/{n}"

    def _serve(self, host: int) -> ThreadingHTTPServer:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/robots.txt":
                    self.robots_txt()
                    return
                sent = self.headers.get("X-Sent")
                with site.lock:
                    site.arrivals[host].append(time.monotonic())
                    if sent is not None:
                        site.sent[host].append(float(sent))
                    site.answering[host] += 1
                    site.most[host] = max(site.most[host], site.answering[host])
                try:
                    self.answer()
                finally:
                    with site.lock:
                        site.answering[host] -= 1

            def robots_txt(self) -> None:
                text = site.robots.get(host)
                if text is None:
                    self.send_error(404)
                    return
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def answer(self) -> None:
                time.sleep(site.pause)
                with site.lock:
                    left, after = site.refusing.get(host, (0, None))
                    if left:
                        site.refusing[host] = (left - 1, after)
                if left:
                    self.send_response(429)
                    if after is not None:
                        self.send_header("Retry-After", after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                n = int(self.path.rsplit("/", 1)[1])
                kids = range(n * LINKS + 1, min(n * LINKS + LINKS + 1, site.pages))
                links = "".join(f'<a href="{site.url(c)}">{c}</a>' for c in kids)
                body = f"<html><body>{links}</body></html>".encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        httpd = ThreadingHTTPServer((f"127.0.0.{host + 1}", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd

    def reset(self) -> None:
        with self.lock:
            self.arrivals.clear()
            self.sent.clear()
            self.most.clear()

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def crawl(site: HostsSite, url: str, settings: dict[str, Any], workers: int) -> dict[str, Any]:
    """One crawl by ``workers`` processes started at once: what the hosts saw."""
    site.reset()
    with tempfile.TemporaryDirectory() as tmp:
        notes = [Path(tmp) / f"w{n}.notes" for n in range(workers)]
        started = time.monotonic()
        procs = [worker(url, site.urls[0], settings, path) for path in notes]
        for proc in procs:
            proc.wait(1800)
        pages = len({p for path in notes for p in parsed(path)})
    with site.lock:
        arrivals = {h: sorted(times) for h, times in site.arrivals.items()}
    gaps = {h: [b - a for a, b in zip(t, t[1:])] for h, t in arrivals.items()}
    last = {h: t[-1] - started for h, t in arrivals.items() if t}
    first = min(t[0] for t in arrivals.values() if t)
    end = max(t[-1] for t in arrivals.values() if t)
    return {
        "pages": pages,
        "rate": pages / max(end - first, 1e-9),
        "smallest": min(min(g) for g in gaps.values() if g),
        "big_median": statistics.median(gaps[0]) if gaps.get(0) else 0.0,
        "small_done": max((last[h] for h in last if h != 0), default=0.0),
        "big_done": last.get(0, 0.0),
    }


@contextmanager
def servers(binary: str | None, cluster: bool) -> Iterator[tuple[list[redis.Redis], str]]:
    """The server (or the Cluster's masters: a client each) and the workers' URL."""
    if not cluster:
        with crawl_server(binary) as (client, url):
            yield [client], url
        return
    with EmbeddedCluster(3, binary=binary or shutil.which("redis-server") or server_binary()) as up:
        yield [redis.Redis(port=node.port) for node in up.nodes], up.url


def scripts_run(clients: list[redis.Redis]) -> int:
    """The scripts run so far on every master (EVALSHA and EVAL)."""
    total = 0
    for client in clients:
        stats = client.info("commandstats")
        total += sum(
            int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
        )
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.politeness", description=__doc__)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--delay", type=float, default=0.1, help="DOWNLOAD_DELAY, seconds")
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    parser.add_argument("--cluster", action="store_true", help="on a Cluster of 3 masters")
    opts = parser.parse_args(argv)
    if opts.workers < 1 or not 1 <= opts.hosts <= 250 or opts.pages < 2 or opts.delay <= 0:
        parser.error("--workers >= 1, --hosts 1 to 250, --pages >= 2 and --delay > 0")
    delay = opts.delay
    polite = {
        "DOWNLOAD_DELAY": delay,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    }
    site = HostsSite(opts.pages, opts.hosts)
    print(
        f"{opts.pages} pages on {opts.hosts} hosts (the first holds 7 in 10), "
        f"DOWNLOAD_DELAY {delay} s, CONCURRENT_REQUESTS_PER_DOMAIN 1"
    )
    rows: list[tuple[str, Any, int]] = [
        ("scrapy, 1 process", SCRAPY, 1),
        (f"frontier, {opts.workers} workers", SCHEDULERS["frontier"], opts.workers),
        (
            f"frontier off, {opts.workers} workers",
            {**SCHEDULERS["frontier"], "FRONTIER_POLITENESS": False},
            opts.workers,
        ),
        (f"scrapy-redis, {opts.workers} workers", SCHEDULERS["scrapy-redis"], opts.workers),
    ]
    if opts.cluster:
        rows = [(name, {**settings, "DEDUP_REDIS_CLUSTER": True}, n) for name, settings, n in rows]
        rows = rows[:3]
    print(
        f"{'row':26s} pages  pages/s  smallest gap  big host's median gap  "
        "small hosts done / big host done  scripts/page"
    )
    with servers(opts.server, opts.cluster) as (clients, url):
        for name, settings, workers in rows:
            for client in clients:
                client.flushall()
            before = scripts_run(clients)
            got = crawl(site, url, {**settings, **polite}, workers)
            ran = (scripts_run(clients) - before) / max(got["pages"], 1)
            print(
                f"{name:26s} {got['pages']:5d} {got['rate']:8.1f}  "
                f"{got['smallest'] / delay:10.2f}x  {got['big_median'] / delay:19.2f}x  "
                f"{got['small_done']:6.1f} s / {got['big_done']:.1f} s  {ran:27.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
