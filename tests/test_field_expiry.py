"""The hash backend on servers that expire hash fields themselves (each test on
Valkey 9 and on Redis 8), and on Redis 7.0, which does not: which way a filter
takes, that it keeps it, and what happens when settings or servers disagree."""

from __future__ import annotations

import logging

import pytest
import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import HashBackend, build_backend
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.exceptions import DedupConfigError, FilterMismatchError
from scrapy_dedup_suite.janitor import Janitor

from .helpers import crawl, fingerprints
from .servers import poll_until


def shard_ttls(client, backend, fps):
    return [client.execute_command("HPTTL", backend.shard_of(fp), "FIELDS", 1, fp)[0] for fp in fps]


def test_a_new_filter_lets_the_server_expire_its_fields(expiring):
    backend = HashBackend(expiring, "t:h", expire=3600, shards=4)
    backend.open()
    assert backend.expiry.name == "server"
    assert backend.purge_units() == []  # nothing for the janitor to purge
    assert expiring.hget("t:h:meta", "expiry") == b"server"
    fps = fingerprints(200)
    assert backend.check_and_add_many(fps + fps[:5]) == [False] * 200 + [True] * 5
    assert backend.check_and_add(fps[0]) is True
    ttls = shard_ttls(expiring, backend, fps[:20])
    assert all(3_590_000 < t <= 3_600_000 for t in ttls)
    # The field holds no timestamp: the server keeps the expiry.
    assert expiring.hget(backend.shard_of(fps[0]), fps[0]) == b"1"
    assert all(backend.contains_many(fps))


def test_an_expired_field_is_new_again_without_a_janitor(expiring):
    backend = HashBackend(expiring, "t:h", expire=3600, shards=2)
    backend.open()
    short, long = fingerprints(2, "ttl")
    assert backend.check_and_add(short, expire=0.05) is False
    assert backend.check_and_add(long) is False
    poll_until(lambda: not backend.contains(short), timeout=30)
    assert backend.check_and_add(long) is True
    assert backend.check_and_add(short) is False  # recorded again, with its expiry
    assert shard_ttls(expiring, backend, [short])[0] > 3_500_000
    assert backend.check_and_add(short) is True


def test_the_janitor_has_nothing_to_purge(expiring):
    backend = HashBackend(expiring, "t:h", expire=3600, shards=4)
    backend.open()
    backend.add_many(fingerprints(100))
    report = Janitor(backend).run_pass()
    assert not report.purged and report.scanned == 0
    assert "expire on the Redis server itself (hash-field expiry): nothing to purge" in (
        report.summary()
    )


def test_a_filter_keeps_the_way_it_was_created_with(expiring):
    old = HashBackend(expiring, "t:h", expire=3600, shards=4, field_expiry=False)
    old.open()
    old.add_many(fingerprints(50))
    assert old.expiry.name == "janitor"
    again = HashBackend(expiring, "t:h", expire=3600, shards=4)  # auto: keeps the janitor's
    again.open()
    assert again.expiry.name == "janitor" and again.purge_units() == again.shard_keys
    assert all(again.contains_many(fingerprints(50)))
    with pytest.raises(FilterMismatchError, match="expiry timestamps that the janitor purges"):
        HashBackend(expiring, "t:h", shards=4, field_expiry=True).open()
    new = HashBackend(expiring, "t:s", shards=4)
    new.open()
    with pytest.raises(FilterMismatchError, match="cannot switch"):
        HashBackend(expiring, "t:s", shards=4, field_expiry=False).open()


def test_a_writer_of_the_other_way_is_refused_by_the_stamps(expiring):
    """A worker that opened the filter the janitor's way before it was cleared and
    made again the server's way must not write timestamps among expiring fields."""
    stale = HashBackend(expiring, "t:h", shards=1, field_expiry=False)
    stale.open()
    expiring.flushall()
    fresh = HashBackend(expiring, "t:h", shards=1)
    fresh.open()
    fresh.add_many(fingerprints(10))
    with pytest.raises(redis.ResponseError, match="stamp"):
        stale.check_and_add(fingerprints(1, "new")[0])
    assert expiring.hlen(fresh.shard_keys[0]) == 10


