"""Real Scrapy crawls of a local site, under both schedulers, for every backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import NAMES, all_keys

ON_CLUSTER = True  # the crawls also run against the three-master cluster

ROOT = Path(__file__).resolve().parent.parent

SCHEDULERS = {
    "scrapy": "scrapy.core.scheduler.Scheduler",
    "scrapy-redis": "scrapy_redis.scheduler.Scheduler",
}


def crawl(
    tmp_path: Path, site, settings: dict, name: str = "run", start_dont_filter: bool = False
) -> dict:
    out = tmp_path / f"{name}.json"
    args = {
        "start_url": f"{site.url}/page/0",
        "settings": settings,
        "out": str(out),
        "start_dont_filter": start_dont_filter,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.crawl", json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    result["log"] = proc.stderr
    return result


def settings_for(
    redis_settings: dict, backend: str, scheduler: str, queue_url: str = "", **extra
) -> dict:
    where = dict(redis_settings)
    if where["DEDUP_REDIS_CLUSTER"] and scheduler == "scrapy-redis":
        # scrapy-redis's queue stays on a single server; the fingerprints go to the cluster.
        where = {**where, "REDIS_URL": queue_url, "DEDUP_REDIS_URL": where["REDIS_URL"]}
    return {
        **where,
        "SCHEDULER": SCHEDULERS[scheduler],
        "DEDUP_BACKEND": backend,
        "DEDUP_BLOOM_CAPACITY": 100_000,
        "DEDUP_HASH_SHARDS": 4,
        "DEDUP_WINDOW_COUNT": 3,
        **extra,
    }


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
@pytest.mark.parametrize("backend", NAMES)
def test_crawl_filters_every_duplicate(
    tmp_path, site, redis_server, redis_settings, server, backend, scheduler
):
    settings = settings_for(
        redis_settings, backend, scheduler, redis_server.url, SCHEDULER_PERSIST=True
    )
    first = crawl(tmp_path, site, settings, "first")
    stats = first["stats"]
    unique = site.pages
    assert first["deprecations"] == []
    assert stats["downloader/response_status_count/200"] == unique
    assert stats["dedup/backend"] == backend
    assert stats["dedup/added"] == unique
    assert stats["dedup/filtered"] == site.offered() - unique
    if backend in ("bloom", "windowed-bloom"):
        assert stats["bloomfilter/filtered"] == site.offered() - unique
    else:
        assert "bloomfilter/filtered" not in stats
    assert "dedup/errors" not in stats
    assert f"Dupefilter: {backend} backend" in first["log"]

    # The fingerprints outlive the crawl: a second run finds everything seen.
    second = crawl(tmp_path, site, settings, "second")
    assert "downloader/response_count" not in second["stats"]
    assert second["stats"]["dedup/filtered"] == 1


@pytest.mark.parametrize("backend", NAMES)
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
