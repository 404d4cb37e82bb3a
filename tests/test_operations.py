"""What an operator or a fault does to the filter mid-crawl loses no page and storms no
site: a key damaged under the crawl, a server out of memory.

Each is a real crawl compared with the untouched crawl: on a tree site (every page has
one inbound link) the untouched crawl downloads every page once, and so must these,
none more than twice; on a site whose pages link to each other many times, a page let
through because Redis could not record it is downloaded once more at the most, not at
every link to it."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import HashBackend, build_backend
from scrapy_dedup_suite.backends.compact_growing import GrowingCompactBackend
from scrapy_dedup_suite.backends.expiry import stored_layout
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.backends.hash_growing import GrowingHashBackend
from scrapy_dedup_suite.operations.migrations.growing_hash_layout import GrowingHashConversion
from scrapy_dedup_suite.operations.migrations.growing_layout import GrowingConversion
from scrapy_dedup_suite.operations.migrations.hash_layout import HashLayoutConversion
from scrapy_dedup_suite.settings.options import CompactOptions, HashOptions

from .helpers import SETTINGS_ROWS, crawl
from .servers import RedisServer, Site, redis_server_binary, site_links, tree_links

PATHS = [pytest.param(False, id="per-request"), pytest.param(True, id="batched")]
BATCHED = {"SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}}

pytestmark = pytest.mark.slow


@pytest.fixture
def own_server() -> Any:
    """A server of the test's own: these tests change its memory limit."""
    s = RedisServer(redis_server_binary()).start()
    yield s
    s.stop()


def settings(url: str, row: str, batched: bool, **extra: Any) -> dict[str, Any]:
    return {
        "REDIS_URL": url,
        **SETTINGS_ROWS[row],
        "SCHEDULER_DUPEFILTER_KEY": "%(spider)s:dupefilter",
        "DEDUP_BLOOM_CAPACITY": 100_000,
        **(BATCHED if batched else {}),
        **extra,
    }


class AtPage:
    """Runs ``action`` once, when the site serves its ``n``-th page (in a server thread)."""

    def __init__(self, n: int, action: Any) -> None:
        self.n = n
        self.action = action
        self.served = 0
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def __call__(self, page: int) -> None:
        with self._lock:
            self.served += 1
            if self.served != self.n:
                return
            try:
                self.action()
            except BaseException as exc:  # seen by the test
                self.error = exc
            self.done.set()


def run(tmp_path: Path, site: Site, hooks: list[AtPage], crawl_settings: dict) -> dict:
    def on_hit(page: int) -> None:
        for hook in hooks:
            hook(page)

    site.on_hit = on_hit
    try:
        result = crawl(tmp_path, site, crawl_settings)
    finally:
        site.stop()
    for hook in hooks:
        assert hook.done.is_set(), f"the crawl ended before page {hook.n} was served"
        if hook.error is not None:
            raise hook.error
    assert "Traceback" not in result["log"], result["log"][-3000:]
    return result


def replace_with_a_list(client: redis.Redis, key: bytes) -> None:
    """``key`` becomes a list, in one transaction: the crawl writes meanwhile (a DEL
    then an RPUSH let its HSET make the bucket again in between: WRONGTYPE here)."""
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        pipe.rpush(key, "not a bucket")
        pipe.execute()


@pytest.mark.parametrize("batched", PATHS)
def test_a_bucket_damaged_mid_crawl_loses_no_page(tmp_path, own_server, batched):
    """A compact bucket replaced by a list while the crawl runs: one ERROR naming it,
    every page downloaded (each request it refuses let through), none more than twice,
    and the key left as it was found."""
    client = redis.Redis(port=own_server.port)
    damaged: list[bytes] = []

    def damage() -> None:
        keys = [  # the buckets, {site:dupefilter:<group>}:<bucket>, not the stamps
            k for k in client.scan_iter(match="{site:dupefilter:*") if not k.endswith(b":meta")
        ]
        key = max(keys, key=client.hlen)  # the bucket most requests have met so far
        replace_with_a_list(client, key)
        damaged.append(key)

    tree = Site(pages=600, links=5, linker=tree_links).start()
    result = run(tmp_path, tree, [AtPage(40, damage)], settings(own_server.url, "compact", batched))
    missing = sorted(set(range(tree.pages)) - set(tree.downloads))
    assert not missing, f"{len(missing)} page(s) lost: {missing[:20]}\n{result['log'][-3000:]}"
    assert max(tree.downloads.values()) <= 2, tree.downloads.most_common(3)
    errors = [line for line in result["log"].splitlines() if "] ERROR:" in line]
    assert len(errors) == 1, errors
    assert damaged[0].decode() in errors[0] and "holds a list" in errors[0], errors[0]
    assert result["stats"]["dedup/errors"] > 0
    assert client.type(damaged[0]) == b"list"  # a key of the wrong type is never deleted


