"""DedupMetrics (issue 56 item 3): the crawl's figures as Prometheus metrics, served and
pushed, read from real servers; names, labels and values checked against the crawl's
stats and the queue's keys, and the Grafana dashboard against what a crawl exports."""

from __future__ import annotations

import base64
import json
import logging
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
import redis

pytest.importorskip("prometheus_client", reason="the [metrics] extra (prometheus-client)")
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from scrapy_dedup_suite.embedded import free_port
from scrapy_dedup_suite.frontier.scheduler import Scheduler
from scrapy_dedup_suite.metrics import DedupMetrics

from .helpers import ROOT, settings_for
from .servers import Site, tree_links
from .test_frontier_crawl import crawl

ON_CLUSTER = True

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"


class MetricsSpider(Spider):
    name = "metered"

    def parse(self, response: Any) -> None:
        pass


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def exported(text: str) -> set[str]:
    """The names an exposition declares (``_total`` for counters), with or without
    samples: a family of counts by kind is there before its first count."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        names |= {s.name for s in family.samples}
    return names


def value(found: dict, name: str, **labels: str) -> float:
    """The one sample named ``name`` whose labels include ``labels``."""
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= set(ls)]
    assert len(hits) == 1, (name, labels, [k for k in found if k[0] == name])
    return hits[0]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        return str(answer.read().decode())


def metered(redis_settings: dict, **settings: Any) -> tuple[Scheduler, DedupMetrics]:
    """A frontier scheduler opened on the server under test, as the engine holds it, and
    the metrics extension of its crawler, opened (served on a free port)."""
    crawler = get_crawler(
        MetricsSpider,
        {**redis_settings, "DEDUP_METRICS_PORT": 0, "DEDUP_BACKEND": "compact", **settings},
    )
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(inprogress=set()))
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(MetricsSpider())
    crawler.engine._slot.scheduler = scheduler
    ext = DedupMetrics.from_crawler(crawler)
    ext.spider_opened(MetricsSpider())
    assert ext.httpd is not None
    return scheduler, ext


def commands(server: Any) -> int:
    """Commands the server (every master) ran so far, INFO apart."""
    nodes = server.get_primaries() if hasattr(server, "get_primaries") else [None]
    total = 0
    for node in nodes:
        stats = (
            server.info("commandstats", target_nodes=node) if node else server.info("commandstats")
        )
        total += sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    return total


def test_the_endpoint_shows_the_queue_and_reads_redis_once_an_interval_whatever_its_size(
    server, redis_settings, topology
):
    """A scrape shows each shard's requests waiting, the status and the worker's own
    state; a second scrape inside DEDUP_METRICS_INTERVAL reads nothing from Redis; a
    read costs the same number of commands with 30 or 3,000 requests waiting."""
    scheduler, ext = metered(redis_settings, DEDUP_METRICS_INTERVAL=3600)
    try:
        queue = scheduler.queue
        shards = queue.shards
        for i, shard in enumerate(shards):
            queue.push(shard, [(0, b"\x01 parse  http://x.test/%d/%d" % (i, n)) for n in range(30)])
        before = commands(server)
        found = samples(scrape(ext.httpd.server_address[1]))
        read_cost = commands(server) - before
        for shard in shards:
            got = value(found, "scrapy_dedup_frontier_waiting_requests", shard=shard.queue)
            assert got == 30
        assert value(found, "scrapy_dedup_frontier_status", status="waiting") == 1
        assert value(found, "scrapy_dedup_frontier_status", status="finished") == 0
        assert value(found, "scrapy_dedup_metrics_redis_up") == 1
        worker = queue.worker.rstrip(":")
        assert value(found, "scrapy_dedup_frontier_in_flight_requests", worker=worker) == 0
        assert read_cost > 0
        for i, shard in enumerate(shards):  # a hundred times more: the same cost
            queue.push(
                shard, [(0, b"\x01 parse  http://y.test/%d/%d" % (i, n)) for n in range(2970)]
            )
        before = commands(server)
        cached = samples(scrape(ext.httpd.server_address[1]))
        assert commands(server) == before  # inside the interval: no read
        assert value(cached, "scrapy_dedup_frontier_waiting_requests", shard=shards[0].queue) == 30
        ext._queue_at = float("-inf")  # (the interval over)
        before = commands(server)
        fresh = samples(scrape(ext.httpd.server_address[1]))
        assert commands(server) - before == read_cost
        assert value(fresh, "scrapy_dedup_frontier_waiting_requests", shard=shards[0].queue) == 3000
    finally:
        ext.spider_closed(MetricsSpider())
        scheduler.close("finished")
    with pytest.raises(OSError):  # closed with the spider
        scrape(ext.httpd.server_address[1] if ext.httpd else free_port())


@pytest.mark.single_server
def test_the_stats_are_counters_and_gauges_named_as_prometheus_names_them(server, redis_settings):
    """Stats added to are counters (``_total``), set ones gauges in base units; stats
    by reason or kind are one family with that label; Scrapy's duplicates are left out."""
    scheduler, ext = metered(redis_settings)
    try:
        stats = scheduler.crawler.stats
        stats.set_value("dedup/added", 7)
        stats.set_value("dedup/filtered", 3)
        stats.set_value("dupefilter/filtered", 3)
        stats.set_value("dedup/errors", 2)
        stats.set_value("dedup/errors/ConnectionError", 2)
        stats.set_value("dedup/failed/http_503", 1)
        stats.set_value("dedup/janitor/slowest_call_ms", 250)
        stats.set_value("item_scraped_count", 4)
        text = scrape(ext.httpd.server_address[1])
        found = samples(text)
        assert value(found, "scrapy_dedup_added_total", spider="metered") == 7
        assert value(found, "scrapy_dedup_filtered_total") == 3
        assert value(found, "scrapy_dedup_errors_total") == 2
        assert value(found, "scrapy_dedup_errors_by_kind_total", kind="ConnectionError") == 2
        assert value(found, "scrapy_dedup_failed_by_reason_total", reason="http_503") == 1
        assert value(found, "scrapy_dedup_janitor_slowest_call_seconds") == 0.25
        assert value(found, "scrapy_items_scraped_total") == 4
        assert "dupefilter_filtered" not in text
        names = {name for name, _ in found}
        assert all(re.fullmatch(r"[a-z_]+", name) for name in names), names
    finally:
        ext.spider_closed(MetricsSpider())
        scheduler.close("finished")


