"""A page whose download failed for good is downloaded by the next run.

Real crawls of a site whose pages 14, 27 and 40 fail during the first run (one drops
the connection, two answer 503, each after RetryMiddleware's retries) and are served
afterwards. The start page is requested with dont_filter, as a re-run requests it, and
links to the three. With FailedPagesMiddleware (DEDUP_FORGET_FAILED, on by default)
the second run downloads exactly the pages the first could not, so every page has been
downloaded, once; with it off, the same two runs leave those pages lost. Within the
first run a failed page is tried once (with its retries), however many pages link to it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from scrapy import Request

from scrapy_dedup_suite.core.fingerprint import scrapy_redis_fingerprint

from .helpers import ROOT, crawl, settings_for
from .servers import Site, poll_until
from .test_forget import forget_command

ON_CLUSTER = True

PAGES, LINKS = 120, 6
#: Pages that page 0 links to (site_links), each failing its own way in the first run.
FAILING = {14: "drop", 27: "503", 40: "503"}
#: How often a failed page is asked for in one run: once and RetryMiddleware's 2 retries.
TRIES = 3
EXACT = ["set", "compact", "hash"]


@pytest.fixture
def failing_site() -> Any:
    site = Site(pages=PAGES, links=LINKS).start()
    assert set(FAILING) <= set(site.linker(0, PAGES, LINKS))
    site.failing = dict(FAILING)
    yield site
    site.stop()


def two_runs(tmp_path, site: Site, settings: dict[str, Any]) -> tuple[dict, set[int], dict]:
    """The first run while FAILING fail, the second once they are served; the pages the
    first run downloaded."""
    first = crawl(tmp_path, site, settings, "first", start_dont_filter=True)
    downloaded_first = set(site.downloads)
    site.failing = {}
    second = crawl(tmp_path, site, settings, "second", start_dont_filter=True)
    return first, downloaded_first, second


def settings_of(redis_settings: dict, backend: str, **extra: Any) -> dict[str, Any]:
    return {
        **settings_for(redis_settings, backend, "scrapy"),
        "DOWNLOADER_MIDDLEWARES": {"scrapy_dedup_suite.failed.FailedPagesMiddleware": 540},
        **extra,
    }


@pytest.mark.parametrize("backend", EXACT)
def test_the_next_run_downloads_the_pages_that_failed(
    tmp_path, server, redis_settings, failing_site, backend
):
    site = failing_site
    first, downloaded_first, second = two_runs(tmp_path, site, settings_of(redis_settings, backend))
    # The first run: every page but the failing ones, each failing one tried once.
    assert not downloaded_first & set(FAILING)
    assert dict(site.failures) == dict.fromkeys(FAILING, TRIES), site.failures
    stats = first["stats"]
    assert stats["dedup/failed"] == len(FAILING)
    assert stats["dedup/failed/http_503"] == 2
    assert stats["dedup/forgotten"] == len(FAILING)
    assert "3 page(s) failed for good in this run; forgot them" in first["log"]
    # The second: exactly what the first could not download (and the start page).
    assert set(site.downloads) == set(range(PAGES))
    assert max(n for page, n in site.downloads.items() if page != 0) == 1, site.downloads
    assert "dedup/failed" not in second["stats"]


@pytest.mark.single_server
def test_without_it_the_pages_that_failed_stay_lost(tmp_path, server, redis_settings, failing_site):
    site = failing_site
    settings = settings_of(redis_settings, "compact", DEDUP_FORGET_FAILED=False)
    first, _, _ = two_runs(tmp_path, site, settings)
    assert first["stats"]["dedup/failed"] == len(FAILING)
    assert "dedup/forgotten" not in first["stats"]
    assert "stay recorded as seen (DEDUP_FORGET_FAILED is off)" in first["log"]
    assert set(range(PAGES)) - set(site.downloads) == set(FAILING)


@pytest.mark.single_server
@pytest.mark.parametrize("scheduler", ["scrapy", "scrapy-redis"])
def test_the_batch_path_and_scrapy_redis_scheduler_forget_too(
    tmp_path, server, redis_settings, failing_site, scheduler
):
    site = failing_site
    settings = {
        **settings_for(redis_settings, "hash", scheduler),
        "ADDONS": {"scrapy_dedup_suite.Addon": 300},  # the batch and failed-pages middlewares
        "SCHEDULER_PERSIST": True,
    }
    first, _, _ = two_runs(tmp_path, site, settings)
    assert first["stats"]["dedup/batched"] > 0
    assert first["stats"]["dedup/forgotten"] == len(FAILING)
    assert set(site.downloads) == set(range(PAGES))


@pytest.mark.single_server
def test_a_bloom_filter_says_its_failed_pages_stay_seen(
    tmp_path, server, redis_settings, failing_site
):
    site = failing_site
    first = crawl(
        tmp_path, site, settings_of(redis_settings, "bloom"), "first", start_dont_filter=True
    )
    assert first["stats"]["dedup/failed"] == len(FAILING)
    assert "3 page(s) failed for good in this run and stay recorded as seen" in first["log"]
    assert "cannot remove a fingerprint" in first["log"]


@pytest.mark.single_server
def test_a_run_killed_before_its_close_leaves_its_failed_pages_to_the_next(
    tmp_path, server, redis_settings, failing_site
):
    """The failed pages are recorded in Redis as they fail: a run killed with SIGKILL
    (no close) leaves them, and the next run forgets them when it opens."""
    site = failing_site
    hold = threading.Event()
    site.on_hit = lambda page: hold.wait(60) if page == 1 else None  # the crawl cannot end
    settings = settings_of(redis_settings, "set")
    args = {"start_url": f"{site.url}/page/0", "settings": settings, "out": str(tmp_path / "k")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.crawl", json.dumps(args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll_until(lambda: server.hlen("site:dupefilter:failed") == len(FAILING), timeout=120)
        proc.kill()
        proc.wait(60)
    finally:
        hold.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not set(site.downloads) & set(FAILING)
    site.failing = {}
    second = crawl(tmp_path, site, settings, "second", start_dont_filter=True)
    assert "Forgot 3 page(s) recorded as failed for good by an earlier run" in second["log"]
    assert set(FAILING) <= set(site.downloads)
    assert server.hlen("site:dupefilter:failed") == 0


@pytest.mark.single_server
def test_the_command_lists_a_bloom_filters_failed_pages_and_forgets_an_exact_ones(
    tmp_path, server, redis_url, redis_settings, failing_site
):
    site = failing_site
    failed_urls = {f"{site.url}/page/{page}" for page in FAILING}
    crawl(tmp_path, site, settings_of(redis_settings, "bloom"), "bloom", start_dont_filter=True)
    listed = forget_command("--spider", "site", "--failed", settings={"REDIS_URL": redis_url,
                            "DEDUP_BACKEND": "bloom"})  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert set(listed.stdout.split()) == failed_urls
    assert "3 page(s) recorded as failed for good" in listed.stderr
    info = subprocess.run(
        [sys.executable, "-m", "scrapy.cmdline", "dedup-info", "--spider", "site",
         f"--set=REDIS_URL={redis_url}"],
        cwd=ROOT / "tests", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "3 page(s) recorded as failed for good (scrapy dedup-forget" in info.stdout, info
    # Handed to a scrapy-redis spider's start URLs (requested with dont_filter), once.
    bloom = {"REDIS_URL": redis_url, "DEDUP_BACKEND": "bloom"}
    server.set("taken", "a string")
    refused = forget_command("--spider", "site", "--failed", "--push", "taken", settings=bloom)
    assert refused.returncode == 1 and "holds a string" in refused.stderr, refused.stderr
    misused = forget_command("--spider", "site", "--push", "site:start_urls", settings=bloom)
    assert misused.returncode == 2 and "goes with --failed" in misused.stderr
    assert not server.exists("site:start_urls")
    pushed = forget_command(
        "--spider", "site", "--failed", "--push", "site:start_urls", settings=bloom
    )
    assert pushed.returncode == 0, pushed.stderr
    assert "pushed 3 page(s)" in pushed.stdout
    messages = [json.loads(m) for m in server.lrange("site:start_urls", 0, -1)]
    assert {m["url"] for m in messages} == failed_urls and len(messages) == 3
    again = forget_command("--spider", "site", "--failed", settings=bloom)
    assert again.stdout.split() == []  # handed over: no longer in the record
    server.delete("taken", "site:start_urls")
    # An exact filter's record, as a run killed before its close leaves it.
    for url in failed_urls:
        fp = scrapy_redis_fingerprint(Request(url))
        server.sadd("site:dupefilter", fp)
        server.hset("site:dupefilter:failed", fp, url)
    done = forget_command("--spider", "site", "--failed", settings={"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert "forgot 3 page(s) recorded as failed for good" in done.stdout
    assert server.scard("site:dupefilter") == 0
    assert not server.exists("site:dupefilter:failed")


@pytest.mark.single_server
def test_with_another_dupefilter_the_middlewares_say_so_and_the_crawl_goes_on(
    tmp_path, server, redis_settings, failing_site
):
    site = failing_site
    settings = {
        **settings_of(redis_settings, "set"),
        "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
        "SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50},
    }
    result = crawl(tmp_path, site, settings, "foreign", start_dont_filter=True)
    for component, without in (
        ("BatchDedupMiddleware", "requests pass through unbatched"),
        ("FailedPagesMiddleware", "failed pages are not forgotten"),
    ):
        said = (
            f"{component} is enabled but the scheduler's dupefilter is RFPDupeFilter, not "
            f"scrapy_dedup_suite.dupefilter.RFPDupeFilter: {without}."
        )
        assert said in result["log"], result["log"][-3000:]
    assert set(range(PAGES)) - set(site.downloads) == set(FAILING)
    assert "dedup/failed" not in result["stats"]
