"""A fault may make a page be crawled twice; it must never make a new page look seen.

Every case runs against a real server: connections killed under the dupefilter,
a server that pauses past the socket timeout, full memory, a busy script, a
replica, eviction policies, damaged keys, custom fingerprints, a clock step.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
from typing import Any

import pytest
import redis
import scrapy
from scrapy import Request
from scrapy.utils.test import get_crawler

from scrapy_dedup_suite.backends import BloomBackend, HashBackend, WindowedBloomBackend
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.dedup.batch import DEFERRED, FAILED, NEW
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import DedupBackendError, DedupConfigError
from scrapy_dedup_suite.janitor import Janitor
from scrapy_dedup_suite.server.cluster import is_cluster
from scrapy_dedup_suite.server.connection import retries_of

from .conftest import BACKENDS, ROWS
from .helpers import SETTINGS_ROWS, fingerprints
from .servers import RedisServer, poll_until, redis_server_binary

ON_CLUSTER = True


class MySpider(scrapy.Spider):
    name = "faulty"


def dupefilter(redis_settings: dict, row: str, **settings: Any) -> RFPDupeFilter:
    """Built as Scrapy builds it, with scrapy-redis's REDIS_PARAMS defaults
    (``retry_on_timeout=True``) unless told otherwise."""
    crawler = get_crawler(
        MySpider,
        {
            **redis_settings,
            **SETTINGS_ROWS[row],
            "DEDUP_BLOOM_CAPACITY": 50_000,
            "DEDUP_BLOOM_BLOCKS": 4,
            "DEDUP_HASH_SHARDS": 4,
            **settings,
        },
    )
    df = RFPDupeFilter.from_crawler(crawler)
    df.open()
    return df


def masters(client: Any) -> list[redis.Redis]:
    if hasattr(client, "get_primaries"):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


class Storm:
    """A thread that kills every normal client connection on the servers, again and
    again, until stopped."""

    def __init__(self, client: Any) -> None:
        where = [n.connection_pool.connection_kwargs for n in masters(client)]
        self.nodes = [redis.Redis(host=kw["host"], port=kw["port"]) for kw in where]
        self.stop = threading.Event()
        self.kills = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for node in self.nodes:
                self.kills += int(node.execute_command("CLIENT KILL TYPE normal SKIPME yes"))
            self.stop.wait(0.001)  # intensity only: some calls get through, some do not

    def __enter__(self) -> Storm:
        self.thread.start()
        poll_until(lambda: self.kills > 0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.slow
@pytest.mark.parametrize("on_error", ["allow", "raise"])
@pytest.mark.parametrize("row", ROWS)
def test_a_client_kill_storm_never_reports_a_new_request_seen(
    redis_settings, server, row, on_error, topology
):
    df = dupefilter(redis_settings, row, DEDUP_ON_ERROR=on_error, DEDUP_ERROR_RETRIES=5)
    # (on the cluster each kill also costs the client a look at the slots: fewer calls
    # meet as many kills)
    n = 600 if topology == "cluster" else 2000
    requests = [Request(f"http://storm.test/{row}/{i}") for i in range(n)]
    seen = raised = 0
    with Storm(server) as storm:
        for r in requests:
            try:
                seen += df.request_seen(r)
            except DedupBackendError:
                raised += 1
    assert storm.kills > 0
    assert seen == 0
    stats = df.stats
    # Every request is accounted for: recorded, let through on an error, or let
    # through because a retry's "seen" may have been our own earlier attempt.
    errors = stats.get_value("dedup/errors", 0)
    assert on_error == "allow" or errors == raised
    added, ambiguous = stats.get_value("dedup/added", 0), stats.get_value("dedup/ambiguous", 0)
    assert added + ambiguous + errors == len(requests)
    assert "dedup/filtered" not in stats.get_stats()


@pytest.mark.slow
@pytest.mark.parametrize("on_error", ["allow", "raise"])
@pytest.mark.parametrize("row", ROWS)
def test_a_client_kill_storm_never_reports_a_new_request_seen_in_batches(
    redis_settings, server, row, on_error
):
    """The same storm against the batch path (BatchDedupMiddleware's), 40 batches of 50."""
    df = dupefilter(redis_settings, row, DEDUP_ON_ERROR=on_error, DEDUP_ERROR_RETRIES=5)
    requests = [Request(f"http://storm.test/{row}/batch/{i}") for i in range(2000)]
    admitted = raised = 0
    with Storm(server) as storm:
        for start in range(0, len(requests), 50):
            batch = df.batches.prepare(requests[start : start + 50])
            result = df.batches.check(batch)
            admitted += len(df.batches.account(batch, result))
            if result.failure is not None:  # the middleware raises it after the others
                assert isinstance(result.failure, DedupBackendError)
                raised += result.outcomes.count(FAILED)
    assert storm.kills > 0
    assert admitted + raised == len(requests)  # none reported seen
    stats = df.stats
    errors = stats.get_value("dedup/errors", 0)
    assert on_error == "allow" or errors == raised  # the failed ones count as errors
    added, ambiguous = stats.get_value("dedup/added", 0), stats.get_value("dedup/ambiguous", 0)
    assert added + ambiguous + errors == len(requests)
    assert "dedup/filtered" not in stats.get_stats()


@pytest.mark.slow
@pytest.mark.single_server
@pytest.mark.parametrize("row", ROWS)
def test_a_server_pausing_past_the_socket_timeout_never_reports_a_new_request_seen(row):
    """DEBUG SLEEP longer than the client's socket timeout: the server runs the
    call after the client gave up, so a retry finds it recorded; that answer is
    not trusted (dedup/ambiguous)."""
    pausing = RedisServer(redis_server_binary(), ["--enable-debug-command", "yes"]).start()
    try:
        settings = {"REDIS_URL": pausing.url, "DEDUP_REDIS_CLUSTER": False}
        df = dupefilter(
            settings,
            row,
            DEDUP_ON_ERROR="raise",
            DEDUP_ERROR_RETRIES=3,
            DEDUP_SOCKET_TIMEOUT=0.2,
            REDIS_PARAMS={"retry_on_timeout": True},
        )
        sleeper = redis.Redis(port=pausing.port, socket_timeout=30)
        stop = threading.Event()
        sleeps = []

        def pause() -> None:
            while not stop.is_set():
                sleeper.execute_command("DEBUG", "SLEEP", "0.3")
                sleeps.append(1)
                stop.wait(0.05)  # intensity only: some calls get through between pauses

        thread = threading.Thread(target=pause, daemon=True)
        thread.start()
        poll_until(lambda: sleeps)
        seen = raised = offered = 0
        stats = df.stats
        deadline = time.monotonic() + 120
        try:
            # New requests until several calls have timed out and been retried.
            while stats.get_value("dedup/retries", 0) < 5:
                assert time.monotonic() < deadline, "no call timed out within 120 s"
                try:
                    seen += df.request_seen(Request(f"http://pause.test/{offered}"))
                except DedupBackendError:
                    raised += 1
                offered += 1
        finally:
            stop.set()
            thread.join()
        assert seen == 0
        assert stats.get_value("dedup/errors", 0) == raised
        added, ambiguous = stats.get_value("dedup/added", 0), stats.get_value("dedup/ambiguous", 0)
        assert added + ambiguous + raised == offered
    finally:
        pausing.stop()


@pytest.mark.single_server
def test_a_server_that_never_answers_holds_a_request_one_socket_timeout(
    redis_settings, server, caplog
):
    """A listener that accepts connections and never answers (after the filter was
    opened on a real server): each call gives up after DEDUP_SOCKET_TIMEOUT."""
    df = dupefilter(redis_settings, "bloom", DEDUP_SOCKET_TIMEOUT=0.2)
    assert df.server.connection_pool.connection_kwargs["socket_timeout"] == 0.2
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        pool = df.server.connection_pool
        pool.connection_kwargs["port"] = silent.getsockname()[1]
        pool.reset()  # new connections go to the silent listener
        with caplog.at_level(logging.WARNING):
            answers = [df.request_seen(Request(f"http://silent.test/{i}")) for i in range(3)]
    finally:
        silent.close()
    assert answers == [False, False, False]
    assert df.stats.get_value("dedup/errors") == 3
    assert caplog.text.count("Timeout reading from") == 3


@pytest.mark.single_server
def test_redis_retries_are_turned_off_for_the_dupefilter(redis_server, server):
    scrapy_redis_like = redis.Redis.from_url(redis_server.url, retry_on_timeout=True)
    df = RFPDupeFilter(scrapy_redis_like, "t:retries")
    conn = df.server.connection_pool.make_connection()
    assert retries_of(conn.retry) == 0 and not conn.retry_on_error
    # The caller's client is left as it was.
    original = scrapy_redis_like.connection_pool.make_connection()
    assert original.retry_on_error


@pytest.mark.single_server
def test_the_raise_policy_retries_without_sleeping(monkeypatch):
    gone = RedisServer(redis_server_binary()).start()
    df = dupefilter({"REDIS_URL": gone.url}, "hash", DEDUP_ON_ERROR="raise", DEDUP_ERROR_RETRIES=3)
    gone.stop()

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"the dupefilter slept {seconds} s on the reactor thread")

    monkeypatch.setattr(time, "sleep", no_sleep)
    with pytest.raises(DedupBackendError, match="also after 3 retries"):
        df.request_seen(Request("http://down.test/"))
    assert df.stats.get_value("dedup/retries") == 3
    assert df.stats.get_value("dedup/errors") == 1


