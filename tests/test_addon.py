"""The add-on: ``ADDONS = {"scrapy_dedup_suite.Addon": 300}`` alone turns the package on
(its dupefilter, the batch path, the extensions the backend needs); what a project sets
itself wins, and the crawl's log says what the add-on set and what it kept."""

from __future__ import annotations

import re
from typing import Any

import pytest
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from scrapy_dedup_suite.addon import Addon
from scrapy_dedup_suite.dedup.crawl_checks import REPLACED_DUPEFILTERS
from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.failed import FailedPagesMiddleware
from scrapy_dedup_suite.janitor import JanitorExtension
from scrapy_dedup_suite.middleware import BatchDedupMiddleware
from scrapy_dedup_suite.summary import DedupSummary

from .helpers import SCHEDULERS, run_script

ADDON = {"scrapy_dedup_suite.Addon": 300}


def dedup_calls(server: Any) -> int:
    """Script calls so far: the bloom backend's, a batch's or a request's own."""
    return int(server.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def addon_crawl(tmp_path, site, redis_url: str, name: str, **settings: Any) -> dict:
    """A crawl of a project whose settings name the add-on and nothing else of ours."""
    args = {
        "start_url": f"{site.url}/page/0",
        "settings": {"REDIS_URL": redis_url, "ADDONS": ADDON, **settings},
        "unset": [] if "DUPEFILTER_CLASS" in settings else ["DUPEFILTER_CLASS"],
    }
    return run_script("tests.crawl", args, tmp_path / f"{name}.json")


def configured(**settings: Any) -> Settings:
    """The settings a crawler has once its add-ons ran (no crawl)."""
    crawler = get_crawler(settings_dict={"ADDONS": ADDON, **settings})
    crawler._apply_settings()
    return crawler.settings


@pytest.mark.subprocess
def test_a_crawl_with_the_addon_alone_batches_each_page(tmp_path, site, redis_url, server):
    before = dedup_calls(server)
    result = addon_crawl(tmp_path, site, redis_url, "addon", DEDUP_BACKEND="bloom")
    calls = dedup_calls(server) - before
    stats = result["stats"]
    assert stats["dedup/added"] == site.pages
    assert stats["dedup/filtered"] == site.offered() - site.pages
    # One call per page's links (and the start request's own), not one per link.
    assert stats["dedup/batches"] == site.pages
    assert calls <= site.pages + 10 < site.offered() / 5  # (+ the filter's creation)
    assert "scrapy_dedup_suite add-on set DUPEFILTER_CLASS = " in result["log"]
    assert "SPIDER_MIDDLEWARES[BatchDedupMiddleware] = 50" in result["log"]
    assert "DOWNLOADER_MIDDLEWARES[FailedPagesMiddleware] = 540" in result["log"]
    assert "dedup/redis_memory_bytes" in stats  # the summary extension ran


@pytest.mark.subprocess
def test_what_the_project_set_wins_and_the_log_says_so(tmp_path, site, redis_url, server):
    unbatched = {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": None}
    before = dedup_calls(server)
    result = addon_crawl(
        tmp_path, site, redis_url, "kept", DEDUP_BACKEND="bloom", SPIDER_MIDDLEWARES=unbatched
    )
    calls = dedup_calls(server) - before
    assert "dedup/batches" not in result["stats"]
    assert calls >= site.offered()  # every link checked on its own
    assert "kept the project's SPIDER_MIDDLEWARES[BatchDedupMiddleware] = None" in result["log"]

    # A project with a dupefilter of its own keeps it: the add-on sets nothing, and says
    # which of the package's settings it gave are therefore ignored.
    own = addon_crawl(
        tmp_path,
        site,
        redis_url,
        "own",
        DEDUP_BACKEND="compact",
        DUPEFILTER_CLASS=OWN_DUPEFILTER,
    )
    assert "dedup/added" not in own["stats"]
    assert own["stats"]["downloader/response_count"] == site.pages
    said = next(line for line in own["log"].splitlines() if "is the project's own" in line)
    assert f"DUPEFILTER_CLASS = {OWN_DUPEFILTER!r}" in said
    assert "(ignored: DEDUP_BACKEND)" in said


#: A dupefilter class of a project's own (not Scrapy's, not scrapy-redis's).
OWN_DUPEFILTER = "tests.crawl.OwnDupeFilter"

#: The settings of a project made as scrapy-redis's README says, plus the add-on's
#: quick start.
SCRAPY_REDIS_README = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
    "DEDUP_BACKEND": "compact",
    "DEDUP_FRONTIER": True,
}


def project(**settings: Any) -> Settings:
    """The settings a crawler has once its add-ons ran, for a project that set
    ``settings`` in its settings.py (no crawl)."""
    return configured(**settings)


@pytest.mark.subprocess
def test_a_scrapy_redis_project_gets_the_frontier_and_the_backend_it_chose(
    tmp_path, site, redis_url, server
):
    result = addon_crawl(tmp_path, site, redis_url, "sr", **SCRAPY_REDIS_README)
    stats, log = result["stats"], result["log"]
    assert stats["dedup/backend"] == "compact"
    assert stats["frontier/enqueued"] == site.pages  # the frontier's queue, not scrapy-redis's
    assert "Frontier: 1 shard(s) at" in log
    assert stats["downloader/response_count"] == site.pages
    # The frontier batches what the engine hands it by itself (docs/stats.md): every
    # request offered, in batches of many (the middleware passes them on, and says so).
    assert stats["dedup/batched"] == site.offered()
    assert stats["dedup/batches"] <= site.pages + 1 < site.offered() / 5
    assert "BatchDedupMiddleware passes requests on: the frontier scheduler" in log
    assert (
        "DUPEFILTER_CLASS = 'scrapy_dedup_suite.dupefilter.RFPDupeFilter' in place of the "
        "project's 'scrapy_redis.dupefilter.RFPDupeFilter'" in log
    )


@pytest.mark.parametrize("dupefilter", [None, *REPLACED_DUPEFILTERS])
def test_scrapy_s_and_scrapy_redis_s_dupefilters_are_replaced(dupefilter):
    settings = project(**({"DUPEFILTER_CLASS": dupefilter} if dupefilter else {}))
    assert settings["DUPEFILTER_CLASS"] == "scrapy_dedup_suite.dupefilter.RFPDupeFilter"
    assert settings.getdict("SPIDER_MIDDLEWARES").get(BatchDedupMiddleware) == 50


@pytest.mark.parametrize("dupefilter", [None, OWN_DUPEFILTER])
@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("DEDUP_BACKEND", "compcat", "Unknown DEDUP_BACKEND 'compcat'"),
        ("DEDUP_FRONTIER", "maybe", "DEDUP_FRONTIER must be True or False, got 'maybe'"),
        ("FRONTIER_LEASE", "abc", "FRONTIER_LEASE must be a number of seconds > 0"),
        ("FRONTIER_LEASE", "-5", "FRONTIER_LEASE must be a number of seconds > 0"),
        ("FRONTIER_LEASE", "0", "FRONTIER_LEASE must be a number of seconds > 0"),
        ("FRONTIER_LEASE", "60s", "got '60s'"),
        ("FRONTIER_LEASE", "nan", "got 'nan'"),
        ("FRONTIER_LEASE", "1e9", "at most 86,400, got '1e9'"),
        ("FRONTIER_PREFETCH", "-1", "FRONTIER_PREFETCH must be a whole number from 0 to 10000"),
        ("FRONTIER_PREFETCH", "abc", "FRONTIER_PREFETCH must be a whole number from 0 to 10000"),
    ],
)
def test_every_setting_of_the_package_is_checked_whatever_the_addon_decides(
    dupefilter, name, value, said
):
    given = {name: value, **({"DUPEFILTER_CLASS": dupefilter} if dupefilter else {})}
    with pytest.raises(DedupConfigError, match=re.escape(said)) as refused:
        project(**given)
    assert "\n" not in str(refused.value)


