"""Real Scrapy crawls of a local link-heavy site: what Redis dedup costs a crawl.

    python -m bench.crawl [--pages 2000] [--links 50] [--latency 0,0.5,1]
                          [--backends bloom] [--concurrency 16]

Each crawl starts from page 0 of a local site of PAGES pages with LINKS links
each (every page reachable), in a fresh process, with Scrapy's own scheduler (a
memory queue, so only the dupefilter touches Redis), and reports pages/s over
the crawl (Scrapy's elapsed_time_seconds). Rows:

- ``memory``: Scrapy's in-memory dupefilter (the ceiling);
- ``scrapy-redis``: scrapy-redis's dupefilter, one SADD per request;
- ``<backend>``: ours, one round trip per request (``compact`` with its default
  capacity; ``compact+growing``, ``hash+growing``: with nothing sized);
- ``<backend> batched``: ours with BatchDedupMiddleware, one round trip per page;
- with ``--schedulers``, the queue in Redis too: ``sr scheduler`` (scrapy-redis's
  scheduler and dupefilter), ``sr scheduler, <backend> batched`` (its scheduler, our
  batched dupefilter), ``frontier <backend>`` and ``frontier <backend> batched`` (this
  package's scheduler); their ``calls/page`` counts every command a client sent
  (MONITOR, in a crawl of its own at no added latency; commands run inside scripts
  left out): pops, acknowledgements, records, pushes, idle checks. ``--only-schedulers``:
  those rows and ``memory`` alone (the ratio column then to ``sr scheduler``).

The Redis rows run on loopback and behind bench/latency_proxy.py for each
--latency (ms added to each round trip; the PING time measured through the proxy
is printed). ``memory`` is crawled again before each latency's rows (the machine's
speed drifts over a run), and the ratios are to that ``memory`` and to
``scrapy-redis`` at the same latency, in the same run; ``calls/page`` counts the
dupefilter's round trips (the server's EVALSHA calls, or SADDs for rows without
scripts) per page crawled.

``--repeat N`` crawls each latency's rows N times in turn, ``memory`` first each time:
each crawl's ratio is to the ``memory`` crawl of its own round, and the table shows
the median of the N ratios and their range (on a shared machine one crawl's speed
moves by a third between runs). ``--rows`` keeps the rows whose name contains one of
the words listed (``memory`` always runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis

from scrapy_dedup_suite.embedded import EmbeddedRedis, free_port, server_binary

from .backend_rows import our_backend

ROOT = Path(__file__).resolve().parent.parent
MIDDLEWARE = {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}


class Site:
    """``/page/N``: N < pages, each linking to the next page and to links - 1 others."""

    def __init__(self, pages: int, links: int) -> None:
        bodies = []
        for n in range(pages):
            targets = [(n + 1) % pages] + [(n * 7 + i * 13 + 1) % pages for i in range(1, links)]
            body = "".join(f'<a href="/page/{m}">page {m}</a>\n' for m in targets)
            bodies.append(f"<html><body><h1>page {n}</h1>\n{body}</body></html>".encode())

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if len(parts) != 2 or parts[0] != "page" or not parts[1].isdigit():
                    self.send_error(404)
                    return
                n = int(parts[1])
                if n >= pages:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(bodies[n])))
                self.end_headers()
                self.wfile.write(bodies[n])

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


class Proxy:
    """bench/latency_proxy.py in its own process."""

    def __init__(self, target: int, delay_ms: float) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.latency_proxy", str(self.port), str(target),
             str(delay_ms)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        if self.proc.stdout is None or self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the latency proxy did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def ping_ms(port: int, samples: int = 200) -> float:
    client = redis.Redis(port=port)
    client.ping()
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - started)
    client.close()
    return statistics.median(times) * 1000


def proxy_for(target: int, latency_ms: float) -> tuple[Proxy, float]:
    """A proxy whose PING is about ``latency_ms`` more than loopback's: its own
    overhead (threads, wake-ups) is measured first and taken off the delay."""
    loopback = ping_ms(target)
    probe = Proxy(target, 0)
    overhead = ping_ms(probe.port) - loopback
    probe.stop()
    proxy = Proxy(target, max(0.0, latency_ms - overhead))
    return proxy, ping_ms(proxy.port)


def calls(client: redis.Redis) -> int:
    """Round trips the dupefilter made: its script calls, or (rows without scripts)
    its SADDs. (Commands a script runs count in INFO too, so not both.)"""
    stats = client.info("commandstats")

    def count(name: str) -> int:
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    return count("evalsha") + count("eval") or count("sadd")


# SCHEDULER_PERSIST: the crawl's own commands are counted, not the deletion of its
# queue and fingerprints at the close (a backend with many small keys pays a SCAN and a
# TYPE per key there, once a crawl, not once a page).
SR_SCHEDULER = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}
FRONTIER = {
    "SCHEDULER": "scrapy_dedup_suite.frontier.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_dedup_suite.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}


def scheduler_rows(backends: list[str], pages: int) -> list[tuple[str, dict]]:
    """The rows with the queue in Redis (``--schedulers``)."""
    rows: list[tuple[str, dict]] = [("sr scheduler", SR_SCHEDULER)]
    for backend in backends:
        ours = {**our_backend(backend), "DEDUP_BLOOM_CAPACITY": max(10_000, 2 * pages)}
        batched = {**ours, "SPIDER_MIDDLEWARES": MIDDLEWARE}
        rows.append(
            (
                f"sr scheduler, {backend} b.",
                {**SR_SCHEDULER, **batched, "DUPEFILTER_CLASS": FRONTIER["DUPEFILTER_CLASS"]},
            )
        )
        rows.append((f"frontier {backend}", {**FRONTIER, **ours}))
        rows.append((f"frontier {backend} b.", {**FRONTIER, **batched}))
    return rows


class Monitor:
    """Counts the commands clients send to a server while it is open, by name
    (MONITOR; the commands scripts run, and this counter's own, left out)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.names: Counter[str] = Counter()
        self._stop = threading.Event()
        self._ready = threading.Event()

    @property
    def count(self) -> int:
        """Every command counted."""
        return sum(self.names.values())

    def _watch(self) -> None:
        client = redis.Redis(port=self.port)
        with client.monitor() as monitor:
            self._ready.set()
            for command in monitor.listen():
                text = command["command"]
                if self._stop.is_set() and "bench-monitor-end" in text:
                    break
                if command.get("client_type") != "lua":
                    self.names[text.split(" ", 1)[0].upper()] += 1

    def __enter__(self) -> Monitor:
        # The client that ends it connects before: its handshake is not counted.
        self._end = redis.Redis(port=self.port)
        self._end.ping()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("MONITOR did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._end.echo("bench-monitor-end")
        self._thread.join(30)


def run_crawl(site: str, settings: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stats.json"
        args = {"site": site, "settings": settings, "out": str(out)}
        proc = subprocess.run(
            [sys.executable, "-m", "bench.crawl", "--child", json.dumps(args)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"crawl failed: {proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def child(args: dict) -> None:
    """One crawl, in this process: stats to args["out"]."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    class LinkSpider(scrapy.Spider):
        name = "bench"

        async def start(self):
            yield scrapy.Request(f"{args['site']}/page/0")

        def parse(self, response):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, self.parse)

    settings = {
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        **args["settings"],
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(LinkSpider)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    Path(args["out"]).write_text(
        json.dumps({k: v for k, v in stats.items() if isinstance(v, (int, float, str))})
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crawl", description=__doc__)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--links", type=int, default=50)
    parser.add_argument("--latency", default="0,0.5,1", help="ms added per round trip, listed")
    parser.add_argument(
        "--backends",
        default="bloom",
        help="our backends, listed (set, bloom, compact, compact+growing: nothing sized...)",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="CONCURRENT_REQUESTS")
    parser.add_argument("--server", help="redis-server binary (default: PATH, else embedded)")
    parser.add_argument(
        "--schedulers", action="store_true", help="also the rows with the queue in Redis"
    )
    parser.add_argument(
        "--only-schedulers",
        action="store_true",
        help="only memory and the rows with the queue in Redis (and the frontier per request)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds per latency (medians of their ratios)"
    )
    parser.add_argument("--rows", help="only the rows whose name contains one of these, listed")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        child(json.loads(opts.child))
        return 0
    if opts.pages < 2 or opts.links < 1:
        parser.error("--pages must be at least 2 and --links at least 1")
    if opts.repeat < 1:
        parser.error(f"--repeat must be at least 1; got {opts.repeat}")
    try:
        latencies = [float(x) for x in opts.latency.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--latency must list numbers of ms, e.g. 0,0.5,1; got {opts.latency!r}")
    backends = [b.strip() for b in opts.backends.split(",") if b.strip()]
    for backend in backends:
        try:
            our_backend(backend)
        except ValueError as exc:
            parser.error(f"--backends: {exc}")
    binary = opts.server or shutil.which("redis-server") or server_binary()
    print(f"{opts.pages:,} pages x {opts.links} links, CONCURRENT_REQUESTS={opts.concurrency}")
    schedulers = "only" if opts.only_schedulers else opts.schedulers
    only = [w.strip() for w in opts.rows.split(",") if w.strip()] if opts.rows else None
    rows = measure(
        opts.pages,
        opts.links,
        latencies,
        backends,
        opts.concurrency,
        binary,
        schedulers,
        repeat=opts.repeat,
        only=only,
    )
    print(f"\n{'row':26s} latency    PING  pages/s  x memory  x scrapy-redis  calls/page")
    summary = summarise(rows)
    for name, latency, ping, rate, used, ratio, spread in summary:
        ref = next((s[3] for s in summary if s[0] == "scrapy-redis" and s[1] == latency), 0.0)
        ref = ref or next(
            (s[3] for s in summary if s[0] == "sr scheduler" and s[1] == latency), 0.0
        )
        versus = f"{rate / ref:13.2f}x" if ref and name != "memory" else " " * 14
        per_page = f"{used / opts.pages:10.2f}" if name != "memory" else " " * 10
        ranged = f"  ({spread[0]:.2f}-{spread[1]:.2f}x)" if opts.repeat > 1 else ""
        print(
            f"{name:26s} {latency:5.1f} ms {ping:5.2f} {rate:8.1f} {ratio:8.2f}x "
            f"{versus} {per_page}{ranged if name != 'memory' else ''}"
        )
    return 0


#: One crawl's figures: row name, latency added (ms), PING measured (ms), pages/s, calls,
#: and pages/s over the ``memory`` crawl of its round.
Row = tuple[str, float, float, float, int, float]
#: A row over its rounds: name, latency, PING, median pages/s, calls, median ratio to
#: ``memory`` and the (lowest, highest) ratio.
Summary = tuple[str, float, float, float, int, float, tuple[float, float]]


def summarise(rows: list[Row]) -> list[Summary]:
    """Each (row, latency) over its rounds, in the order first crawled."""
    out: list[Summary] = []
    for name, latency in dict.fromkeys((r[0], r[1]) for r in rows):
        runs = [r for r in rows if r[0] == name and r[1] == latency]
        ratios = [r[5] for r in runs]
        out.append(
            (
                name,
                latency,
                statistics.median(r[2] for r in runs),
                statistics.median(r[3] for r in runs),
                runs[0][4],
                statistics.median(ratios),
                (min(ratios), max(ratios)),
            )
        )
    return out


def measure(
    pages: int,
    links: int,
    latencies: list[float],
    backends: list[str],
    concurrency: int,
    binary: str,
    schedulers: bool | str = False,
    repeat: int = 1,
    only: list[str] | None = None,
) -> list[Row]:
    """Every row's crawl, printing each as it ends; before each latency's rows,
    ``memory`` (on no Redis), the reference of those rows; ``repeat`` rounds of them
    per latency; ``only``: the rows whose name contains one of these words."""
    site = Site(pages, links)
    base = {"CONCURRENT_REQUESTS": concurrency}
    rows: list[Row] = []

    def record(name: str, latency: float, ping: float, stats: dict, used: int) -> None:
        crawled = stats.get("downloader/response_status_count/200", 0)
        if crawled != pages:
            raise RuntimeError(f"{name}: crawled {crawled} pages of {pages}")
        rate = crawled / stats["elapsed_time_seconds"]
        ceiling = (
            rate if name == "memory" else next(r[3] for r in reversed(rows) if r[0] == "memory")
        )
        rows.append((name, latency, ping, rate, used, rate / ceiling))
        print(
            f"  {name:26s} {latency:4.1f} ms (PING {ping:5.2f} ms) {rate:7.1f} pages/s "
            f"({rate / ceiling:.2f}x memory)",
            flush=True,
        )

    with EmbeddedRedis(binary=binary) as server:
        direct = redis.Redis(port=server.port)
        for latency in latencies:
            proxy = None
            port, ping = server.port, ping_ms(server.port)
            if latency > 0:
                proxy, ping = proxy_for(server.port, latency)
                port = proxy.port
            url = f"redis://127.0.0.1:{port}/0"
            configs = [
                ("scrapy-redis", {"DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter"}),
            ]
            for backend in backends:
                ours = {
                    "DUPEFILTER_CLASS": "scrapy_dedup_suite.dupefilter.RFPDupeFilter",
                    **our_backend(backend),
                    "DEDUP_BLOOM_CAPACITY": max(10_000, 2 * pages),
                }
                configs.append((backend, ours))
                configs.append((f"{backend} batched", {**ours, "SPIDER_MIDDLEWARES": MIDDLEWARE}))
            queued = scheduler_rows(backends, pages) if schedulers else []
            if schedulers == "only":
                configs = []
            chosen = [
                (name, settings)
                for name, settings in configs + queued
                if only is None or any(word in name for word in only)
            ]
            for _ in range(repeat):
                record("memory", latency, 0.0, run_crawl(site.url, base), 0)
                for name, settings in chosen:
                    direct.flushall()
                    direct.config_resetstat()
                    stats = run_crawl(site.url, {**base, "REDIS_URL": url, **settings})
                    used = calls(direct)
                    if (name, settings) in queued:
                        counted = [r[4] for r in rows if r[0] == name]
                        if counted:  # counted once, at the first latency's first round
                            used = counted[0]
                        else:
                            direct.flushall()
                            with Monitor(server.port) as sent:
                                run_crawl(site.url, {**base, "REDIS_URL": url, **settings})
                            used = sent.count
                    record(name, latency, ping, stats, used)
            if proxy is not None:
                proxy.stop()
        direct.close()
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