@pytest.mark.single_server
@pytest.mark.parametrize("on_error", ["allow", "raise"])
def test_a_batch_waits_out_an_outage_in_its_thread(monkeypatch, on_error):
    """DEDUP_BATCH_OUTAGE_WAIT: a batch whose call failed tries again, with growing
    pauses in its own thread, until the server is back; its answers are then taken
    as new (the failed call may have run), never as seen."""
    server = RedisServer(redis_server_binary()).start()
    df = dupefilter({"REDIS_URL": server.url}, "hash", DEDUP_ON_ERROR=on_error)
    df.open()
    fps = fingerprints(50, "outage")
    assert df.batches.check_fingerprints(fps[:10]).seen == [False] * 10
    server.stop()
    pauses: list[float] = []
    paused = threading.Event()
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        paused.set()
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    results = []
    thread = threading.Thread(
        target=lambda: results.append(df.batches.check_fingerprints(fps, None, 600))
    )
    thread.start()
    assert paused.wait(60)  # its first call failed: the server is down
    server.start()
    thread.join(120)
    assert not thread.is_alive()
    (result,) = results
    assert result.error is None and result.retries >= 1
    assert result.seen == [False] * 50  # the ten recorded before the outage too: not trusted
    assert pauses[0] == 0.05 and pauses == sorted(pauses)
    assert df.backend.contains_many(fps) == [True] * 50
    server.stop()