def test_redis_7_0_uses_the_janitors_way_and_refuses_the_servers(server):
    try:
        server.execute_command("HPEXPIRE")
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc):
            pytest.skip("the suite's server expires hash fields (Redis >= 7.4, Valkey >= 9)")
    backend = HashBackend(server, "t:h", shards=2)
    backend.open()
    assert backend.expiry.name == "janitor"
    assert server.hget("t:h:meta", "expiry") is None  # records as before
    with pytest.raises(DedupConfigError, match=r"no hash-field expiry .*Redis >= 7.4"):
        HashBackend(server, "t:x", shards=2, field_expiry=True).open()
    # A filter made the server's way, now on a server without it (a failover to an
    # older one): refused, not written with timestamps that nothing would purge.
    server.hset("t:y:meta", mapping={"backend": "hash", "layout": "1", "shards": "2"})
    server.hset("t:y:meta", "expiry", "server")
    with pytest.raises(DedupConfigError, match="was created to let the server expire"):
        HashBackend(server, "t:y", shards=2).open()


def test_the_setting(expiring):
    def built(value):
        settings = Settings({"DEDUP_BACKEND": "hash", "DEDUP_HASH_FIELD_EXPIRY": value})
        return build_backend(settings, "s", server=expiring).field_expiry

    assert [built(v) for v in (None, "auto", True, "false")] == [None, None, True, False]
    with pytest.raises(DedupConfigError, match="DEDUP_HASH_FIELD_EXPIRY must be True or False"):
        built("sometimes")


@pytest.mark.subprocess
def test_a_crawl_on_a_server_that_expires_fields(tmp_path, site, field_expiry_server, expiring):
    settings = {
        "REDIS_URL": field_expiry_server.url,
        "DEDUP_BACKEND": "hash",
        "DEDUP_HASH_SHARDS": 4,
        # (Valkey 9 would give a new filter's buckets the janitor's way: see
        # test_hash_buckets.py; here the server's is what is crawled with.)
        "DEDUP_HASH_FIELD_EXPIRY": True,
    }
    first = crawl(tmp_path, site, settings, "first")["stats"]
    assert first["dedup/added"] == site.pages
    assert first["dedup/filtered"] == site.offered() - site.pages
    assert expiring.hget("site:dedup-hash:meta", "expiry") == b"server"
    assert expiring.exists("site:dedup-hash:janitor") == 0
    second = crawl(tmp_path, site, settings, "second")["stats"]
    assert "downloader/response_count" not in second


def test_field_ttls_forced_where_they_make_hashtables_are_warned_with_advice_that_works(
    valkey9_server, caplog
):
    """DEDUP_HASH_FIELD_EXPIRY = True on Valkey 9, which keeps hashes with field TTLs
    as hashtables: creation says what it costs and what to do; a later open blames the
    field TTLs, not the capacity; and the advice (no DEDUP_HASH_FIELD_EXPIRY) gives a
    filter in listpacks with the janitor's expiry."""
    client = redis.Redis(port=valkey9_server.port)
    client.flushall()
    with caplog.at_level(logging.WARNING):
        forced = HashBucketsBackend(client, "t:forced", capacity=5_000, shards=4, field_expiry=True)
        forced.open()
    created = [
        r.getMessage() for r in caplog.records if "DEDUP_HASH_FIELD_EXPIRY = True" in r.getMessage()
    ]
    assert (
        len(created) == 1
        and "70 B" in created[0]
        and "Remove DEDUP_HASH_FIELD_EXPIRY" in created[0]
    )
    forced.check_and_add_many(fingerprints(2_000))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        HashBucketsBackend(client, "t:forced", capacity=5_000, shards=4).open()
    assert "keeps hashes with field TTLs as hashtables" in caplog.text
    assert "larger DEDUP_COMPACT_CAPACITY does not help" in caplog.text
    # The advice: without the setting, a new filter here is the janitor's, in listpacks.
    advised = HashBucketsBackend(client, "t:advised", capacity=5_000, shards=4)
    advised.open()
    advised.check_and_add_many(fingerprints(2_000))
    assert advised.expiry.name == "janitor"
    assert advised.sample().hashtables == 0
