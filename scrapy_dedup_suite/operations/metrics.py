"""``DedupMetrics``: the dupefilter's and the frontier's figures as Prometheus metrics.

Enable with ``DEDUP_METRICS_PORT = 9410`` (served at ``http://127.0.0.1:9410/metrics``;
a range such as ``[9410, 9420]`` for several workers on one host) or
``DEDUP_METRICS_PUSHGATEWAY = "http://host:9091"`` (pushed every
DEDUP_METRICS_INTERVAL and at the close), and ``pip install scrapy-dedup-suite[metrics]``.
The add-on adds the extension when either is set; without the add-on,
``EXTENSIONS = {"scrapy_dedup_suite.metrics.DedupMetrics": 0}``.

What it exposes is in :mod:`.metric_families`. A scrape reads the crawl's stats and
the scheduler's state in memory; the queue (and, with DEDUP_METRICS_FILTER_EVERY, the
filter) is read from Redis in the scrape's thread, never on the reactor, at most once
per DEDUP_METRICS_INTERVAL whatever the number of scrapers: a shard costs three round
trips (``python -m bench.metrics``). A read that fails is one WARNING per kind of
failure and ``scrapy_dedup_metrics_redis_up 0``; the scrape still answers, and the
crawl never sees it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, ClassVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from scrapy import signals
from scrapy.exceptions import NotConfigured

from ..backends import build_backend
from ..dedup.engine_state import engine_scheduler
from ..exceptions import shown_url
from ..frontier.figures import crawl_figures
from ..frontier.frontier_options import retry_wait
from ..frontier.queue import worker_name
from ..frontier.scheduler import Scheduler
from ..server.connection import failure_text
from ..settings.table import read
from .metric_families import (
    filter_families,
    queue_families,
    redis_family,
    stat_families,
    worker_families,
)

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

#: Named by its public path (:mod:`scrapy_dedup_suite.metrics`).
logger = logging.getLogger("scrapy_dedup_suite.metrics")

EXTRA = "pip install 'scrapy-dedup-suite[metrics]'"


def metrics_asked(settings: Any) -> bool:
    """Whether the project asked for metrics: a port to serve them on, or a
    Pushgateway to push them to (the add-on adds the extension then)."""
    return read(settings, "DEDUP_METRICS_PORT") is not None or bool(
        read(settings, "DEDUP_METRICS_PUSHGATEWAY")
    )


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # (a line per scrape: no)
        pass


def serve(app: Any, host: str, ports: tuple[int, int]) -> WSGIServer | None:
    """A server of ``app`` on the first port of ``ports`` free on ``host``, serving
    in a daemon thread; None (said in one ERROR) if none is."""
    low, high = ports
    server_cls: type[WSGIServer] = _Server
    if ":" in host:  # an IPv6 address
        server_cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    refused: OSError | None = None
    for port in range(low, high + 1):
        try:
            httpd = make_server(host, port, app, server_cls, handler_class=_Quiet)
        except OSError as exc:
            refused = exc
            continue
        threading.Thread(target=httpd.serve_forever, name="dedup-metrics", daemon=True).start()
        return httpd
    where = f"port {low}" if low == high else f"ports {low} to {high}"
    logger.error(
        "Metrics not served: %s on %s could not be bound (%s); set DEDUP_METRICS_PORT to a "
        "free port or a wider range such as [%d, %d], or 0 for any free port; the crawl "
        "goes on without them",
        where,
        host,
        refused,
        low,
        high + 10,
    )
    return None


class DedupMetrics:
    """See the module. One per crawler; its collector is registered in a registry of
    its own, so that several crawls in one process do not mix."""

    #: Where projects name it (its code lives in this module).
    public_path: ClassVar[str] = "scrapy_dedup_suite.metrics.DedupMetrics"

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.ports: tuple[int, int] | None = read(settings, "DEDUP_METRICS_PORT")
        self.host: str = read(settings, "DEDUP_METRICS_HOST")
        self.gateway: str | None = read(settings, "DEDUP_METRICS_PUSHGATEWAY")
        self.interval: float = read(settings, "DEDUP_METRICS_INTERVAL")
        self.filter_every: float = read(settings, "DEDUP_METRICS_FILTER_EVERY")
        self.spider = ""
        self.worker = worker_name()
        self.httpd: WSGIServer | None = None
        self._lock = threading.Lock()  # (one read of Redis at a time)
        self._queue_at = self._filter_at = float("-inf")
        self._queue: dict[str, Any] | None = None
        self._filter: tuple[int, float | None, str] | None = None
        self._ok = True
        self._errors = 0
        self._said: set[str] = set()
        self._stop = threading.Event()
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupMetrics:
        if not metrics_asked(crawler.settings):
            raise NotConfigured("neither DEDUP_METRICS_PORT nor DEDUP_METRICS_PUSHGATEWAY is set")
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            logger.error(
                "Metrics not served: DedupMetrics needs the prometheus-client package (%s); "
                "the crawl goes on without them",
                EXTRA,
            )
            raise NotConfigured("prometheus-client is not installed") from None
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    # -- the crawl's life -----------------------------------------------------------

    def spider_opened(self, spider: Spider) -> None:
        from prometheus_client import make_wsgi_app

        self.spider = spider.name
        queue = self._frontier_queue()
        if queue is not None:
            self.worker = queue.worker.rstrip(":")  # (as dedup-info names it)
        if self.ports is not None:
            self.httpd = serve(make_wsgi_app(self.registry), self.host, self.ports)
            if self.httpd is not None:
                logger.info(
                    "Metrics served at http://%s:%d/metrics (worker %s)",
                    self.host,
                    self.httpd.server_address[1],
                    self.worker,
                )
        if self.gateway:
            name = "dedup-metrics-push"
            threading.Thread(target=self._push_every, name=name, daemon=True).start()

    def spider_closed(self, spider: Spider) -> None:
        self._stop.set()
        if self.gateway:
            with self._lock:
                self._queue_at = float("-inf")  # (the queue as the close left it)
            self._push()  # (the last figures, the close's included)
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def _push_every(self) -> None:
        while not self._stop.wait(self.interval):
            self._push()

    def _push(self) -> None:
        from prometheus_client import push_to_gateway

        assert self.gateway is not None
        key = {"spider": self.spider, "worker": self.worker}
        try:
            push_to_gateway(self.gateway, "scrapy", self.registry, grouping_key=key, timeout=10)
        except Exception as exc:  # (the gateway away: said once per kind, never raised)
            where = shown_url(self.gateway)
            self._say("push", exc, f"Metrics not pushed to {where} (the next push tries again)")

    # -- the collector ---------------------------------------------------------------

    def describe(self) -> list[Any]:
        return []  # (registered without a first collect: no Redis call at the start)

    def collect(self) -> Iterator[Any]:
        labels = {"spider": self.spider, "worker": self.worker}
        yield from stat_families(dict(self.crawler.stats.get_stats()), labels)
        scheduler = engine_scheduler(self.crawler)
        if isinstance(scheduler, Scheduler):
            yield from worker_families(scheduler, labels, time.monotonic())
        with self._lock:
            self._read_redis()
            queue, filter_, ok, errors = self._queue, self._filter, self._ok, self._errors
        if queue is not None:
            yield from queue_families(queue, self.spider)
        if filter_ is not None:
            yield from filter_families(filter_[0], filter_[1], self.spider, filter_[2])
        yield from redis_family(ok, errors, self.spider)

    def _read_redis(self) -> None:
        """The queue's figures (and the filter's, when due), if the last read is older
        than the interval; a failure keeps no stale figures and is said once a kind."""
        now = time.monotonic()
        queue = self._frontier_queue()
        try:
            if queue is not None and now - self._queue_at >= self.interval:
                self._queue_at = now
                self._queue = None
                settings = self.crawler.settings
                lease = read(settings, "FRONTIER_LEASE")
                self._queue = crawl_figures(queue, lease, retry_wait(settings))
            if self.filter_every and self.spider and now - self._filter_at >= self.filter_every:
                self._filter_at = now
                self._filter = None
                self._filter = self._filter_figures()
            self._ok = True
        except Exception as exc:
            self._ok = False
            self._errors += 1
            self._say(
                "redis", exc, "Metrics could not read Redis (scrapy_dedup_metrics_redis_up 0)"
            )

    def _frontier_queue(self) -> Any:
        """The frontier scheduler's queue, or None (scrapy-redis's scheduler, or not
        open yet)."""
        scheduler = engine_scheduler(self.crawler)
        return scheduler.queue if isinstance(scheduler, Scheduler) else None

    def _filter_figures(self) -> tuple[int, float | None, str]:
        backend = build_backend(self.crawler.settings, self.spider)
        try:
            info = backend.info()
        finally:
            backend.server.close()
        details = info.details
        count = next(
            (details[k] for k in ("fingerprints", "fields", "estimated_items") if k in details),
            None,
        )
        return info.memory_bytes, count, info.backend

    def _say(self, doing: str, exc: Exception, line: str) -> None:
        """One WARNING per kind of failure of ``doing``, never a traceback."""
        kind = f"{doing} {type(exc).__name__}"
        if kind not in self._said:
            self._said.add(kind)
            logger.warning("%s: %s: %s (said once)", line, type(exc).__name__, failure_text(exc))