@pytest.mark.single_server
def test_redis_gone_is_one_warning_and_a_gauge_never_a_failed_scrape(
    server, redis_settings, caplog
):
    scheduler, ext = metered(redis_settings)
    queue = scheduler.queue
    live = queue.server
    try:
        queue.server = redis.Redis(port=free_port(), socket_connect_timeout=1)
        caplog.set_level(logging.WARNING)
        for _ in range(3):
            ext._queue_at = float("-inf")
            found = samples(scrape(ext.httpd.server_address[1]))
            assert value(found, "scrapy_dedup_metrics_redis_up") == 0
        assert value(found, "scrapy_dedup_metrics_redis_read_errors_total") == 3
        assert not [k for k in found if k[0] == "scrapy_dedup_frontier_waiting_requests"]
        said = [
            r.getMessage() for r in caplog.records if "Metrics could not read" in r.getMessage()
        ]
        assert len(said) == 1 and "ConnectionError" in said[0], said
        assert "Traceback" not in caplog.text
    finally:
        queue.server = live
        ext.spider_closed(MetricsSpider())
        scheduler.close("finished")


@pytest.mark.single_server
def a_held_port_with_a_free_next() -> tuple[socket.socket, int]:
    """A listening socket on a port whose next port is free, both below the system's
    ephemeral range, so that no connection another test opens can take the next port
    between this check and the extension's bind (it did, once in CI, with port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    for port in range(max(ephemeral_low - 8000, 10000), ephemeral_low - 1, 7):
        taken = socket.socket()
        try:
            taken.bind(("127.0.0.1", port))
            with socket.socket() as after:
                after.bind(("127.0.0.1", port + 1))
        except OSError:
            taken.close()
            continue
        taken.listen()
        return taken, port
    raise AssertionError("no two consecutive free ports below the ephemeral range")


def test_a_busy_port_takes_the_next_of_the_range_and_none_free_is_one_error(
    server, redis_settings, caplog
):
    taken, port = a_held_port_with_a_free_next()
    try:
        scheduler, ext = metered(redis_settings, DEDUP_METRICS_PORT=[port, port + 1])
        try:
            assert ext.httpd is not None and ext.httpd.server_address[1] == port + 1
        finally:
            ext.spider_closed(MetricsSpider())
            scheduler.close("finished")
        caplog.set_level(logging.ERROR)
        crawler = get_crawler(MetricsSpider, {**redis_settings, "DEDUP_METRICS_PORT": port})
        crawler.engine = SimpleNamespace(_slot=None)  # (Scrapy's default scheduler's)
        alone = DedupMetrics.from_crawler(crawler)
        alone.spider_opened(MetricsSpider())  # the crawl goes on
        assert alone.httpd is None
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and f"port {port} on 127.0.0.1" in errors[0], errors
        assert "set DEDUP_METRICS_PORT to a free port" in errors[0]
        alone.spider_closed(MetricsSpider())
    finally:
        taken.close()


def test_off_unless_asked_and_a_missing_client_library_is_one_error(monkeypatch, caplog):
    with pytest.raises(NotConfigured):
        DedupMetrics.from_crawler(get_crawler(MetricsSpider, {}))
    monkeypatch.setitem(__import__("sys").modules, "prometheus_client", None)
    caplog.set_level(logging.ERROR)
    with pytest.raises(NotConfigured):
        DedupMetrics.from_crawler(get_crawler(MetricsSpider, {"DEDUP_METRICS_PORT": 9410}))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "pip install 'scrapy-dedup-suite[metrics]'" in line


def test_a_port_that_is_not_one_is_refused_in_one_line():
    from scrapy_dedup_suite.exceptions import DedupConfigError
    from scrapy_dedup_suite.settings.table import read

    assert read({"DEDUP_METRICS_PORT": "9410,9420"}, "DEDUP_METRICS_PORT") == (9410, 9420)
    assert read({"DEDUP_METRICS_PORT": [9410, 9420]}, "DEDUP_METRICS_PORT") == (9410, 9420)
    for bad in ("http", 70000, [9420, 9410], [1, 2, 3]):
        with pytest.raises(DedupConfigError, match="DEDUP_METRICS_PORT must be a port"):
            read({"DEDUP_METRICS_PORT": bad}, "DEDUP_METRICS_PORT")


class Gateway:
    """A Pushgateway's push API, as far as a test needs it: each PUT or POST kept."""

    def __init__(self) -> None:
        pushes = self.pushes = []

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                pushes.append((self.path, body.decode()))
                self.send_response(200)
                self.end_headers()

            do_POST = do_PUT

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    g = Gateway()
    yield g
    g.stop()