@pytest.mark.parametrize("batched", PATHS)
@pytest.mark.parametrize("row", ["set", "hash", "compact", "bloom", "windowed-bloom"])
def test_full_memory_mid_crawl_storms_no_page(tmp_path, own_server, row, batched):
    """Redis out of memory (noeviction) for part of a crawl of a site whose pages link
    to each other many times: duplicates recorded before are still filtered (reads
    work: no page downloaded before the outage is downloaded again), a page Redis
    cannot record is let through once, and every page is downloaded, none more than
    twice; the untouched crawl downloads each once."""
    client = redis.Redis(port=own_server.port)
    client.config_set("maxmemory-policy", "noeviction")
    site = Site(pages=300, links=10, linker=site_links).start()
    before: set[int] = set()

    def full() -> None:
        before.update(site.downloads)  # recorded when they were scheduled
        client.config_set("maxmemory", 1)

    def back() -> None:
        client.config_set("maxmemory", 0)

    try:
        result = run(
            tmp_path,
            site,
            [AtPage(20, full), AtPage(150, back)],
            settings(own_server.url, row, batched),
        )
    finally:
        back()
    assert set(site.downloads) == set(range(site.pages))
    assert max(site.downloads.values()) <= 2, site.downloads.most_common(5)
    assert before and all(site.downloads[page] == 1 for page in before)
    stats = result["stats"]
    assert stats["dedup/errors"] > 0  # the outage happened, and was counted
    assert stats["dedup/unrecorded_filtered"] > 0  # ... and pages passed once, not more


@pytest.mark.parametrize("batched", PATHS)
def test_converting_a_hash_filter_under_a_live_crawl_loses_no_page(tmp_path, own_server, batched):
    """convert-hash-layout run while a crawler records into the filter's layout 1: the
    worker, refused by the switched stamps, opens the filter again in buckets, says so,
    and goes on; every page is downloaded, none more than twice, and what it recorded
    after the conversion is in the buckets."""
    key = "site:h"
    hash_settings = {
        "DEDUP_BACKEND": "hash",
        "DEDUP_COMPACT_CAPACITY": 20_000,
        "DEDUP_HASH_SHARDS": 4,
        "SCHEDULER_DUPEFILTER_KEY": key,
    }
    client = redis.Redis(port=own_server.port)
    HashBackend(client, key, shards=4).open()  # a filter made before the buckets

    def convert() -> None:
        HashLayoutConversion(client, key, HashOptions.from_settings(Settings(hash_settings))).run()

    tree = Site(pages=600, links=5, linker=tree_links).start()
    result = run(
        tmp_path,
        tree,
        [AtPage(60, convert)],
        {**settings(own_server.url, "hash", batched), **hash_settings},
    )
    missing = sorted(set(range(tree.pages)) - set(tree.downloads))
    assert not missing, f"{len(missing)} page(s) lost: {missing[:20]}\n{result['log'][-3000:]}"
    assert max(tree.downloads.values()) <= 2, tree.downloads.most_common(3)
    assert result["stats"]["dedup/reopened"] == 1
    reopened = [line for line in result["log"].splitlines() if "converted under" in line]
    assert len(reopened) == 1 and "HashBucketsBackend" in reopened[0], reopened
    assert stored_layout(client, key, 4) == "buckets"
    buckets = build_backend(Settings(hash_settings), "site", server=client, key=key)
    assert isinstance(buckets, HashBucketsBackend)
    buckets.open()
    # Every page's request was recorded in the shards (then copied) or in the buckets.
    assert buckets.count() >= tree.pages - 60


#: Per backend: its conversion into buckets that split, its options, the growing class.
GROWING = {
    "compact": (GrowingConversion, CompactOptions, GrowingCompactBackend),
    "hash": (GrowingHashConversion, HashOptions, GrowingHashBackend),
}


