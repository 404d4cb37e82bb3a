"""Kill trials: what a ``kill -9`` of a worker costs, under the frontier scheduler and
under scrapy-redis's.

    python -m bench.frontier_kills [--kills 30] [--pages 1500] [--server BINARY]

Each trial is a crawl of a local tree-shaped site (every page has exactly one inbound
link, so a request lost is a page lost) by two workers sharing one queue in Redis; one
of them is killed with SIGKILL once it has parsed a random number of pages, from outside,
at whatever it is doing then; the other crawls on to the end, then a third run resumes
whatever is left. Per trial: pages never fetched (lost), and pages fetched twice.
The frontier must lose none; scrapy-redis's scheduler loses what the killed worker had
popped and not finished, with the subtrees under them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import redis

from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary

ROOT = Path(__file__).resolve().parent.parent
LINKS = 5

SCHEDULERS = {
    "frontier": {
        "SCHEDULER": "scrapy_dedup_suite.frontier.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_dedup_suite.dupefilter.RFPDupeFilter",
        "DEDUP_BACKEND": "compact",
        "FRONTIER_LEASE": 2,
    },
    "scrapy-redis": {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    },
}


def options(name: str, doc: str | None, argv: list[str] | None, **counts: int) -> Any:
    """The options of ``python -m bench.<name>``: ``counts`` (their defaults) and the
    tree's pages, the server binary and the seed every trial bench of the site takes."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc)
    for count, default in counts.items():
        parser.add_argument(f"--{count}", type=int, default=default)
    parser.add_argument("--pages", type=int, default=1500)
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


@contextmanager
def crawl_server(binary: str | None) -> Iterator[tuple[redis.Redis, str]]:
    """A server for the trials (``binary``, else redis-server on PATH, else the embedded
    one): a client, and its URL for the workers."""
    with EmbeddedRedis(binary=binary or shutil.which("redis-server") or server_binary()) as up:
        yield redis.Redis(port=up.port), f"redis://127.0.0.1:{up.port}/0"


def children(n: int, pages: int) -> list[int]:
    return [c for c in range(n * LINKS + 1, n * LINKS + LINKS + 1) if c < pages]


class TreeSite:
    """``/page/N``, N < pages, linking to its children in a tree."""

    def __init__(self, pages: int) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                n = int(self.path.rsplit("/", 1)[1])
                links = "".join(f'<a href="/page/{c}">{c}</a>' for c in children(n, pages))
                body = f"<html><body>{links}</body></html>".encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # (the worker that asked was killed)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        Thread(target=self.httpd.serve_forever, daemon=True).start()


def worker(url: str, site: str, settings: dict, notes: Path) -> subprocess.Popen[str]:
    args = {"site": site, "settings": {"REDIS_URL": url, **settings}, "notes": str(notes)}
    return subprocess.Popen(
        [sys.executable, "-m", "bench.frontier_kills", "--child", json.dumps(args)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def parsed(notes: Path) -> list[int]:
    return [int(x) for x in notes.read_text().split()] if notes.exists() else []


def child(args: dict) -> None:
    """One worker, in this process: each page parsed appended to args["notes"] at once."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    fd = os.open(args["notes"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    class TreeSpider(scrapy.Spider):
        name = "tree"

        async def start(self):
            yield scrapy.Request(f"{args['site']}/page/0")

        def parse(self, response):
            os.write(fd, f"{response.url.rsplit('/', 1)[1]}\n".encode())
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, self.parse)

    settings = {
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS": 8,
        "SCHEDULER_PERSIST": True,
        **args["settings"],
    }
    process = CrawlerProcess(settings)
    process.crawl(process.create_crawler(TreeSpider))
    process.start()


def trial(url: str, site: str, settings: dict, pages: int, kill_at: int) -> tuple[int, int]:
    """One kill: (pages never fetched, pages fetched twice)."""
    with tempfile.TemporaryDirectory() as tmp:
        notes = [Path(tmp) / f"{name}.notes" for name in ("victim", "survivor", "resume")]
        victim = worker(url, site, settings, notes[0])
        deadline = time.monotonic() + 60
        while not parsed(notes[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        survivor = worker(url, site, settings, notes[1])
        while len(parsed(notes[0])) < kill_at and victim.poll() is None:
            time.sleep(0.002)
        if victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        survivor.wait(600)
        worker(url, site, settings, notes[2]).wait(600)  # the resume: whatever is left
        fetched = Counter(parsed(notes[0]) + parsed(notes[1]) + parsed(notes[2]))
        lost = pages - len(fetched)
        return lost, sum(fetched.values()) - len(fetched)


def main(argv: list[str] | None = None) -> int:
    opts = options("frontier_kills", __doc__, argv, kills=30)
    if opts.child:
        child(json.loads(opts.child))
        return 0
    rng = random.Random(opts.seed)
    moments = [rng.randint(1, opts.pages // 2) for _ in range(opts.kills)]
    site = TreeSite(opts.pages)
    print(f"{opts.kills} kills of one of 2 workers, tree of {opts.pages:,} pages x {LINKS}")
    with crawl_server(opts.server) as (client, url):
        for name, settings in SCHEDULERS.items():
            results = []
            for kill_at in moments:
                client.flushall()
                results.append(trial(url, site.url, settings, opts.pages, kill_at))
            lost = [r[0] for r in results]
            twice = [r[1] for r in results]
            print(
                f"  {name:13s} lost: {sum(lost):5d} in all, {max(lost):4d} at most per kill, "
                f"{sum(1 for x in lost if x):2d}/{len(lost)} kills lost pages; fetched twice: "
                f"{sum(twice) / len(twice):.1f} per kill, {max(twice)} at most",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