@pytest.fixture(scope="module")
def tree() -> Iterator[Site]:
    site = Site(pages=120, links=4, linker=tree_links).start()
    yield site
    site.stop()


def test_a_crawl_pushes_figures_that_match_its_stats_and_the_dashboard_names_them(
    tmp_path, tree, redis_settings, server, gateway, topology
):
    """A real frontier crawl with the add-on and DEDUP_METRICS_PUSHGATEWAY: its last
    push (at the close) carries the crawl's own counts, grouped by spider and worker;
    every metric the Grafana dashboard queries is among those it pushed."""
    settings = settings_for(
        redis_settings, "compact", "frontier", DEDUP_METRICS_PUSHGATEWAY=gateway.url
    )
    settings["ADDONS"] = {"scrapy_dedup_suite.Addon": 0}
    result = crawl(tmp_path, tree, settings, "metered")
    assert sorted(result["pages"]) == list(range(tree.pages))
    stats = result["stats"]
    assert gateway.pushes, result["log"][-3000:]
    path, body = gateway.pushes[-1]
    # (a worker's name holds '/': the push API takes it base64-encoded)
    grouped = re.fullmatch(r"/metrics/job/scrapy/spider/cases/worker@base64/([^/]+)", path)
    assert grouped, path
    found = samples(body)
    assert value(found, "scrapy_dedup_added_total") == stats["dedup/added"]
    assert value(found, "scrapy_dedup_frontier_leased_total") == stats["frontier/leased"]
    assert value(found, "scrapy_dedup_frontier_acknowledged_total") == tree.pages
    assert value(found, "scrapy_dedup_frontier_status", status="finished") == 1
    assert value(found, "scrapy_dedup_frontier_acks_waiting") == 0
    worker = {dict(ls)["worker"] for (n, ls) in found if n == "scrapy_dedup_added_total"}
    assert len(worker) == 1
    assert base64.urlsafe_b64decode(grouped[1] + "==").decode() == worker.pop()
    said = [line for line in result["log"].splitlines() if "metrics" in line]
    assert not [line for line in said if "ERROR" in line or "WARNING" in line], said
    pushed = exported(body)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"]]
    queried = {name for expr in exprs for name in re.findall(r"\bscrapy_[a-z_]+", expr)}
    assert queried and not queried - pushed, sorted(queried - pushed)