def test_the_advice_of_a_refusal_is_accepted():
    """What the refusal of FRONTIER_LEASE = 1e9 says to do works."""
    project(FRONTIER_LEASE="86400", DEDUP_FRONTIER=True)


def test_the_frontier_with_a_dupefilter_of_the_project_s_own_is_refused_before_the_crawl():
    with pytest.raises(DedupConfigError, match="The frontier scheduler records and enqueues"):
        project(SCHEDULER=SCHEDULERS["frontier"], DUPEFILTER_CLASS=OWN_DUPEFILTER)


@pytest.mark.parametrize(
    ("backend", "janitor"),
    [("set", False), ("bloom", False), ("hash", True), ("windowed-bloom", True)],
)
def test_the_janitor_where_the_backend_has_expiries(backend, janitor):
    settings = configured(DEDUP_BACKEND=backend)
    assert settings["DUPEFILTER_CLASS"] == "scrapy_dedup_suite.dupefilter.RFPDupeFilter"
    extensions = settings.getdict("EXTENSIONS")
    assert extensions.get(DedupSummary) == 900
    assert (JanitorExtension in extensions) is janitor
    assert settings.getdict("SPIDER_MIDDLEWARES").get(BatchDedupMiddleware) == 50
    assert settings.getdict("DOWNLOADER_MIDDLEWARES").get(FailedPagesMiddleware) == 540


