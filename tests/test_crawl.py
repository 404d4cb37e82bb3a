"""Real Scrapy crawls of a local site, under both schedulers, for every backend."""

from __future__ import annotations

import pytest

from scrapy_dedup_suite.backends import get_backend_class

from .conftest import ROWS
from .helpers import SCHEDULERS, SETTINGS_ROWS, all_keys, crawl, settings_for

ON_CLUSTER = True  # the crawls also run against the three-master cluster


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
@pytest.mark.parametrize("backend", ROWS)
def test_crawl_filters_every_duplicate(
    tmp_path, site, redis_server, redis_settings, server, backend, scheduler
):
    settings = settings_for(
        redis_settings, backend, scheduler, redis_server.url, SCHEDULER_PERSIST=True
    )
    first = crawl(tmp_path, site, settings, "first")
    stats = first["stats"]
    unique = site.pages
    name = get_backend_class(SETTINGS_ROWS[backend]["DEDUP_BACKEND"]).name
    assert first["deprecations"] == []
    assert stats["downloader/response_status_count/200"] == unique
    assert stats["dedup/backend"] == name
    assert stats["dedup/added"] == unique
    assert stats["dedup/filtered"] == site.offered() - unique
    assert stats["dupefilter/filtered"] == site.offered() - unique
    if "bloom" in name:
        assert stats["bloomfilter/filtered"] == site.offered() - unique
    else:
        assert "bloomfilter/filtered" not in stats
    assert "dedup/errors" not in stats
    assert f"Dupefilter: {name} backend" in first["log"]

    # The fingerprints outlive the crawl: a second run finds everything seen.
    second = crawl(tmp_path, site, settings, "second")
    assert "downloader/response_count" not in second["stats"]
    assert second["stats"]["dedup/filtered"] == 1


@pytest.mark.parametrize("backend", ROWS)
def test_scrapy_redis_without_persist_clears_the_filter(
    tmp_path, site, redis_server, redis_settings, server, backend
):
    settings = settings_for(
        redis_settings, backend, "scrapy-redis", redis_server.url, SCHEDULER_PERSIST=False
    )
    server.set("unrelated", "keep")
    stats = crawl(tmp_path, site, settings)["stats"]
    assert stats["dedup/added"] == site.pages
    # scrapy-redis flushes on close: every key of the dupefilter is gone, nothing else.
    assert all_keys(server) == [b"unrelated"]