@pytest.mark.single_server
@pytest.mark.parametrize("row", ROWS)
def test_full_memory_follows_the_policy(redis_settings, server, row, caplog):
    df = dupefilter(redis_settings, row)
    strict = dupefilter(redis_settings, row, DEDUP_ON_ERROR="raise", DEDUP_ERROR_RETRIES=1)
    server.config_set("maxmemory", 1)  # noeviction: every write is refused with OOM
    try:
        with caplog.at_level(logging.WARNING):
            answers = [df.request_seen(Request(f"http://oom.test/{i}")) for i in range(20)]
        with pytest.raises(DedupBackendError, match="maxmemory"):
            strict.request_seen(Request("http://oom.test/strict"))
    finally:
        server.config_set("maxmemory", 0)
    assert answers == [False] * 20
    assert df.stats.get_value("dedup/errors") == 20
    assert "letting it through" in caplog.text


@pytest.mark.single_server
def test_a_busy_script_follows_the_policy(redis_server, redis_settings, server):
    df = dupefilter(redis_settings, "bloom")
    server.config_set("busy-reply-threshold", 50)
    busy = redis.Redis.from_url(redis_server.url, socket_timeout=60)
    killed: list[str] = []

    def spin() -> None:  # a read-only script that runs until SCRIPT KILL
        try:
            busy.eval("redis.call('GET', 'x') while true do end", 0)
        except redis.ResponseError as exc:
            killed.append(str(exc))

    thread = threading.Thread(target=spin, daemon=True)
    prober = redis.Redis.from_url(redis_server.url)
    try:
        thread.start()

        def answers_busy() -> bool:
            try:
                prober.ping()
            except redis.exceptions.BusyLoadingError:
                return False
            except redis.ResponseError as exc:
                return str(exc).startswith("BUSY")
            return False

        poll_until(answers_busy)
        assert df.request_seen(Request("http://busy.test/")) is False
        assert df.stats.get_value("dedup/errors") == 1
    finally:
        poll_until(lambda: script_kill(prober))
        thread.join()
        server.config_set("busy-reply-threshold", 5000)
    assert killed and "killed" in killed[0].lower()


def script_kill(client: redis.Redis) -> bool:
    try:
        client.script_kill()
    except redis.ResponseError as exc:
        return "NOTBUSY" in str(exc)
    return True


@pytest.mark.single_server
def test_a_replica_is_refused_at_open(redis_server, server):
    replica = RedisServer(
        redis_server_binary(), ["--replicaof", "127.0.0.1", str(redis_server.port)]
    ).start()
    try:
        client = redis.Redis(port=replica.port)
        with pytest.raises(DedupConfigError, match=r"read-only .*replica.*primary"):
            HashBackend(client, "t:replica").open()
        assert client.keys("*") == []
    finally:
        replica.stop()