def test_project_orders_and_subclasses_are_kept():
    class MyMiddleware(BatchDedupMiddleware):
        pass

    settings = configured(
        DEDUP_BACKEND="hash",
        SPIDER_MIDDLEWARES={MyMiddleware: 39},
        EXTENSIONS={"scrapy_dedup_suite.janitor.JanitorExtension": None},
    )
    middlewares = settings.getdict("SPIDER_MIDDLEWARES")
    assert middlewares[MyMiddleware] == 39 and BatchDedupMiddleware not in middlewares
    extensions = settings.getdict("EXTENSIONS")
    assert extensions["scrapy_dedup_suite.janitor.JanitorExtension"] is None
    assert JanitorExtension not in extensions


def test_a_misspelt_backend_stops_the_crawl_at_once():
    with pytest.raises(DedupConfigError, match="Unknown DEDUP_BACKEND 'blom'"):
        configured(DEDUP_BACKEND="blom")


def test_the_addon_is_the_package_attribute():
    import scrapy_dedup_suite

    assert scrapy_dedup_suite.Addon is Addon


@pytest.mark.parametrize(
    "scheduler", [None, "scrapy_redis.scheduler.Scheduler", "scrapy.core.scheduler.Scheduler"]
)
def test_dedup_frontier_puts_the_frontier_in_place_of_scrapy_redis_s_scheduler(scheduler, caplog):
    project = {"DEDUP_FRONTIER": True, **({"SCHEDULER": scheduler} if scheduler else {})}
    settings = Settings()
    settings.setdict(project, priority="project")
    with caplog.at_level("INFO", logger="scrapy_dedup_suite.addon"):
        Addon().update_settings(settings)
    assert settings["SCHEDULER"] == "scrapy_dedup_suite.frontier.scheduler.Scheduler"
    assert "(DEDUP_FRONTIER)" in caplog.text


def test_dedup_frontier_keeps_a_scheduler_of_the_project_s_own_and_says_so(caplog):
    settings = Settings()
    settings.setdict({"DEDUP_FRONTIER": True, "SCHEDULER": "myproject.Sched"}, priority="project")
    Addon().update_settings(settings)
    assert settings["SCHEDULER"] == "myproject.Sched"
    assert "DEDUP_FRONTIER is on but SCHEDULER = 'myproject.Sched'" in caplog.text
    plain = Settings({"SCHEDULER": "scrapy_redis.scheduler.Scheduler"})
    Addon().update_settings(plain)
    assert plain["SCHEDULER"] == "scrapy_redis.scheduler.Scheduler"  # not asked: kept
