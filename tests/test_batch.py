"""Batches: check_and_add_many on every backend row, and the dupefilter's batch path
(``df.batches``: prepare / check / account) that BatchDedupMiddleware uses."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from scrapy_dedup_suite.backends import SetBackend
from scrapy_dedup_suite.backends.keys import slot_of
from scrapy_dedup_suite.core.fingerprint import scrapy_redis_fingerprint
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import DedupBackendError, InvalidFingerprintError

from .conftest import BACKENDS, NATIVE_ROWS, ROWS
from .helpers import connect, fingerprints, run_crowd
from .servers import poll_until

ON_CLUSTER = True

EXACT = {"set", "hash", "compact"}


def evalsha_calls(client: Any) -> dict[str, int]:
    """EVALSHA calls per server since the last CONFIG RESETSTAT, by node name."""
    out = {}
    nodes = client.get_primaries() if hasattr(client, "get_primaries") else [None]
    for node in nodes:
        if node is None:
            stats = client.info("commandstats")
            name = "single"
        else:
            stats = client.info("commandstats", target_nodes=node)
            name = node.name
        out[name] = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return out


def reset_stats(client: Any) -> None:
    if hasattr(client, "get_primaries"):
        client.config_resetstat(target_nodes=client.ALL_NODES)
    else:
        client.config_resetstat()


def test_a_batch_answers_as_one_call_per_fingerprint_would(make_backend, backend_name):
    backend = make_backend()
    backend.open()
    fps = fingerprints(400)
    assert backend.check_and_add_many(fps[:200]) == [False] * 200
    answers = backend.check_and_add_many(fps[100:400])
    assert answers[:100] == [True] * 100  # recorded by the first batch
    new = answers[100:]
    if backend_name in EXACT:
        assert new == [False] * 200
    else:
        assert new.count(True) <= 1  # a false positive at most, at these sizes
    # What the batches recorded, the per-request path sees.
    assert all(backend.check_and_add(fp) for fp in fps)


def test_a_fingerprint_repeated_in_a_batch_is_new_once(make_backend):
    backend = make_backend()
    backend.open()
    a, b, c = fingerprints(3, "repeat")
    assert backend.check_and_add_many([a, b, a, c, b, a]) == [False, False, True, False, True, True]


def test_an_empty_batch_makes_no_call(make_backend, server, topology):
    backend = make_backend()
    backend.open()
    reset_stats(server)
    assert backend.check_and_add_many([]) == []
    assert sum(evalsha_calls(server).values()) == 0


def test_one_call_per_batch_on_a_server_one_per_slot_on_a_cluster(make_backend, server, topology):
    backend = make_backend()
    backend.open()
    fps = fingerprints(300, "calls")
    backend.check_and_add_many(fps[:10])  # scalable rows learn their layers here
    reset_stats(server)
    backend.check_and_add_many(fps)
    calls = evalsha_calls(server)
    if topology == "single":
        assert calls == {"single": 1}
        return
    # One call per slot the batch touches (a block's or shard's keys share a slot),
    # the calls of one master sent together in one pipeline round.
    if isinstance(backend, SetBackend):
        touched = {slot_of(backend.key)}
    else:
        layout = backend.layout
        context = layout.context(server)
        touched = {slot_of(layout.keys(layout.place(fp, None)[0], context)[0]) for fp in fps}
    assert sum(calls.values()) == len(touched)


def test_a_batch_grows_a_scalable_filter_like_single_calls(server, topology):
    batched = BACKENDS["bloom+scaling"](server, "t:batched")
    single = BACKENDS["bloom+scaling"](server, "t:single")
    batched.open()
    single.open()
    fps = fingerprints(2500, "grow")
    new = 0
    for start in range(0, len(fps), 500):
        new += batched.check_and_add_many(fps[start : start + 500]).count(False)
    assert new == sum(not single.check_and_add(fp) for fp in fps)
    assert batched.layers_added == single.layers_added >= 1
    assert all(batched.contains_many(fps))
    # Each block's layer record counts what it holds, as after single calls.
    for a, b in zip(batched.block_keys, single.block_keys):
        assert server.hgetall(f"{a}:layers") == server.hgetall(f"{b}:layers")


@pytest.mark.single_server
def test_per_request_expiries_in_one_batch(server):
    backend = BACKENDS["hash"](server)
    backend.open()
    short, long = fingerprints(2, "expire")
    assert backend.check_and_add_many([short, long], [0.001, 3600]) == [False, False]
    poll_until(lambda: not backend.contains(short))  # expired by the server's clock
    assert backend.check_and_add_many([short, long]) == [False, True]


@pytest.mark.single_server
@pytest.mark.parametrize(
    "row", [r for r in ROWS if "bloom" in r.values[0] and r.values[0] not in NATIVE_ROWS]
)
def test_a_bad_fingerprint_in_a_batch_writes_nothing(server, row):
    backend = BACKENDS[row](server)
    backend.open()
    good = fingerprints(1, "good")[0]
    with pytest.raises(InvalidFingerprintError):
        backend.check_and_add_many([good, "not-hex"])
    assert not backend.contains(good)


@pytest.mark.single_server
def test_a_stamp_of_other_parameters_refuses_the_whole_batch(server):
    backend = BACKENDS["bloom"](server)
    backend.open()
    fps = fingerprints(50, "stamp")
    victim = backend.block(fps[-1])
    server.set(backend.stamp_keys[victim], "backend=bloom;layout=0")
    with pytest.raises(redis.ResponseError, match="stamp"):
        backend.check_and_add_many(fps)
    assert not any(backend.contains_many(fps))


# -- the dupefilter's batch path ------------------------------------------------------------


def make_dupefilter(backend: Any, **kw: Any) -> RFPDupeFilter:
    stats = MemoryStatsCollector(get_crawler())
    df = RFPDupeFilter(backend, stats=stats, **kw)
    df.open()
    return df


def batch(df: RFPDupeFilter, requests: list[Request]) -> list[Request]:
    prepared = df.batches.prepare(requests)
    return df.batches.account(prepared, df.batches.check(prepared))


def test_admitted_requests_cost_no_second_round_trip(make_backend, server, backend_name):
    df = make_dupefilter(make_backend())
    requests = [Request(f"http://batch.test/{i % 30}") for i in range(40)]  # 10 repeats
    new = batch(df, requests)
    assert [r.url for r in new] == [f"http://batch.test/{i}" for i in range(30)]
    stats = df.stats.get_stats()
    assert stats["dedup/added"] == 30
    assert stats["dupefilter/filtered"] == stats["dedup/filtered"] == 10
    assert ("bloomfilter/filtered" in stats) == ("bloom" in backend_name)
    assert stats["dedup/batches"] == 1 and stats["dedup/batched"] == 40
    reset_stats(server)
    # Admitted by fingerprint, with no call: a copy that a component made after the
    # batch (replace()) reaches the scheduler as the original would have.
    assert not any(df.request_seen(r.replace(meta={"copied": True})) for r in new)
    assert sum(evalsha_calls(server).values()) == 0
    # Admitted once: the same request offered again, or a copy (a redirect is a
    # replace() that inherits meta), is checked, and was recorded.
    assert df.request_seen(new[0])
    assert df.request_seen(new[1].replace(meta={"copied": True}))
    assert df.stats.get_value("dedup/added") == 30


@pytest.mark.single_server
def test_dont_filter_and_per_request_stats_match_a_batch(server):
    one = make_dupefilter(BACKENDS["hash"](server, "t:one"))
    many = make_dupefilter(BACKENDS["hash"](server, "t:many"))
    requests = [Request(f"http://same.test/{i % 7}", meta={"dedup_expire": 60}) for i in range(20)]
    for r in requests:
        one.request_seen(r)
    batch(many, requests)
    keep = ("dedup/added", "dupefilter/filtered", "dedup/filtered")
    assert {k: one.stats.get_value(k) for k in keep} == {k: many.stats.get_value(k) for k in keep}


@pytest.mark.single_server
def test_an_unreachable_redis_lets_the_batch_through_with_allow(redis_server, server):
    backend = BACKENDS["set"](server)
    df = make_dupefilter(backend, on_error="allow")
    dead = redis.Redis(port=redis_server.port + 1 if redis_server.port < 65535 else 1)
    df.server = dead
    df.backend._opened = True  # as if opened before the server went away
    requests = [Request(f"http://down.test/{i}") for i in range(5)]
    new = batch(df, requests)
    assert new == requests
    assert df.stats.get_value("dedup/errors") == 5
    assert df.stats.get_value("dedup/errors/ConnectionError") == 5
    assert df.stats.get_value("dedup/added") is None


@pytest.mark.single_server
def test_an_unreachable_redis_raises_after_retries_with_raise(redis_server, server):
    backend = BACKENDS["set"](server)
    df = make_dupefilter(backend, on_error="raise", retries=2)
    df.server = redis.Redis(port=redis_server.port + 1 if redis_server.port < 65535 else 1)
    df.backend._opened = True
    prepared = df.batches.prepare([Request("http://down.test/1")])
    result = df.batches.check(prepared)
    assert isinstance(result.failure, DedupBackendError)
    assert "also after 2 retries" in str(result.failure)
    # Not passed on; the middleware raises the failure after passing on the others.
    assert df.batches.account(prepared, result) == []
    assert df.stats.get_value("dedup/errors") == 1


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.values[0] in ("set", "hash", "compact", "bloom")]
)
def test_crawler_processes_batching_the_same_links_admit_each_once(redis_url, topology, row):
    name = row
    connect(redis_url, topology).flushall()
    admitted = run_crowd(redis_url, topology, name, 2000, {"_batch": 50})
    counts = Counter(admitted.values())
    if name in EXACT:
        assert counts == Counter({1: 2000})
    else:  # at most once; a false positive may drop one
        assert set(counts) <= {1} and sum(counts.values()) >= 1995
    expected = {
        scrapy_redis_fingerprint(Request(f"http://crowd.test/page/{i}")) for i in range(2000)
    }
    assert set(admitted) <= expected


# -- the local cache (DEDUP_LOCAL_CACHE) ----------------------------------------------------


def round_trips(client: Any) -> int:
    """Calls made: EVALSHA, else SADD (the set backend's per-request path); the
    SADDs a script runs count in INFO too, so not both."""
    stats = client.info("commandstats")

    def count(name: str) -> int:
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    return count("evalsha") or count("sadd")


@pytest.mark.single_server
@pytest.mark.parametrize("row", ["set", "bloom", "bloom+scaling"])
def test_the_local_cache_answers_repeats_with_no_round_trip(server, row):
    df = make_dupefilter(BACKENDS[row](server), local_cache=2)
    a, b, c = (Request(f"http://cache.test/{x}") for x in "abc")
    assert not df.request_seen(a) and not df.request_seen(b)
    server.config_resetstat()
    assert df.request_seen(a) and df.request_seen(b)
    assert round_trips(server) == 0
    assert df.stats.get_value("dedup/cache_hits") == 2
    assert df.stats.get_value("dupefilter/filtered") == 2
    # Bounded: c pushes out the least recently used (a); a costs a round trip again.
    assert not df.request_seen(c)
    server.config_resetstat()
    assert df.request_seen(a)
    assert round_trips(server) == 1
    # A batch sends only what the cache does not know; all known: nothing sent.
    server.config_resetstat()
    new = batch(df, [a, c, Request("http://cache.test/d")])
    assert [r.url for r in new] == ["http://cache.test/d"]
    assert round_trips(server) == 1
    server.config_resetstat()
    assert batch(df, [c, Request("http://cache.test/d")]) == []
    assert round_trips(server) == 0
    # clear() empties it: what was recorded is new again.
    df.clear()
    assert not df.request_seen(a)


@pytest.mark.single_server
@pytest.mark.parametrize("row", ["hash", "windowed-bloom"])
def test_the_local_cache_is_refused_where_answers_expire(server, row, caplog):
    with caplog.at_level("WARNING"):
        df = make_dupefilter(BACKENDS[row](server), local_cache=100)
    assert "DEDUP_LOCAL_CACHE is ignored" in caplog.text
    r = Request("http://cache.test/expiring")
    df.request_seen(r)
    server.config_resetstat()
    assert df.request_seen(r)
    assert round_trips(server) == 1  # asked the server, which knows about expiry


@pytest.mark.parametrize("value", [-1, "many", 10**9, 1.5])
def test_a_bad_local_cache_size_names_the_setting(value):
    from scrapy.settings import Settings

    from scrapy_dedup_suite.exceptions import DedupConfigError
    from scrapy_dedup_suite.settings.options import DupefilterOptions

    with pytest.raises(DedupConfigError, match="DEDUP_LOCAL_CACHE must be a whole number"):
        DupefilterOptions.from_settings(Settings({"DEDUP_LOCAL_CACHE": value}))


@pytest.mark.single_server
def test_a_custom_backend_without_scripts_gets_batches_one_by_one(server):
    from scrapy_dedup_suite.backends import DedupBackend

    class MemoryBackend(DedupBackend):
        name = "memory"

        def __init__(self, server: Any, key: str) -> None:
            super().__init__(server, key)
            self.seen: set[str] = set()
            self.calls = 0

        def check_and_add(self, fingerprint: str, expire: float | None = None) -> bool:
            self.calls += 1
            was = fingerprint in self.seen
            self.seen.add(fingerprint)
            return was

        def owned_keys(self) -> list[str]:
            return []

    backend = MemoryBackend(server, "t:memory")
    a, b = fingerprints(2, "custom")
    assert backend.check_and_add_many([a, b, a]) == [False, False, True]
    assert backend.calls == 3
    df = make_dupefilter(backend)
    assert [r.url for r in batch(df, [Request("http://c.test/1"), Request("http://c.test/1")])] == [
        "http://c.test/1"
    ]


@pytest.mark.single_server
@pytest.mark.parametrize("row", ["set", "bloom", "hash"])
def test_a_batch_after_clear_opens_the_filter_again(server, row):
    df = make_dupefilter(BACKENDS[row](server))
    requests = [Request(f"http://clear.test/{i}") for i in range(5)]
    new = batch(df, requests)
    assert len(new) == 5 and not any(df.request_seen(r) for r in new)  # the scheduler takes them
    df.clear()
    assert not df.backend.opened
    again = [r.replace() for r in requests]
    new = batch(df, again)
    assert len(new) == 5  # forgotten by clear(), recorded again
    assert df.backend.opened
    assert not any(df.request_seen(r) for r in new)
    assert all(df.request_seen(r.replace()) for r in requests)


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("DEDUP_BATCH_SIZE", 0, "DEDUP_BATCH_SIZE must be a whole number of requests"),
        ("DEDUP_BATCH_SIZE", 20_000, "one call holds the server for the whole batch"),
        ("DEDUP_BATCH_THREADS", 100, "DEDUP_BATCH_THREADS must be a whole number of threads"),
        ("DEDUP_BATCH_OUTAGE_WAIT", -1, "DEDUP_BATCH_OUTAGE_WAIT must be a number of seconds"),
        ("DEDUP_BATCH_OUTAGE_WAIT", "soon", "DEDUP_BATCH_OUTAGE_WAIT must be a number of seconds"),
    ],
)
def test_batch_settings_are_checked(setting, value, message):
    from scrapy.settings import Settings

    from scrapy_dedup_suite.exceptions import DedupConfigError
    from scrapy_dedup_suite.settings.options import BatchOptions

    with pytest.raises(DedupConfigError, match=message):
        BatchOptions.from_settings(Settings({setting: value}))
    assert BatchOptions.from_settings(Settings()) == BatchOptions(500, 4, 0.0)