@pytest.mark.single_server
@pytest.mark.parametrize(
    ("policy", "row", "warned"),
    [
        ("allkeys-lru", "bloom", True),
        ("allkeys-random", "hash", True),
        ("volatile-lru", "windowed-bloom", True),
        ("volatile-lru", "hash", False),
        ("noeviction", "windowed-bloom", False),
    ],
)
def test_an_eviction_policy_that_can_delete_the_filter_is_reported(
    server, policy, row, warned, caplog
):
    server.config_set("maxmemory-policy", policy)
    try:
        with caplog.at_level(logging.WARNING, logger="scrapy_dedup_suite"):
            BACKENDS[row](server, "t:evict").open()
            report = Janitor(BACKENDS[row](server, "t:evict")).run_pass()
    finally:
        server.config_set("maxmemory-policy", "noeviction")
    assert ("maxmemory-policy" in caplog.text) is warned
    assert any("maxmemory-policy" in w for w in report.warnings) is warned
    if warned:
        assert policy in caplog.text


@pytest.mark.single_server
def test_a_filter_larger_than_the_server_is_refused_before_allocating(server):
    server.config_set("maxmemory", 64 * 2**20)
    try:
        big = BloomBackend(server, "t:big", BloomParams.from_capacity(100_000_000, 0.001))
        with pytest.raises(DedupConfigError, match=r"needs 0.2 GiB .* Nothing was allocated"):
            big.open()
        assert server.keys("t:big*") == [] and server.keys("{t:big*") == []
        # One that fits opens, and opens again once its memory is in use.
        small = BloomBackend(server, "t:small", BloomParams.from_capacity(1_000_000, 0.001))
        small.open()
        BloomBackend(server, "t:small", small.params).open()
    finally:
        server.config_set("maxmemory", 0)


@pytest.mark.single_server
def test_an_acl_refusal_inside_a_script_names_the_command(redis_server, server):
    server.execute_command("ACL", "SETUSER", "crawler", "on", ">pw", "~*", "+@all", "-setbit")
    try:
        opener = {"REDIS_URL": redis_server.url, "DEDUP_REDIS_CLUSTER": False}
        dupefilter(opener, "bloom")  # created by a user who may write bits
        url = redis_server.url.replace("redis://", "redis://crawler:pw@")
        where = {"REDIS_URL": url, "DEDUP_REDIS_CLUSTER": False}
        df = dupefilter(where, "bloom", DEDUP_ON_ERROR="raise")  # no crawl to stop: raised
        refused = r"may not run SETBIT \(called in the package's filter_add\.lua\)"
        with pytest.raises(DedupConfigError, match=refused):  # and the ACL line to add
            df.request_seen(Request("http://acl.test/"))
    finally:
        server.execute_command("ACL", "DELUSER", "crawler")


def test_a_truncated_block_is_refused(server):
    backend = BloomBackend(server, "t:trunc", BloomParams.from_capacity(20_000, 0.001, blocks=2))
    backend.open()
    fps = fingerprints(200, salt="trunc")
    backend.add_many(fps)
    server.set(backend.block_keys[0], b"\xff" * 8)  # truncated (and overwritten)
    with pytest.raises(Exception, match="truncated or overwritten"):
        BloomBackend(server, "t:trunc", backend.params).open()
    new = [fp for fp in fingerprints(200, salt="new") if backend.block(fp) == 0]
    with pytest.raises(Exception, match="truncated or overwritten"):
        for fp in new:
            backend.check_and_add(fp)


def damaged_batch(backend, server) -> list[str]:
    """Thirty new fingerprints of healthy blocks, then one of block 0, truncated."""
    backend.open()
    backend.add_many(fingerprints(200, salt="before"))
    server.set(backend.block_keys[0], b"\xff" * 8)
    fresh = fingerprints(400, salt="batch")
    batch = [fp for fp in fresh if backend.block(fp) != 0][:30]
    return [*batch, next(fp for fp in fresh if backend.block(fp) == 0)]