@pytest.mark.parametrize("batched", PATHS)
@pytest.mark.parametrize("backend", list(GROWING))
def test_converting_a_sized_filter_into_buckets_that_split_under_a_live_crawl_loses_no_page(
    tmp_path, own_server, batched, backend
):
    """convert-to-growing run while a crawler records into the sized buckets (compact's,
    or hash's with the janitor's expiry): the worker, refused by the switched stamps,
    opens the filter again growing (its settings still name a capacity), says so, and
    goes on; every page is downloaded, none more than twice, and every page's request is
    in the growing filter."""
    key = "site:c"
    conversion, options, growing_class = GROWING[backend]
    sized_settings = {
        "DEDUP_BACKEND": backend,
        "DEDUP_COMPACT_CAPACITY": 20_000,
        "DEDUP_HASH_SHARDS": 4,
        "DEDUP_HASH_FIELD_EXPIRY": False,
        "SCHEDULER_DUPEFILTER_KEY": key,
    }
    client = redis.Redis(port=own_server.port)

    def convert() -> None:
        conversion(client, key, options.from_settings(Settings(sized_settings))).run(
            delete_source=True
        )

    tree = Site(pages=600, links=5, linker=tree_links).start()
    result = run(
        tmp_path,
        tree,
        [AtPage(60, convert)],
        {**settings(own_server.url, backend, batched), **sized_settings},
    )
    missing = sorted(set(range(tree.pages)) - set(tree.downloads))
    assert not missing, f"{len(missing)} page(s) lost: {missing[:20]}\n{result['log'][-3000:]}"
    assert max(tree.downloads.values()) <= 2, tree.downloads.most_common(3)
    assert result["stats"]["dedup/reopened"] == 1
    reopened = [line for line in result["log"].splitlines() if "converted under" in line]
    assert len(reopened) == 1 and growing_class.__name__ in reopened[0], reopened
    growing = build_backend(Settings(sized_settings), "site", server=client, key=key)
    assert isinstance(growing, growing_class)
    growing.open()
    assert growing.count() >= tree.pages


@pytest.mark.parametrize("batched", PATHS)
@pytest.mark.parametrize("fault", ["damaged", "gone"])
def test_a_fault_mid_crawl_stops_the_crawl_under_raise(tmp_path, own_server, fault, batched):
    """DEDUP_ON_ERROR='raise': a bucket damaged, or the server gone, mid-crawl stops the
    crawl with one ERROR saying why (close reason dedup_error), no traceback, the
    requests it could not check passed to the scheduler rather than dropped."""
    client = redis.Redis(port=own_server.port)

    def damage() -> None:
        if fault == "gone":
            own_server.stop()
            return
        for key in client.scan_iter(match="{site:dupefilter:*"):
            if not key.endswith(b":meta"):
                replace_with_a_list(client, key)

    tree = Site(pages=600, links=5, linker=tree_links).start()
    result = run(
        tmp_path,
        tree,
        [AtPage(40, damage)],
        settings(
            own_server.url, "compact", batched, DEDUP_ON_ERROR="raise", DEDUP_SOCKET_TIMEOUT=1
        ),
    )
    assert result["stats"]["finish_reason"] == "dedup_error"
    errors = [line for line in result["log"].splitlines() if "] ERROR:" in line]
    assert len(errors) == 1, errors
    assert "Stopping the crawl" in errors[0], errors[0]
    assert ("holds a list" if fault == "damaged" else "Redis failed") in errors[0], errors[0]
    assert len(tree.downloads) < tree.pages  # stopped, not run to the end


@pytest.mark.parametrize("batched", PATHS)
def test_eviction_switched_on_mid_crawl_is_said(tmp_path, own_server, batched):
    """maxmemory-policy allkeys-lru and a full server from the 20th page served to the
    150th: the keys it evicts are noticed while the crawl runs (not only at open): one
    WARNING naming the policy, dedup/evicted_keys; and no page lost (evicted
    fingerprints are crawled again, never taken for seen). A filler key makes the
    server evict at once; memory comes back so that the re-crawls it causes end."""
    client = redis.Redis(port=own_server.port)

    def evicting() -> None:
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 1)
        # Over the limit: the server evicts what it can, here and at each write (here
        # it may evict every key it can and still have no room for this one).
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):
            client.set("filler", "x" * 100_000)

    def back() -> None:
        client.config_set("maxmemory", 0)

    site = Site(pages=300, links=10, linker=site_links).start()
    try:
        result = run(
            tmp_path,
            site,
            [AtPage(20, evicting), AtPage(150, back)],
            settings(own_server.url, "compact", batched),
        )
    finally:
        back()
        client.config_set("maxmemory-policy", "noeviction")
    assert set(site.downloads) == set(range(site.pages))
    warned = [
        line for line in result["log"].splitlines() if "evicted" in line and "WARNING" in line
    ]
    assert len(warned) == 1 and "'allkeys-lru'" in warned[0], warned
    assert result["stats"]["dedup/evicted_keys"] > 0
