"""A crawl a person stops by hand, as scrapy-redis users do: Ctrl-C (or SIGTERM) twice
forces Scrapy's unclean shutdown, which stops the reactor without closing the spider.
The process must then end at once whatever this package's threads were doing, and the
frontier must lose nothing by it: the leases the stopped worker held come back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .helpers import ROOT, SCHEDULERS, crawl
from .servers import Site, poll_until

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

#: The settings of a project set up as scrapy-redis's README says, with the add-on.
SCRAPY_REDIS_PROJECT = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
    "ADDONS": {"scrapy_dedup_suite.Addon": 300},
    "DEDUP_BACKEND": "compact",
    "DEDUP_COMPACT_CAPACITY": 5_000,
}
#: Pages served before every later request is held (the batch pool and the lease
#: thread have worked by then).
SERVED_FIRST = 20


def start_crawl(site: Site, settings: dict, log: Path) -> subprocess.Popen[bytes]:
    args = {"start_url": f"{site.url}/page/0", "settings": settings, "out": str(log) + ".json"}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.crawl", json.dumps(args)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("frontier", [True, False], ids=["frontier", "scrapy-redis-scheduler"])
def test_a_second_signal_ends_the_crawl_at_once_and_the_frontier_loses_nothing(
    tmp_path, redis_url, server, signum, frontier
):
    site = Site(pages=200, links=10)
    held, release = threading.Event(), threading.Event()

    def on_hit(page: int) -> None:
        if site.hits >= SERVED_FIRST:
            held.set()
            release.wait(120)  # (until the test releases the site)

    site.on_hit = on_hit
    site.start()
    settings = {
        **SCRAPY_REDIS_PROJECT,
        "REDIS_URL": redis_url,
        "DEDUP_FRONTIER": frontier,
        "FRONTIER_LEASE": 3,
        "DOWNLOAD_TIMEOUT": 100,
    }
    log = tmp_path / "stopped.log"
    proc = start_crawl(site, settings, log)
    try:
        poll_until(held.is_set, timeout=120)
        proc.send_signal(signum)
        poll_until(lambda: b"shutting down gracefully" in log.read_bytes(), timeout=60)
        proc.send_signal(signum)
        # A deadline, not a margin: before the fix the process never ended.
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the crawl still ran 60 s after the second signal:\n{log.read_text()}")
        assert b"forcing unclean shutdown" in log.read_bytes()
        release.set()
        if not frontier:
            return  # (scrapy-redis's queue pops: what was in flight is its loss)
        # The same crawl resumed (the stopped worker's leases end after FRONTIER_LEASE):
        # every page is downloaded, as in a crawl never stopped.
        site.on_hit = None
        crawl(tmp_path, site, {**settings, "SCHEDULER": SCHEDULERS["frontier"]}, "resumed")
        assert site.served == set(range(site.pages))
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        site.stop()