@pytest.mark.parametrize("backend_name", ["bloom", "bloom+scaling"])
def test_a_damaged_bitmap_refuses_its_whole_call_before_writing(make_backend, server, backend_name):
    """A batch is one call per slot (one call on a single server); a call the server
    refuses wrote nothing, and the answers of the other calls are kept."""
    backend = make_backend()
    batch = damaged_batch(backend, server)
    answers, failed = backend.try_check_and_add_many(batch)
    assert failed and all("truncated or overwritten" in str(c.error) for c in failed)
    refused = {i for c in failed for i in c.indices}
    assert len(batch) - 1 in refused
    assert [a is None for a in answers] == [i in refused for i in range(len(batch))]
    assert all(answers[i] is False for i in range(len(batch)) if i not in refused)
    carried = [batch[i] for i in sorted(refused) if i != len(batch) - 1]
    if not is_cluster(server):
        assert len(carried) == 30  # one call: the damaged block's refusal refused all
    assert backend.check_and_add_many(carried) == [False] * len(carried)


@pytest.mark.parametrize("backend_name", ["bloom"])
def test_the_batch_path_defers_a_refused_call_to_the_per_request_check(make_backend, server):
    """What a refused call carried reaches the scheduler unadmitted: its check there
    is the per-request path's, which records the healthy ones and raises for the
    damaged block, as without the batch."""
    backend = make_backend()
    batch = damaged_batch(backend, server)
    df = RFPDupeFilter(backend)  # opened before the damage, as in a crawl
    requests = [Request(f"http://damaged.test/{i}") for i in range(len(batch))]
    prepared = df.batches.prepare(requests)
    prepared.fingerprints[:] = batch  # the damaged fingerprints themselves
    result = df.batches.check(prepared)
    assert result.failure is None and result.outcomes[-1] == DEFERRED
    assert set(result.outcomes) <= {NEW, DEFERRED}
    assert df.batches.account(prepared, result) == requests  # every one passed on
    deferred = [i for i, outcome in enumerate(result.outcomes) if outcome == DEFERRED]
    for i in deferred[:-1]:
        assert backend.check_and_add(batch[i]) is False  # the scheduler's check: new
    with pytest.raises(Exception, match="truncated or overwritten"):
        backend.check_and_add(batch[-1])


@pytest.mark.parametrize("backend_name", ["bloom+scaling", "windowed-bloom+scaling"])
def test_a_lost_layer_record_is_refused(make_backend, server, backend_name):
    """The Lua scalable filters keep a record of their layers beside the data."""
    backend = make_backend()
    backend.open()
    fps = fingerprints(2500, salt="layers")
    backend.add_many(fps)
    records = [k for k in server.scan_iter(match="*:layers", count=1000)]
    assert records
    for key in records:
        server.delete(key)
    with pytest.raises(Exception, match="lost what it knew of its layers"):
        for fp in fingerprints(200, salt="more"):
            backend.check_and_add(fp)
    if backend_name == "bloom+scaling":
        with pytest.raises(Exception, match="lost what it knew of its layers"):
            make_backend().open()


class PrefixedFingerprinter:
    """A project's fingerprinter: a version prefix before a SHA1 digest."""

    def fingerprint(self, request: Request) -> bytes:
        return b"myproject-v1" + hashlib.sha1(request.url.encode()).digest()


class RawUrlFingerprinter:
    def fingerprint(self, request: Request) -> bytes:
        return request.url.encode()


@pytest.mark.single_server
@pytest.mark.parametrize("fingerprinter", [PrefixedFingerprinter, RawUrlFingerprinter])
@pytest.mark.parametrize("row", ["bloom", "windowed-bloom", "bloom+scaling"])
def test_custom_fingerprints_are_spread_before_bit_positions(
    redis_settings, server, row, fingerprinter
):
    df = dupefilter(
        redis_settings,
        row,
        DEDUP_FINGERPRINTER="scrapy",
        REQUEST_FINGERPRINTER_CLASS=f"{__name__}.{fingerprinter.__name__}",
    )
    requests = [Request(f"http://custom.test/page/{i}") for i in range(300)]
    assert sum(df.request_seen(r) for r in requests) == 0
    assert all(df.request_seen(r) for r in requests)


@pytest.mark.single_server
def test_a_stepped_back_host_clock_does_not_move_the_window(server, monkeypatch):
    backend = WindowedBloomBackend(
        server,
        "t:clock",
        BloomParams.from_capacity(10_000, 0.001),
        WindowSpec.parse("day", 2),
    )
    backend.open()
    before = backend.now()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 86400)  # the host steps back a day
    assert abs(backend.now() - before) < 60
    fps = fingerprints(50, salt="clock")
    assert backend.add_many(fps) == 50
    monkeypatch.undo()
    assert all(backend.contains_many(fps))
    today = backend.live_keys()[0][0]
    assert server.exists(today)
