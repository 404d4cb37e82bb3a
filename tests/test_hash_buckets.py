"""The hash backend's bucket layout (every new hash filter): which layout a filter
gets and keeps, expiries in whole seconds by the server's clock, the janitor purging
bucket by bucket (exactly the expired, resumable, bounded), and the choice of the
server's field expiry by what the server does with it. The shared behaviour (answers,
batches, races, clear(), crawls) is the ``hash`` row of the backend table."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import HashBackend, build_backend
from scrapy_dedup_suite.backends.expiry import stored_layout
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.exceptions import FilterMismatchError
from scrapy_dedup_suite.janitor import Janitor

from .helpers import fingerprints, stored_expiry_ms
from .servers import poll_until

ON_CLUSTER = True  # groups of buckets spread over the masters; the janitor walks each


def from_settings(server: Any, **settings: Any) -> Any:
    values = {"DEDUP_BACKEND": "hash", "DEDUP_COMPACT_CAPACITY": 5_000, "DEDUP_HASH_SHARDS": 4}
    return build_backend(Settings({**values, **settings}), "t", server=server, key="t:h")


def janitor_buckets(server: Any, **kw: Any) -> HashBucketsBackend:
    """A bucket-layout filter kept the janitor's way (on any server)."""
    kw = {"capacity": 5_000, "shards": 4, "field_expiry": False, **kw}
    return HashBucketsBackend(server, "t:h", expire=3600, **kw)


def seeded(server: Any, expired: int, live: int) -> tuple[HashBucketsBackend, list, list]:
    """A bucket filter holding ``expired`` fingerprints whose expiry has passed by the
    server's clock and ``live`` ones that stay an hour."""
    backend = janitor_buckets(server)
    backend.open()
    old, new = fingerprints(expired, "old"), fingerprints(live, "live")
    backend.add_many(old, expire=0.05)
    backend.add_many(new, expire=3600)
    deadline = max(stored_expiry_ms(backend, fp) for fp in old)
    poll_until(lambda: server_ms(server) >= deadline, timeout=30)
    return backend, old, new


def server_ms(server: Any) -> int:
    seconds, micros = server.time()
    return int(seconds) * 1000 + int(micros) // 1000


def all_fields(backend: HashBucketsBackend) -> set[bytes]:
    return {
        field
        for keys in backend.bucket_keys()
        for key in keys
        for field in backend.server.hkeys(key)
    }


def field_of(backend: HashBucketsBackend, fp: str) -> bytes:
    return backend.locate(fp)[1]


def test_a_new_filter_gets_buckets_and_an_old_one_keeps_its_shards(server):
    new = from_settings(server)
    assert isinstance(new, HashBucketsBackend)
    new.open()
    assert server.hget("t:h:meta", "layout") == b"buckets"
    assert stored_layout(server, "t:h", 4) == "buckets"
    assert isinstance(from_settings(server), HashBucketsBackend)  # and keeps them
    server.flushall()

    # A filter of layout 1 (shards), as every earlier version made it.
    old = HashBackend(server, "t:h", shards=4, field_expiry=False)
    old.open()
    fps = fingerprints(300)
    old.add_many(fps)
    again = from_settings(server)
    assert type(again) is HashBackend
    again.open()
    assert all(again.contains_many(fps))
    assert again.check_and_add_many(fps[:10]) == [True] * 10
    # Its record lost, its stamps still say the layout.
    server.delete("t:h:meta")
    assert type(from_settings(server)) is HashBackend
    # At another key (df.key = ...), the layout stored there.
    assert isinstance(again.with_key("t:other"), HashBucketsBackend)


def test_a_layout_this_version_does_not_know_is_refused_at_open_in_one_line(server):
    """A record written by a later version (another layout) is not a reason to fail
    with a KeyError: the backend is built, and opening it names what differs."""
    new = from_settings(server)
    new.open()
    server.hset("t:h:meta", "layout", "9")
    again = from_settings(server)
    assert isinstance(again, HashBucketsBackend)
    with pytest.raises(FilterMismatchError, match="layout"):
        again.open()


def test_expiries_are_whole_seconds_by_the_server_clock(server):
    backend = janitor_buckets(server)
    backend.open()
    fp, short = fingerprints(2)
    before = server_ms(server)
    assert backend.check_and_add(fp) is False
    assert backend.check_and_add(short, expire=0.2) is False
    after = server_ms(server)
    expiry = stored_expiry_ms(backend, fp)
    assert expiry % 1000 == 0
    # Rounded up: never shorter than asked, at most a second longer.
    assert before + 3_600_000 <= expiry <= after + 3_600_000 + 1000
    assert backend.check_and_add(short) is True
    poll_until(lambda: backend.check_and_add(short) is False, timeout=30)
    assert backend.check_and_add(fp) is True
    # The stored value is a small integer: the bucket stays a listpack.
    bucket = backend.bucket_key(backend.locate(fp)[0])
    assert server.object("encoding", bucket) == b"listpack"


def test_the_janitor_purges_exactly_the_expired_bucket_by_bucket(server):
    backend, old, live = seeded(server, expired=3000, live=2000)
    # One of the expired is recorded again before the pass: it must be kept.
    assert backend.check_and_add(old[0]) is False
    report = Janitor(backend, batch=100).run_pass()
    assert report.purged and report.completed and not report.resumed
    assert report.removed == len(old) - 1
    assert report.scanned == len(old) + len(live)
    assert report.remaining == len(live) + 1 == backend.count()
    assert all_fields(backend) == {field_of(backend, fp) for fp in [*live, old[0]]}
    assert all(backend.contains_many([*live, old[0]]))
    # Bounded calls: each read at most the batch plus one bucket.
    assert report.calls >= (len(old) + len(live)) // (100 + backend.capacity // backend.buckets * 3)
    assert Janitor(backend).run_pass().removed == 0


def test_a_stopped_pass_is_resumed_where_it_stopped(server):
    backend, old, live = seeded(server, expired=2000, live=500)
    janitor = Janitor(backend, batch=50)
    steps: list[str] = []

    def stop_after_five(key: str, candidates: list[str]) -> None:
        steps.append(key)
        if len(steps) == 5:
            janitor.stop()

    janitor.on_scan = stop_after_five
    first = janitor.run_pass()
    assert not first.completed and 0 < first.removed < len(old)
    janitor.on_scan = None
    second = janitor.run_pass()
    assert second.resumed and second.completed
    assert first.removed + second.removed == len(old)
    assert first.scanned + second.scanned == len(old) + len(live)
    assert all_fields(backend) == {field_of(backend, fp) for fp in live}


def test_a_bucket_field_without_an_expiry_is_left_and_reported(server):
    backend = janitor_buckets(server)
    backend.open()
    fps = fingerprints(100)
    backend.add_many(fps)
    bucket = backend.bucket_key(backend.locate(fps[0])[0])
    server.hset(bucket, "damaged!", "not a number")
    report = Janitor(backend).run_pass()
    assert report.completed and report.removed == 0
    assert server.hget(bucket, "damaged!") == b"not a number"
    assert any("1 field(s)" in w and "no expiry" in w for w in report.warnings)


def test_the_server_expiry_is_chosen_where_buckets_stay_listpack(expiring):
    """Redis >= 7.4 keeps a hash with field TTLs in a listpack (listpackex): a new
    filter lets the server expire its fields. Valkey 9 makes it a hashtable (3-4x
    the memory): a new filter takes the janitor's way, unless told otherwise."""
    backend = HashBucketsBackend(expiring, "t:h", expire=3600, capacity=5_000, shards=4)
    backend.open()
    fps = fingerprints(400)
    backend.add_many(fps)
    bucket = backend.bucket_key(backend.locate(fps[0])[0])
    encoding = expiring.object("encoding", bucket)
    assert expiring.keys("*probe*") == []  # the probes are gone
    if backend.expiry.name == "server":
        assert encoding == b"listpackex"
        assert backend.purge_units() == []
        ttl = expiring.execute_command("HPTTL", bucket, "FIELDS", 1, field_of(backend, fps[0]))
        assert 3_500_000 < ttl[0] <= 3_600_000
    else:
        assert encoding == b"listpack"
        told = HashBucketsBackend(expiring, "t:told", capacity=5_000, shards=4, field_expiry=True)
        told.open()
        told.add_many(fps[:10])
        assert told.expiry.name == "server"
        assert expiring.hget("t:told:meta", "expiry") == b"server"
    # Either way the encoding the probe predicted is what the data has.
    assert expiring.hget("t:h:meta", "expiry") == (b"server" if encoding == b"listpackex" else None)
    assert all(backend.contains_many(fps))
    assert backend.check_and_add_many(fps[:5]) == [True] * 5


def hpexpire_calls(client: Any) -> int:
    stats = client.info("commandstats").get("cmdstat_hpexpire", {})
    return int(stats.get("calls", 0))


def test_a_filter_that_stays_empty_is_probed_once(expiring):
    """A janitor (or a dedup-info) verifies a filter its spider has not written yet at
    each pass: the field-TTL probe is asked once per backend, not at each verify."""
    backend = HashBucketsBackend(expiring, "t:h", expire=3600, capacity=5_000, shards=4)
    before = hpexpire_calls(expiring)
    for _ in range(3):
        assert backend.verify() is False
    assert hpexpire_calls(expiring) - before == 4  # one probe per group, once
    assert expiring.keys("*") == []  # and nothing is left of it


@pytest.mark.parametrize("field_expiry", [False, None], ids=["janitor", "auto"])
def test_dedup_info_says_the_layout_and_the_expiry(server, field_expiry):
    backend = janitor_buckets(server, field_expiry=field_expiry)
    backend.open()
    backend.add_many(fingerprints(1000))
    lines = [line for item in backend.contents() for line in item.describe()]
    text = "\n".join(lines)
    assert "buckets over 4 group(s)" in text, text
    assert "the janitor purges expired ones" in text or "frees expired ones" in text
    info = backend.info()
    assert info["layout"] == "buckets" and info["expired_by"] == backend.expiry.name
    assert info["fields"] == 1000  # counted: HLEN of each bucket that exists


def test_an_unreachable_server_is_one_line_when_the_layout_is_read():
    """Building a hash dupefilter reads which layout its filter has: a server that
    cannot be reached then is the one-line error of an open, not a traceback."""
    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.dupefilter import RFPDupeFilter
    from scrapy_dedup_suite.embedded import free_port
    from scrapy_dedup_suite.exceptions import RedisUnreachableError

    url = f"redis://127.0.0.1:{free_port()}"
    crawler = get_crawler(settings_dict={"DEDUP_BACKEND": "hash", "REDIS_URL": url})
    with pytest.raises(RedisUnreachableError, match="when the dupefilter was built") as info:
        RFPDupeFilter.from_crawler(crawler)
    assert "\n" not in str(info.value) and "REDIS_URL" in str(info.value)
