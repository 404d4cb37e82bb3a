"""The frontier's queue on a real server (and cluster): a request is enqueued in the
same call that records its fingerprint as new, leased, acknowledged, given back, and
reclaimed when its lease ends."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import pytest
import redis

from scrapy_dedup_suite.backends.keys import slot_of
from scrapy_dedup_suite.frontier.acks import PendingAcks
from scrapy_dedup_suite.frontier.figures import shard_counts
from scrapy_dedup_suite.frontier.queue import FrontierQueue, Shard
from scrapy_dedup_suite.frontier.record import record_and_enqueue

ON_CLUSTER = True


def fps(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def queue_for(server, backend) -> FrontierQueue:
    return FrontierQueue.for_backend(backend, "t:requests")


def take_all(queue: FrontierQueue, lease_ms: int = 60_000) -> list[tuple[str, int, bytes]]:
    got = []
    for shard in queue.shards:
        got += queue.call(shard, lease_ms, take=10_000).requests
    return got


def test_a_new_fingerprint_s_request_is_enqueued_in_its_call_and_a_seen_one_s_is_not(
    server, make_backend, topology
):
    backend = make_backend()
    backend.open()
    queue = queue_for(server, backend)
    first = fps(40)
    again = first[:10] + fps(5, "new")
    requests = [(i % 3, f"r{i}".encode()) for i in range(40)]
    seen, failed = record_and_enqueue(backend, queue, first, [None] * 40, requests)
    assert failed == [] and seen == [False] * 40
    more = [(0, f"again{i}".encode()) for i in range(15)]
    seen, failed = record_and_enqueue(backend, queue, again, [None] * 15, more)
    assert failed == [] and seen == [True] * 10 + [False] * 5
    got = take_all(queue)
    entries = sorted(entry for _, _, entry in got)
    assert entries == sorted([e for _, e in requests] + [e for _, e in more[10:]])
    assert all(priority == int(entry[1:]) % 3 for _, priority, entry in got if entry[:1] == b"r")
    if topology == "cluster" and len(getattr(backend, "stamp_keys", ())) > 1:
        assert len(queue.shards) > 1  # spread over the filter's slots
        slots = {slot_of(shard.queue) for shard in queue.shards}
        assert slots == {slot_of(key) for key in backend.stamp_keys}


def test_a_record_call_acknowledges_the_leases_of_its_shard_and_leaves_the_others(
    server, make_backend, topology
):
    """The acknowledgements a record call is given for its shards are done in it; those
    of shards it does not call stay with the caller, their leases held."""
    backend = make_backend()
    backend.open()
    queue = queue_for(server, backend)
    record_and_enqueue(backend, queue, fps(60), [None] * 60, [(0, b"r%d" % i) for i in range(60)])
    acks = PendingAcks()
    for shard in queue.shards:
        leased = queue.call(shard, 60_000, take=10_000).requests
        acks.add(shard, [lease_id for lease_id, _, _ in leased])
    given = dict(acks.items())
    seen, failed = record_and_enqueue(
        backend, queue, fps(3, "x"), [None] * 3, [(0, b"x")] * 3, acks
    )
    assert failed == [] and seen == [False] * 3
    done = [shard for shard in given if shard not in acks]
    assert done  # (the shards of the three fingerprints' groups)
    for shard in given:
        held = server.hlen(shard.leases)
        assert held == (0 if shard in done else len(given[shard]))
        assert server.zcard(shard.expiries) == held
    if topology == "single":
        assert not acks


@pytest.mark.single_server
def test_a_refused_record_call_leaves_its_acknowledgements_to_the_next(server, make_backend):
    backend = make_backend()
    backend.open()
    queue = queue_for(server, backend)
    shard = queue.shards[0]
    queue.push(shard, [(0, b"a"), (0, b"b")])
    ids = [lease_id for lease_id, _, _ in queue.call(shard, 60_000, take=2).requests]
    server.set(shard.counters, "not a hash")
    acks = PendingAcks({shard: list(ids)})
    seen, failed = record_and_enqueue(backend, queue, fps(1), [None], [(7, b"c")], acks)
    assert seen == [None] and "WRONGTYPE" in str(failed[0].error)
    assert acks.items() == [(shard, ids)] and server.hlen(shard.leases) == 2


@pytest.mark.single_server
def test_priorities_come_out_highest_first_and_in_order_within_one(server):
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"a"), (5, b"b"), (-3, b"c"), (5, b"d"), (0, b"e")])
    got = queue.call(shard, 60_000, take=3).requests
    assert [(p, e) for _, p, e in got] == [(5, b"b"), (5, b"d"), (0, b"a")]
    got = queue.call(shard, 60_000, take=10).requests
    assert [(p, e) for _, p, e in got] == [(0, b"e"), (-3, b"c")]
    assert queue.call(shard, 60_000).waiting == 0


@pytest.mark.single_server
def test_an_unacknowledged_lease_that_ended_goes_back_to_the_front_and_an_acked_one_never(
    server,
):
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"a"), (0, b"b"), (0, b"c")])
    dead = FrontierQueue(server, ["t:requests"])  # another worker
    leased = dead.call(shard, 0, take=2).requests  # a lease of 0 ms: ended at once
    assert [e for _, _, e in leased] == [b"a", b"b"]
    done = leased[1][0]
    dead.call(shard, 0, acks=[done])  # b acknowledged; a's lease has ended, unacked
    answer = queue.call(shard, 60_000, take=10)
    assert [e for _, _, e in answer.requests] == [b"a", b"c"]  # a back, in front
    assert shard_counts(queue, shard).reclaimed == 1
    assert answer.reclaimed == 0  # (dead's own ack call reclaimed it)
    assert shard_counts(queue, shard).held == 2


@pytest.mark.single_server
def test_renewed_leases_are_not_reclaimed_and_released_ones_come_back_first(server):
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"a"), (0, b"b"), (0, b"c")])
    leased = queue.call(shard, 0, take=2).requests
    ids = [lease_id for lease_id, _, _ in leased]
    queue.call(shard, 60_000, renew=ids)  # renewed before anyone reclaimed them
    other = FrontierQueue(server, ["t:requests"])
    assert [e for _, _, e in other.call(shard, 60_000, take=10).requests] == [b"c"]
    queue.call(shard, 60_000, release=ids)
    assert [e for _, _, e in other.call(shard, 60_000, take=10).requests] == [b"a", b"b"]
    counts = shard_counts(queue, shard)
    assert counts.reclaimed == 0 and counts.held == 3 and counts.waiting == 0
    assert set(counts.held_by) == {other.worker.rstrip(":")}


def test_a_page_done_whose_acknowledgement_waits_is_renewed_by_its_lease_id(server):
    """A page done waits for the next call to its shard, acknowledged with when it was
    sent (``id@ms``); a callback blocking the reactor keeps it waiting past the lease,
    so the keeper renews it meanwhile, by its lease id. Renewing ``id@ms`` held nothing:
    the lease ended and another worker fetched the page again (the slow-callback crawl
    test, with both cores busy)."""
    from scrapy_dedup_suite.frontier.acks import stamped
    from scrapy_dedup_suite.frontier.leases import Holdings, LeaseKeeper

    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"\x01http://a.test/")])
    ((lease_id, _, _),) = queue.call(shard, 1_000, take=1).requests
    holdings = Holdings()
    acknowledged = stamped(lease_id, time.monotonic(), queue.clocks[shard])
    assert acknowledged.startswith(f"{lease_id}@")  # (its send time said)
    holdings.acks.add(shard, [acknowledged])
    errors: list[Any] = []
    keeper = LeaseKeeper(
        lambda: queue, 3_600_000, 5, lambda: holdings.ids({}), errors.append, errors.append
    )
    seconds, micros = server.time()
    keeper.renew()
    assert errors == []
    ends = server.zscore(shard.expiries, lease_id)
    assert ends is not None and ends >= int(seconds) * 1000 + int(micros) // 1000 + 3_599_000
    other = FrontierQueue(server, ["t:requests"])
    assert other.call(shard, 60_000, take=10).requests == []  # (not reclaimed)
    queue.call(shard, 60_000, acks=holdings.acks.take(shard))
    assert server.hlen(shard.leases) == 0  # (the acknowledgement, stamped, still ends it)


@pytest.mark.single_server
def test_a_queue_key_of_another_type_refuses_the_call_before_anything_is_recorded(
    server, make_backend
):
    backend = make_backend()
    backend.open()
    queue = FrontierQueue(server, ["t:requests"])
    server.set(queue.shards[0].queue, "not a queue")
    seen, failed = record_and_enqueue(backend, queue, fps(3), [None] * 3, [(0, b"x")] * 3)
    assert seen == [None] * 3 and len(failed) == 1
    assert "WRONGTYPE" in str(failed[0].error)
    assert backend.contains_many(fps(3)) == [False] * 3  # nothing recorded: nothing lost
    assert server.get(queue.shards[0].queue) == b"not a queue"  # nor deleted


def test_clearing_the_filter_leaves_the_queue_and_clearing_the_queue_leaves_the_filter(
    server, make_backend
):
    backend = make_backend()
    backend.open()
    queue = queue_for(server, backend)
    record_and_enqueue(backend, queue, fps(20), [None] * 20, [(1, b"x")] * 20)
    backend.clear()
    assert len(take_all(queue, 0)) == 20
    backend.open()
    record_and_enqueue(backend, queue, fps(20, "b"), [None] * 20, [(1, b"y")] * 20)
    assert queue.clear() > 0
    assert take_all(queue) == []
    assert backend.contains_many(fps(20, "b")) == [True] * 20


@pytest.mark.single_server
def test_the_frontier_s_script_is_loaded_again_after_a_flush(server, make_backend):
    backend = make_backend()
    backend.open()
    queue = FrontierQueue(server, ["t:requests"])
    record_and_enqueue(backend, queue, fps(2), [None] * 2, [(0, b"a"), (0, b"b")])
    server.script_flush()
    seen, failed = record_and_enqueue(backend, queue, fps(3), [None] * 3, [(0, b"c")] * 3)
    assert failed == [] and seen == [True, True, False]
    assert len(take_all(queue)) == 3


def test_redis_errors_are_failed_calls_not_exceptions(server, make_backend):
    backend = make_backend()
    backend.open()
    queue = queue_for(server, backend)
    backend.server = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens
    seen, failed = record_and_enqueue(backend, queue, fps(2), [None] * 2, [(0, b"a")] * 2)
    assert seen == [None, None] and failed


class _Spider:
    name = "site"

    def parse(self, response):  # the callback the requests name
        pass


@pytest.mark.single_server
@pytest.mark.parametrize("kind", ["PriorityQueue", "FifoQueue", "LifoQueue"])
def test_scrapy_redis_s_queue_is_taken_over_whole_with_its_priorities(server, kind):
    from scrapy import Request
    from scrapy_redis import queue as srq

    from scrapy_dedup_suite.exceptions import DedupConfigError
    from scrapy_dedup_suite.frontier.codec import PickleSerializer, RequestCodec
    from scrapy_dedup_suite.frontier.takeover import take_over

    spider = _Spider()
    old = getattr(srq, kind)(server, spider, "%(spider)s:requests")
    sent = [
        Request(f"http://example.com/{i}", callback=spider.parse, priority=i % 4, meta={"n": i})
        for i in range(1_203)
    ]
    for request in sent:
        old.push(request)
    queue = FrontierQueue(server, ["site:requests"])
    codec = RequestCodec(spider)
    with pytest.raises(DedupConfigError, match=r"1,203 request.*FRONTIER_READ_PICKLE"):
        take_over(queue, "site:requests", codec)  # pickles: read only when asked
    assert take_over(queue, "site:requests", codec, PickleSerializer(), chunk=500) == 1_203
    assert not server.exists("site:requests")
    got = take_all(queue)
    back = [codec.decode(entry, priority) for _, priority, entry in got]
    assert sorted((r.url, r.priority, r.meta["n"]) for r in back) == sorted(
        (r.url, r.priority, r.meta["n"]) for r in sent
    )
    assert [r.priority for r in back] == sorted((r.priority for r in back), reverse=True)
    assert all(r.callback == spider.parse for r in back)
    assert take_over(queue, "site:requests", codec) == 0  # nothing left: nothing again


@pytest.mark.single_server
@pytest.mark.parametrize("kind", ["PriorityQueue", "FifoQueue"])
def test_a_takeover_whose_first_chunk_is_all_stale_sets_it_aside_and_moves_the_rest(server, kind):
    """The first chunk read (the highest priorities; the oldest of a FIFO queue) names a
    callback the spider no longer has, every request of it: before, the takeover took
    that for a serializer to set and moved none; now it looks further, finds requests
    it can read, sets the stale chunk aside and moves the others."""
    import pickle

    from scrapy import Request
    from scrapy_redis import queue as srq

    from scrapy_dedup_suite.frontier.codec import PickleSerializer, RequestCodec
    from scrapy_dedup_suite.frontier.takeover import take_over

    spider = _Spider()
    old = getattr(srq, kind)(server, spider, "%(spider)s:requests")
    stale = []
    for i in range(5):  # pushed first: the oldest, and the highest priority
        fields = Request(f"http://example.com/stale/{i}", callback=spider.parse, priority=9)
        fields = fields.to_dict(spider=spider)
        fields["callback"] = "a_callback_long_gone"
        stale.append(pickle.dumps(fields, protocol=-1))
        if kind == "PriorityQueue":
            server.zadd("site:requests", {stale[-1]: -9})
        else:
            server.lpush("site:requests", stale[-1])
    for i in range(7):
        old.push(Request(f"http://example.com/{i}", callback=spider.parse))
    queue = FrontierQueue(server, ["site:requests"])
    assert take_over(queue, "site:requests", RequestCodec(spider), PickleSerializer(), chunk=5) == 7
    assert sorted(server.lrange(queue.shards[0].bad, 0, -1)) == sorted(stale)
    assert not server.exists("site:requests")


@pytest.mark.single_server
def test_a_takeover_refuses_an_unreadable_queue_and_leaves_it_there(server):
    from scrapy_dedup_suite.exceptions import DedupConfigError
    from scrapy_dedup_suite.frontier.codec import PickleSerializer, RequestCodec
    from scrapy_dedup_suite.frontier.takeover import take_over

    server.zadd("site:requests", {b"not a pickle": 0})
    queue = FrontierQueue(server, ["site:requests"])
    with pytest.raises(DedupConfigError, match="set SCHEDULER_SERIALIZER"):
        take_over(queue, "site:requests", RequestCodec(_Spider()), PickleSerializer())
    assert server.zcard("site:requests") == 1
    server.set("other:requests", "x")
    with pytest.raises(DedupConfigError, match="holds a string"):
        take_over(queue, "other:requests", RequestCodec(_Spider()), PickleSerializer())


def test_dedup_info_shows_the_queue_its_leases_and_scrapy_redis_s_queue(
    server, redis_settings, topology
):
    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.commands.dedup_info import inspect, render

    settings = Settings({**redis_settings, "DEDUP_BACKEND": "compact", "DEDUP_HASH_SHARDS": 4})
    backend = build_backend(settings, "spider", server=server)
    backend.open()
    queue = FrontierQueue.for_backend(backend, "spider:requests")
    record_and_enqueue(backend, queue, fps(30), [None] * 30, [(0, b"\x01 parse  u")] * 30)
    dead = FrontierQueue.for_backend(backend, "spider:requests")
    for shard in dead.shards:
        dead.call(shard, 0, take=2)  # leases that ended at once: a dead worker's
    server.zadd("spider:requests", {b"old request": 0})
    found = inspect(settings, "spider", server)
    view = found["frontier"]
    assert view["waiting"] + view["leased"] == 30 and view["leased"] > 0
    assert view["leased_by"] == {dead.worker.rstrip(":"): view["leased"]}
    assert view["oldest_lease_ends_in"] <= 0
    # every request held (waiting or leased) is in the memory it is divided by
    assert view["bytes_per_request"] == round(view["memory_bytes"] / 30, 1) > 0
    assert view["scrapy_redis_queue"]["requests"] == 1
    text = render("spider", found)
    assert f"{view['waiting']:,} request(s) waiting" in text
    assert f"{view['leased']:,} leased (by worker {dead.worker.rstrip(':')}" in text
    assert "ended" in text and "reclaimed by the next worker's call" in text
    assert "scrapy-redis's queue 'spider:requests' holds 1 request(s)" in text
    assert view["status"] == "stalled" and "stalled: leases held by worker(s) not seen" in text
    assert f"{dead.worker.rstrip(':')} (not seen for an hour)" in text  # (not a crawl's)


def test_dedup_info_says_whether_the_crawl_is_finished_running_or_stalled(
    server, redis_settings, topology
):
    """What the queue says from outside (issue 56): finished when nothing waits, no lease
    is held and no page waits to be tried again; running while workers hold leases they
    renew; stalled once a lease ended unrenewed; waiting when requests wait and no
    worker holds any."""
    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.commands.dedup_info import frontier_view, render

    settings = Settings({**redis_settings, "DEDUP_BACKEND": "compact"})
    backend = build_backend(settings, "spider", server=server)
    backend.open()

    def status() -> str:
        view = frontier_view(settings, "spider", server)
        assert f"  {view['status']}: {view['status_detail']}" in render("s", {"frontier": view})
        return view["status"]

    assert status() == "finished"  # (nothing was ever queued)
    queue = FrontierQueue.for_backend(backend, "spider:requests")
    record_and_enqueue(backend, queue, fps(4), [None] * 4, [(0, b"\x01 parse  u")] * 4)
    assert status() == "waiting"
    live = FrontierQueue.for_backend(backend, "spider:requests")
    taken = {shard: live.call(shard, 600_000, take=10).requests for shard in live.shards}
    assert status() == "running"
    for shard, requests in taken.items():  # the live worker acknowledges them all
        live.call(shard, 600_000, acks=[lease_id for lease_id, _, _ in requests])
    assert status() == "finished"
    record_and_enqueue(backend, queue, fps(6)[4:], [None] * 2, [(0, b"\x01 parse  u")] * 2)
    dead = FrontierQueue.for_backend(backend, "spider:requests")
    for shard in dead.shards:
        dead.call(shard, 0, take=10)  # leases that end at once: a dead worker's
    assert status() == "stalled"


def test_dedup_info_counts_the_workers_seen_and_leaves_late_retries_to_the_next_run(
    server, redis_settings, topology
):
    """Workers seen (issue 56): a crawl's worker is recorded by each of its calls with
    the server's time, a command's look is not, one not seen for an hour is dropped; the
    status names how many were seen lately. A page to try again due after the wait a
    worker gives it (FRONTIER_WAIT_FOR_RETRIES) leaves the crawl finished; one due
    within it, retrying."""
    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend
    from scrapy_dedup_suite.commands.dedup_info import frontier_view

    settings = Settings({**redis_settings, "DEDUP_BACKEND": "compact"})
    backend = build_backend(settings, "spider", server=server)
    backend.open()
    queue = FrontierQueue.for_backend(backend, "spider:requests")
    entries = [(0, b"\x01 parse  u%d" % i) for i in range(4)]
    record_and_enqueue(backend, queue, fps(4), [None] * 4, entries)
    look = FrontierQueue.for_backend(backend, "spider:requests")  # (a command's)
    for shard in look.shards:
        look.call(shard, 600_000)
    view = frontier_view(settings, "spider", server)
    assert view["workers_seen"] == {} and view["status"] == "waiting"
    assert "none was seen in the last 60 s: is a worker running?" in view["status_detail"]
    worker = FrontierQueue.for_backend(backend, "spider:requests")
    worker.crawling = True
    name = worker.worker.rstrip(":")
    assert name.count("/") == 2 and ":" not in name  # (host/pid/token)
    gone = queue.shards[0].workers  # a worker last seen two hours ago, on one shard
    server.zadd(gone, {"old/1/abcd": int(server.time()[0]) * 1000 - 7_200_000})
    taken = {shard: worker.call(shard, 600_000, take=10).requests for shard in worker.shards}
    view = frontier_view(settings, "spider", server)
    assert set(view["workers_seen"]) == {name} and 0 <= view["workers_seen"][name] < 60
    assert view["status"] == "running"
    assert view["status_detail"].startswith("1 worker(s) seen in the last 60 s")
    for shard, requests in taken.items():  # every page failed: tried again in an hour
        later = [x for lease_id, p, e in requests for x in (lease_id, 3_600_000, p, e)]
        worker.call(shard, 600_000, later=later)
    view = frontier_view(settings, "spider", server)
    assert view["retry_later"] == 4 and view["status"] == "finished"
    assert "4 page(s) wait to be tried again" in view["status_detail"]
    assert "left for the next run" in view["status_detail"]
    waits = Settings({**settings, "FRONTIER_WAIT_FOR_RETRIES": 7200})
    assert frontier_view(waits, "spider", server)["status"] == "retrying"


def test_the_watch_draws_the_queue_s_trend_its_shards_and_its_workers():
    """``--watch``'s picture (issue 56 item 4): sparklines of waiting and leased over the
    rounds with their rate, a bar per shard scaled to the fullest, the workers by their
    last call with the leases each holds."""
    from scrapy_dedup_suite.operations.frontier_picture import History, picture

    def view(waiting: int, leased: int) -> dict:
        return {
            "status": "running",
            "status_detail": "2 worker(s) seen in the last 60 s",
            "waiting": waiting,
            "leased": leased,
            "per_shard": [
                {"queue": "{b}:frontier", "waiting": 10, "held": 0},
                {"queue": "{a}:frontier", "waiting": waiting - 10, "held": leased},
            ],
            "workers_seen": {"w1": 1.0, "w2": 30.0},
            "leased_by": {"w1": leased, "gone": 0},
        }

    history = History()
    for second, (waiting, leased) in enumerate([(100, 5), (200, 8), (400, 8)]):
        history.add(float(second), view(waiting, leased))
    lines = picture(view(400, 8), history)
    assert lines[0] == "running: 2 worker(s) seen in the last 60 s"
    assert lines[1].startswith("waiting  \u2583\u2585\u2588 ") and lines[1].endswith(
        "400 (+150.0/s)"
    )
    assert lines[2].startswith("leased   ") and lines[2].endswith("8 (+1.5/s)")
    assert lines[4] == "  {a}:frontier" + " " * 20 + " " + "\u2588" * 24 + " " + (
        "       390 waiting       8 leased"
    )
    assert lines[5].startswith("  {b}:frontier") and "\u2588" + "\u00b7" * 23 in lines[5]
    assert [line.split()[0] for line in lines[7:]] == ["w1", "w2", "gone"]
    assert "8 leases  1 s ago" in lines[7] and "not seen for an hour" in lines[9]


@pytest.mark.single_server
def test_dedup_info_watch_shows_the_queue_each_round_until_ctrl_c(server, redis_url):
    """``--watch SECONDS`` (issue 56): the frontier's view again every round (one JSON
    line each with --json, as a monitor reads it) as the queue changes, until Ctrl-C:
    exit 0, no traceback. A watch of no time is a usage error whose advice works."""
    import json
    import signal
    import subprocess
    import sys

    from .helpers import ROOT
    from .test_messages import scrapy_cmd

    refused = scrapy_cmd(
        "dedup-info", "--spider", "s", "--watch", "0", "-s", f"REDIS_URL={redis_url}"
    )
    assert refused.returncode == 2 and "--watch must be a number of seconds > 0" in refused.stderr
    args = ["dedup-info", "--spider", "s", "--watch", "0.2", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", *args, "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    try:
        first = json.loads(proc.stdout.readline())
        assert first["status"] == "finished" and first["waiting"] == 0
        queue = FrontierQueue(server, ["s:requests"])
        queue.push(queue.shards[0], [(0, b"\x01 parse  u")])
        for _ in range(100):  # (rounds until one sees it: each a fresh look)
            round_ = json.loads(proc.stdout.readline())
            if round_["waiting"]:
                break
        assert round_["status"] == "waiting" and round_["waiting"] == 1
        assert round_["time"] > first["time"]
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # (where it is stuck: faulthandler's traceback)
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"dedup-info --watch did not stop on Ctrl-C in 60 s:\n{err[-4000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    drawn = subprocess.Popen(  # in words: the picture (not a terminal: not redrawn)
        [sys.executable, "-m", "scrapy", *args[:-1], "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        lines = [drawn.stdout.readline() for _ in range(5)]
        drawn.send_signal(signal.SIGINT)
        drawn.communicate(timeout=60)
    finally:
        if drawn.poll() is None:
            drawn.kill()
    assert "(Ctrl-C to stop)" in lines[0] and lines[2].startswith("waiting: requests wait")
    assert lines[3].startswith("waiting  ") and lines[4].startswith("leased   "), lines


@pytest.mark.single_server
def test_the_frontier_hands_its_queue_back_to_scrapy_redis_once_no_worker_holds_a_lease(
    server,
):
    from scrapy import Request
    from scrapy_redis import queue as srq

    from scrapy_dedup_suite.frontier.codec import RequestCodec
    from scrapy_dedup_suite.frontier.takeover import hand_back

    spider = _Spider()
    codec = RequestCodec(spider)
    queue = FrontierQueue(server, ["site:requests"])
    shard = queue.shards[0]
    sent = [
        Request(f"http://example.com/{i}", callback=spider.parse, priority=i % 3, meta={"n": i})
        for i in range(1_100)
    ]
    queue.push(shard, [(r.priority, codec.encode(r, priority_apart=True)) for r in sent])
    alive = FrontierQueue(server, ["site:requests"])
    live = [lease_id for lease_id, _, _ in alive.call(shard, 60_000, take=2).requests]
    gone = FrontierQueue(server, ["site:requests"])
    gone.call(shard, 0, take=5)  # a dead worker's leases: ended
    refused = hand_back(queue, "site:requests", codec)
    assert refused.held == 2 and refused.moved == 0 and not server.exists("site:requests")
    assert refused.reclaimed == 5  # the dead worker's, back in the queue
    alive.call(shard, 60_000, release=live)  # the live worker stops: gives them back
    done = hand_back(queue, "site:requests", codec, chunk=400)
    assert done.moved == 1_100 and done.held == 0
    assert take_all(queue) == []
    old = srq.PriorityQueue(server, spider, "%(spider)s:requests")
    back = [old.pop() for _ in range(1_100)]
    assert old.pop() is None
    assert sorted((r.url, r.priority, r.meta["n"]) for r in back) == sorted(
        (r.url, r.priority, r.meta["n"]) for r in sent
    )
    assert [r.priority for r in back] == sorted((r.priority for r in back), reverse=True)
    assert all(r.callback == spider.parse for r in back)


@pytest.mark.single_server
def test_frontier_handback_says_what_it_moved_and_refuses_while_a_lease_is_held(server, redis_url):
    import os
    import subprocess
    import sys

    from .helpers import ROOT

    def handback(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scrapy", "frontier-handback", "--spider", "site", *args,
             "-s", f"REDIS_URL={redis_url}"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip

    queue = FrontierQueue(server, ["site:requests"])
    queue.push(
        queue.shards[0], [(0, f"\x01 parse  http://example.com/{i}".encode()) for i in range(3)]
    )
    held = FrontierQueue(server, ["site:requests"]).call(queue.shards[0], 60_000, take=1)
    # one no worker could rebuild: moved too, never left behind in the frontier's keys
    server.rpush(queue.shards[0].aside, b"5 \x01 parse_gone  http://example.com/aside")
    # and one that failed, to try again in a long while: moved too
    server.zadd(queue.shards[0].later, {b"0 \x01 parse  http://example.com/later": 9e15})
    refused = handback()
    assert refused.returncode == 1
    assert "1 lease(s) are held by workers that may be alive; nothing was moved" in refused.stderr
    dry = handback("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "2 request(s) waiting (and 1 set aside, 1 to try again later) would move" in dry.stdout
    assert "1 lease(s) held now (stop every worker first)" in dry.stdout
    queue.call(queue.shards[0], 60_000, acks=[held.requests[0][0]])
    done = handback()
    assert done.returncode == 0, done.stderr
    assert "moved 4 request(s) into scrapy-redis's queue 'site:requests'" in done.stdout
    assert "1 of them had been set aside: no worker could rebuild them" in done.stdout
    assert "1 of them had failed and waited to be tried again later" in done.stdout
    assert server.zcard("site:requests") == 4 and not server.exists(queue.shards[0].aside)
    assert not server.exists(queue.shards[0].later)
    (aside,) = server.zrangebyscore("site:requests", -5, -5)  # its priority kept
    assert b"example.com/aside" in aside
    server.delete("site:requests")
    server.set("site:requests", "x")
    wrong = handback()
    assert wrong.returncode == 1 and "holds a string" in wrong.stderr
    server.delete("site:requests")
    # a frontier key of another type: one line naming it, and nothing touched
    server.set(queue.shards[0].later, "another program's")
    damaged = handback()
    assert damaged.returncode == 1 and len(damaged.stderr.strip().splitlines()) == 1
    named = f"{queue.shards[0].later!r} holds a string, not the frontier's pages"
    assert named in damaged.stderr
    assert server.get(queue.shards[0].later) == b"another program's"


@pytest.mark.single_server
def test_an_outage_keeps_requests_and_costs_one_failed_call_a_second(server):
    """Redis away: the requests are kept (none lost, none refused), new ones join them
    without a call until RETRY_EVERY passed (the clock injected), and all are recorded
    and enqueued once Redis answers again."""
    from collections import Counter

    from scrapy import Request

    from scrapy_dedup_suite.backends.compact import CompactBackend
    from scrapy_dedup_suite.dupefilter import RFPDupeFilter
    from scrapy_dedup_suite.frontier.codec import RequestCodec
    from scrapy_dedup_suite.frontier.incoming import Incoming

    df = RFPDupeFilter(CompactBackend(server, "t:dedup", capacity=5_000, shards=4))
    df.open()
    counted: Counter[str] = Counter()
    incoming = Incoming(
        df,
        RequestCodec(_Spider()),
        lambda name, n=1: counted.update({name: n}),
        lambda shards: None,
        {},
    )
    incoming.queue = queue = FrontierQueue(server, ["t:requests"])
    now = [100.0]
    incoming.clock = lambda: now[0]
    live = df.backend.server
    df.backend.server = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens
    sent = [Request(f"http://example.com/{i}") for i in range(4)]
    assert all(incoming.enqueue(r) for r in sent[:3])  # taken, kept
    assert counted["frontier/failed_calls"] == 1 and len(incoming.waiting) == 3
    df.backend.server = live
    now[0] += 1.5
    assert incoming.enqueue(sent[3])
    assert not incoming.waiting and counted["frontier/enqueued"] == 4
    assert sorted(e for _, _, e in take_all(queue)) == sorted(
        RequestCodec(_Spider()).encode(r, priority_apart=True) for r in sent
    )
    assert not incoming.enqueue(Request("http://example.com/0"))  # recorded: seen


@pytest.mark.single_server
def test_a_worker_holding_the_last_requests_does_not_count_them_as_another_s(server, redis_url):
    """has_pending_requests says "pending" for leases other workers hold (their pages may
    yield more), not for this worker's own: right after it took the last requests, and
    once it is done with them, nothing is pending (else its crawl waits for the engine's
    next heartbeat to close, or forever)."""
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.frontier.scheduler import Scheduler

    class SiteSpider(Spider):
        name = "site"

    crawler = get_crawler(SiteSpider, {"REDIS_URL": redis_url, "CONCURRENT_REQUESTS": 8})
    slot = SimpleNamespace(inprogress=set())  # what the engine's slot offers the scheduler
    crawler.engine = SimpleNamespace(_slot=slot)
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(SiteSpider())
    try:
        for i in range(3):
            assert scheduler.enqueue_request(Request(f"http://example.com/{i}"))
        taken = [scheduler.next_request() for _ in range(3)]
        assert all(taken) and scheduler.next_request() is None
        assert not scheduler.has_pending_requests()
        other = FrontierQueue(server, ["site:requests"])  # another worker takes one
        scheduler.enqueue_request(Request("http://example.com/other"))
        assert other.call(other.shards[0], 60_000, take=1).requests
        scheduler.looks.forget()  # (what it said a second ago is stale)
        assert scheduler.has_pending_requests()  # that one's page may yield more
        for request in taken:  # the engine is done with ours: acknowledged by the next call
            slot.inprogress.add(request)
            slot.inprogress.remove(request)
        assert scheduler.holdings.acks
        scheduler.close("finished")
        assert scheduler.stats.get_value("frontier/acknowledged") == 3
    finally:
        server.flushall()


def threaded_scheduler(redis_url, monkeypatch):
    """A frontier scheduler (CONCURRENT_REQUESTS = 8, persisting; its one host's
    concurrency higher, so that only the leases ahead bound what it takes) whose lease calls in a
    thread are run by hand: ``calls`` holds each (call, args, its Deferred); ``woken``
    one entry per time it woke the engine."""
    import functools
    from types import SimpleNamespace

    from scrapy import Spider
    from scrapy.utils.test import get_crawler
    from twisted.internet import defer, reactor

    from scrapy_dedup_suite.frontier.scheduler import Scheduler

    class SiteSpider(Spider):
        name = "site"

    settings = {
        "REDIS_URL": redis_url, "CONCURRENT_REQUESTS": 8, "SCHEDULER_PERSIST": True,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 100,
    }  # fmt: skip
    crawler = get_crawler(SiteSpider, settings)
    woken: list[int] = []
    slot = SimpleNamespace(
        inprogress=set(), nextcall=SimpleNamespace(schedule=lambda: woken.append(1))
    )
    crawler.engine = SimpleNamespace(_slot=slot)
    scheduler = Scheduler.from_crawler(crawler)
    calls = []

    def in_thread(call, *args, **kwargs):
        calls.append((functools.partial(call, **kwargs), args, defer.Deferred()))
        return calls[-1][2]

    scheduler.taking.in_thread = in_thread
    monkeypatch.setattr(reactor, "running", True, raising=False)
    scheduler.open(SiteSpider())
    scheduler.incoming.in_thread = None  # (requests recorded here and now: no timing)
    return scheduler, slot, woken, calls


@pytest.mark.single_server
def test_the_next_requests_are_leased_in_a_thread_and_a_close_waits_to_give_them_back(
    server, redis_url, monkeypatch
):
    """Once half the requests taken are handed out, the next are leased in a thread
    (the call run here by hand: no timing); the engine is woken when they arrive, and a
    close while the call runs waits for it, then gives back all it took, so no lease is
    left to end."""
    from scrapy import Request

    scheduler, slot, woken, calls = threaded_scheduler(redis_url, monkeypatch)
    try:
        for i in range(30):
            assert scheduler.enqueue_request(Request(f"http://example.com/{i}"))
        handed = [scheduler.next_request() for _ in range(4)]  # 8 taken, 4 left
        assert all(handed) and len(calls) == 1  # the next 8 asked for in a thread
        call, args, deferred = calls[0]
        deferred.callback(call(*args))
        assert len(scheduler) == 4 + 8 and woken == [1]
        handed += [scheduler.next_request() for _ in range(7)]
        assert len(calls) == 1  # 5 left: no new call yet
        handed.append(scheduler.next_request())
        assert len(calls) == 2  # 4 left: the next 8 asked for
        for request in handed:  # the engine is done with these
            slot.inprogress.add(request)
            slot.inprogress.remove(request)
        closing = scheduler.close("shutdown")
        assert closing is not None and not closing.called  # waits for the call in a thread
        call, args, deferred = calls[1]
        deferred.callback(call(*args))
        assert closing.called
        shard = scheduler.queue.shards[0]
        assert server.hlen(shard.leases) == 0
        assert scheduler.stats.get_value("frontier/acknowledged") == 12
        assert scheduler.stats.get_value("frontier/released") == 4 + 8
        assert shard_counts(scheduler.queue, shard).waiting == 30 - 12
    finally:
        server.flushall()


@pytest.mark.single_server
def test_a_request_no_worker_can_rebuild_is_set_aside_and_tried_again_at_the_next_start(
    server, redis_url, caplog
):
    """An entry whose callback the spider lacks is logged and set aside (its lease
    ended at once, not given back again and again); dedup-info counts it; a worker's
    start puts it back in the queue."""
    from types import SimpleNamespace

    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.commands.dedup_info import frontier_view, render
    from scrapy_dedup_suite.frontier.codec import RequestCodec
    from scrapy_dedup_suite.frontier.scheduler import Scheduler

    class SiteSpider(Spider):
        name = "site"

        def parse_gone(self, response):
            pass

    settings = {"REDIS_URL": redis_url, "SCHEDULER_PERSIST": True}

    def scheduler_of(spider_class):
        crawler = get_crawler(spider_class, settings)
        crawler.engine = SimpleNamespace(_slot=SimpleNamespace(inprogress=set()))
        scheduler = Scheduler.from_crawler(crawler)
        scheduler.open(spider_class())
        return scheduler

    old = SiteSpider()
    entry = RequestCodec(old).encode(
        Request("http://example.com/gone", callback=old.parse_gone), priority_apart=True
    )

    class NewSiteSpider(Spider):  # (the deploy that lost the callback)
        name = "site"

    try:
        scheduler = scheduler_of(NewSiteSpider)
        shard = scheduler.queue.shards[0]
        scheduler.queue.push(shard, [(3, entry)])
        assert scheduler.enqueue_request(Request("http://example.com/ok"))
        assert scheduler.next_request().url == "http://example.com/ok"
        assert scheduler.next_request() is None
        assert "parse_gone" in caplog.text and shard.aside in caplog.text
        assert server.lrange(shard.aside, 0, -1) == [b"3 " + entry]
        assert server.hlen(shard.leases) == 1  # the one handed out only
        assert scheduler.stats.get_value("frontier/set_aside") == 1
        view = frontier_view(scheduler.crawler.settings, "site", server)
        assert view["set_aside"] == 1 and "1 request(s) set aside" in render(
            "site", {"frontier": view}
        )
        scheduler.close("finished")
        again = scheduler_of(SiteSpider)  # its start: back in the queue, highest first
        assert not server.exists(shard.aside)
        assert again.next_request().url == "http://example.com/gone"
        again.close("finished")
    finally:
        server.flushall()


@pytest.mark.single_server
def test_a_lease_call_in_a_thread_that_brings_nothing_still_wakes_the_engine(
    server, redis_url, monkeypatch
):
    """While it runs the crawl cannot end (requests may come); when it answers, the
    engine looks again at once rather than at its next heartbeat (5 s later)."""
    from scrapy import Request

    scheduler, slot, woken, calls = threaded_scheduler(redis_url, monkeypatch)
    try:
        for i in range(3):
            assert scheduler.enqueue_request(Request(f"http://example.com/{i}"))
        handed = [scheduler.next_request()]  # 3 taken, 2 left
        assert calls == []  # (the queue was just found empty)
        scheduler.looks.forget()  # (a second later)
        handed.append(scheduler.next_request())  # 1 left: the next asked for
        assert len(calls) == 1 and scheduler.has_pending_requests()
        call, args, deferred = calls[0]
        deferred.callback(call(*args))
        assert woken == [1] and len(scheduler) == 1
        handed.append(scheduler.next_request())
        for request in handed:
            slot.inprogress.add(request)
            slot.inprogress.remove(request)
        assert len(calls) == 1  # (the queue was just found empty)
        scheduler.looks.forget()  # (a second later)
        assert not scheduler.has_pending_requests()
        scheduler.close("finished")
    finally:
        server.flushall()


@pytest.mark.single_server
def test_a_worker_done_with_everything_is_idle_at_once_though_a_call_counted_its_leases(
    server, redis_url, monkeypatch
):
    """A lease call in a thread answers after some of this worker's requests were done
    and not yet acknowledged: it counts them as another worker's. Once this worker is
    done with all it took, the idle check looks again (carrying the acknowledgements)
    rather than trust that count (the clock stopped: no second passes)."""
    from scrapy import Request

    scheduler, slot, _, calls = threaded_scheduler(redis_url, monkeypatch)
    scheduler.clock = lambda: 0.0
    try:
        for i in range(16):
            assert scheduler.enqueue_request(Request(f"http://example.com/{i}"))
        handed = [scheduler.next_request() for _ in range(4)]  # 8 taken, 4 left
        assert len(calls) == 1
        for request in handed:  # done before the call in a thread answers
            slot.inprogress.add(request)
            slot.inprogress.remove(request)
        call, args, deferred = calls[0]
        deferred.callback(call(*args))
        assert scheduler.looks.seen[scheduler.queue.shards[0]].held == 4  # "another's"
        handed = [scheduler.next_request() for _ in range(12)]
        assert all(handed) and scheduler.next_request() is None
        for request in handed:
            slot.inprogress.add(request)
            slot.inprogress.remove(request)
        assert not scheduler.has_pending_requests()
        assert server.hlen(scheduler.queue.shards[0].leases) == 0
        scheduler.close("finished")
    finally:
        server.flushall()


@pytest.mark.single_server
def test_a_lease_call_in_a_thread_answering_after_the_last_request_was_done_counts_none(
    server, redis_url, monkeypatch
):
    """The same when the call in a thread answers (with nothing) after this worker was
    done with everything: its count is not trusted either."""
    from scrapy import Request

    scheduler, slot, _, calls = threaded_scheduler(redis_url, monkeypatch)
    scheduler.clock = lambda: 0.0
    try:
        for i in range(3):
            assert scheduler.enqueue_request(Request(f"http://example.com/{i}"))
        handed = [scheduler.next_request()]
        scheduler.looks.forget()  # (as if a second passed)
        handed += [scheduler.next_request(), scheduler.next_request()]
        assert len(calls) == 1 and len(scheduler) == 0
        for request in handed:  # all done while the call runs
            slot.inprogress.add(request)
            slot.inprogress.remove(request)
        call, args, deferred = calls[0]
        deferred.callback(call(*args))
        assert not scheduler.has_pending_requests()
        scheduler.close("finished")
    finally:
        server.flushall()


def test_the_frontier_takes_scrapy_s_and_scrapy_redis_s_dupefilter_for_its_own_only():
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.dedup.crawl_checks import dupefilter_for
    from scrapy_dedup_suite.dupefilter import RFPDupeFilter
    from scrapy_dedup_suite.exceptions import DedupConfigError

    class SiteSpider(Spider):
        name = "site"

    for replaced in ("scrapy.dupefilters.RFPDupeFilter", "scrapy_redis.dupefilter.RFPDupeFilter"):
        crawler = get_crawler(SiteSpider, {"DUPEFILTER_CLASS": replaced})
        df = dupefilter_for(crawler)
        assert type(df) is RFPDupeFilter and df.key == "site:dupefilter"  # scrapy-redis's set
    crawler = get_crawler(SiteSpider, {"DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"})
    with pytest.raises(DedupConfigError) as refused:
        dupefilter_for(crawler)
    said = str(refused.value)
    assert "'scrapy.dupefilters.BaseDupeFilter'" in said and "\n" not in said
    assert 'DUPEFILTER_CLASS = "scrapy_dedup_suite.dupefilter.RFPDupeFilter"' in said


@pytest.mark.single_server
def test_members_that_are_not_the_frontier_s_are_set_aside_and_the_good_ones_leased(
    server, make_backend, caplog
):
    """Data read from Redis is untrusted (issue 51): a member of `:later` or `:aside`
    without a priority, a lease whose value is garbage, a member "abc" of the queue (not
    a run of requests).
    Before, each stopped every lease call (a Lua error on a nil) or was lost; now each
    goes to the shard's `:bad` list as found, with one ERROR, and the good requests
    beside them are leased."""
    backend = make_backend()
    backend.open()
    queue = queue_for(server, backend)
    shard = queue.shards[0]
    queue.push(shard, [(0, b"good-0"), (5, b"good-5")])
    server.zadd(shard.later, {"garbage-without-a-space": 0, "7 good-later": 0})
    server.rpush(shard.aside, "also garbage", "3 good-aside")
    server.hset(shard.leases, "dead:1", "nonsense")
    server.zadd(shard.expiries, {"dead:1": 0})
    server.zadd(shard.queue, {"abc": -1_000_000})
    with caplog.at_level("ERROR"):
        back = queue.unaside(shard)
        leased = queue.call(shard, 60_000, take=10)
    assert back == 1
    entries = sorted(entry for _, _, entry in leased.requests)
    assert entries == [b"good-0", b"good-5", b"good-aside", b"good-later"]
    assert sorted(server.lrange(shard.bad, 0, -1)) == sorted(
        [b"also garbage", b"garbage-without-a-space", b"nonsense", b"queue abc"]
    )
    assert server.hlen(shard.leases) == 4 and not server.zscore(shard.expiries, "dead:1")
    assert server.zcard(shard.later) == 0 and server.llen(shard.aside) == 0
    said = [r.getMessage() for r in caplog.records if "not the frontier's" in r.getMessage()]
    assert len(said) == 2 and all(shard.bad in line for line in said)
    # And the next call is an ordinary one.
    assert queue.call(shard, 60_000, take=10).bad == 0


@pytest.mark.single_server
def test_a_request_that_comes_back_too_often_is_set_aside_and_named(server):
    """Each time a worker dies holding a request (its lease ends), the request comes
    back and counts it; past max_returns the call that reclaims it sets it aside
    instead, and answers its entry (for the worker to name it). Workers are always
    given the bare entry; a worker's start (unaside) gives it one more try, its count
    starting again."""
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(3, b"\x01poison"), (0, b"\x01fine")])
    for _ in range(2):
        dying = FrontierQueue(server, ["t:requests"])
        leased = dying.call(shard, 0, take=1, max_returns=2).requests  # dies at once
        assert leased[0][1:] == (3, b"\x01poison")
        answer = queue.call(shard, 60_000, max_returns=2)
        assert answer.reclaimed == 1 and answer.returned == []
    dying.call(shard, 0, take=1, max_returns=2)
    answer = queue.call(shard, 60_000, take=10, max_returns=2)
    assert answer.returned == [b"\x01poison"] and answer.reclaimed == 0
    assert [e for _, _, e in answer.requests] == [b"\x01fine"]
    assert server.lrange(shard.aside, 0, -1) == [b"3 \x01poison"]
    assert queue.unaside(shard) == 1
    once_more = FrontierQueue(server, ["t:requests"]).call(shard, 0, take=1, max_returns=1)
    assert once_more.requests[0][1:] == (3, b"\x01poison")
    assert queue.call(shard, 60_000, max_returns=1).reclaimed == 1  # (counted from 0 again)


@pytest.mark.single_server
def test_handback_and_unlater_set_aside_members_that_do_not_parse(server):
    """Garbage in the queue's members, in a run and in the pages kept for later:
    the hand-back moves every good request and keeps the rest in the shard's bad list,
    never a ValueError half-way (issue 51)."""
    from scrapy import Request
    from scrapy_redis import queue as srq

    from scrapy_dedup_suite.frontier.codec import RequestCodec
    from scrapy_dedup_suite.frontier.takeover import hand_back

    spider = _Spider()
    codec = RequestCodec(spider)
    queue = FrontierQueue(server, ["site:requests"])
    shard = queue.shards[0]
    good = [Request(f"http://example.com/{i}", callback=spider.parse) for i in range(3)]
    queue.push(shard, [(0, codec.encode(r, priority_apart=True)) for r in good])
    queue.push(shard, [(0, b"\x09not an entry")])
    server.zadd(shard.queue, {"abc": -1})
    later = codec.encode(Request("http://example.com/later", callback=spider.parse), True)
    not_due = 2**50  # (ms: the lease calls leave them; unlater moves them)
    server.zadd(shard.later, {b"2 " + later: not_due, b"x y": not_due, b"nospace": not_due})
    done = hand_back(queue, "site:requests", codec)
    assert done.moved == 4 and done.later == 1
    old = srq.PriorityQueue(server, spider, "%(spider)s:requests")
    urls = sorted(r.url for r in iter(old.pop, None))
    assert urls == sorted([r.url for r in good] + ["http://example.com/later"])
    assert sorted(server.lrange(shard.bad, 0, -1)) == sorted(
        [b"0 \x09not an entry", b"queue abc", b"x y", b"nospace"]
    )
    assert not server.exists(shard.later) and not server.exists(shard.queue)


@pytest.mark.single_server
def test_the_worker_that_sets_a_request_aside_for_coming_back_too_often_names_its_url(
    server, redis_url, caplog
):
    from scrapy import Request

    from .test_frontier_retry import RetrySpider, scheduler_for

    scheduler = scheduler_for(redis_url, FRONTIER_MAX_RETURNS=1)
    shard = scheduler.queue.shards[0]
    poison = Request("http://example.com/poison", callback=RetrySpider().parse)
    scheduler.queue.push(shard, [(0, scheduler.codec.encode(poison, priority_apart=True))])
    for _ in range(2):  # a worker dies holding it, twice
        FrontierQueue(server, [scheduler.queue_key]).call(shard, 0, take=1, max_returns=1)
    with caplog.at_level("ERROR"):
        scheduler.calls.call(shard, 0)
    said = [
        r.getMessage() for r in caplog.records if "taken by 2 workers in turn" in r.getMessage()
    ]
    assert len(said) == 1 and "<http://example.com/poison>" in said[0], said
    assert scheduler.stats.get_value("frontier/returned_aside") == 1
    assert scheduler.stats.get_value("frontier/reclaimed") is None  # (the first, by the dying)


@pytest.mark.single_server
def test_a_request_call_that_finds_nothing_asks_again_sooner_while_work_may_come(server, redis_url):
    """A worker that starts while another holds every request finds nothing; the engine
    asks again TAKE_EVERY (half a second) later, once however often it asked meanwhile,
    not at its next heartbeat (before, issue 51: the second worker's first page came
    5.6 s after its start); then twice as long each time nothing came, up to the
    heartbeat, and TAKE_EVERY again once work came. A worker that found no work anywhere
    (nothing waits, no lease is held) is not woken: the engine's heartbeat asks (issue
    56: an idle worker sent 14.6 commands a second, ``python -m bench.idle``). Time is a
    test clock."""
    from types import SimpleNamespace

    from scrapy import Request
    from twisted.internet.task import Clock

    from scrapy_dedup_suite.frontier.idle import TAKE_AT_MOST, TAKE_EVERY

    from .test_frontier_retry import RetrySpider, scheduler_for

    scheduler = scheduler_for(redis_url)
    clock = Clock()
    woken: list[float] = []
    slot = scheduler.crawler.engine._slot
    slot.nextcall = SimpleNamespace(schedule=lambda: woken.append(clock.seconds()))
    scheduler.waker.timer.call_later = clock.callLater
    assert scheduler.next_request() is None  # (nothing anywhere)
    clock.advance(10 * TAKE_AT_MOST)
    assert woken == []
    page = Request("http://example.com/later", callback=RetrySpider().parse)
    shard = scheduler.queue.shards[0]
    codec = scheduler.codec
    other = FrontierQueue(server, [scheduler.queue_key])  # another worker holds it
    other.push(other.shards[0], [(0, codec.encode(page, priority_apart=True))])
    assert len(other.call(other.shards[0], 60_000, take=1).requests) == 1
    scheduler.looks.forget()
    start = clock.seconds()
    asked = []
    while clock.seconds() - start < 4 * TAKE_AT_MOST:
        assert scheduler.next_request() is None  # (asked as the engine asks...)
        clock.advance(TAKE_EVERY / 2)
        if woken and woken[-1] - start not in asked:
            asked.append(woken[-1] - start)
            scheduler.looks.forget()  # (the wake's call looks again)
    waits = [b - a for a, b in zip([0.0, *asked], asked)]
    assert waits[:4] == [TAKE_EVERY, 2 * TAKE_EVERY, 4 * TAKE_EVERY, 8 * TAKE_EVERY], waits
    assert max(waits) == TAKE_AT_MOST, waits
    scheduler.queue.push(shard, [(0, codec.encode(page, priority_apart=True))])
    scheduler.looks.forget()
    assert scheduler.next_request().url == page.url  # (work came: patient no more)
    assert scheduler.waker.patience == TAKE_EVERY
    scheduler.close("finished")
    count = len(woken)
    clock.advance(10 * TAKE_AT_MOST)
    assert len(woken) == count  # (nothing asked after the close)


@pytest.mark.single_server
def test_a_worker_goes_idle_only_on_what_the_queue_says_now(server, redis_url):
    """A worker whose last look (less than LOOK_EVERY ago) found nothing, while another
    recorded its start request meanwhile (filtered here as seen): before, it went idle
    and closed at once on that stale look, its peer doing the whole crawl alone; now it
    looks again before it says nothing is pending. Time is the scheduler's clock,
    stopped."""
    from scrapy import Request

    from .test_frontier_retry import RetrySpider, scheduler_for

    scheduler = scheduler_for(redis_url)
    scheduler.clock = lambda: 1000.0
    scheduler.looks.forget()
    assert not scheduler.has_pending_requests()  # nothing anywhere: idle
    page = Request("http://example.com/start", callback=RetrySpider().parse)
    other = FrontierQueue(server, [scheduler.queue_key])
    other.push(other.shards[0], [(0, scheduler.codec.encode(page, priority_apart=True))])
    assert scheduler.has_pending_requests()


@pytest.mark.single_server
def test_an_idle_check_that_just_looked_at_every_shard_does_not_look_again(server, redis_url):
    """Issue 56 (quiet when idle): the idle check looks again before it says nothing is
    pending only when its first look was read back, not when that look was a call made
    now: one call per check of an idle worker, not two."""
    from .test_frontier_retry import scheduler_for

    scheduler = scheduler_for(redis_url)
    scheduler.clock = lambda: 1000.0

    def evalshas() -> int:
        return int(server.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    scheduler.looks.forget()  # (what the last look said is stale)
    before = evalshas()
    assert not scheduler.has_pending_requests()
    assert evalshas() - before == 1
    scheduler.close("finished")


@pytest.mark.single_server
def test_a_finished_page_is_acknowledged_within_ack_within_though_no_call_goes_to_its_shard(
    server, redis_url
):
    """A page done with no other call to its shard after it (a leaf page of the last
    shard a worker used, on a Cluster; the last page of a crawl): its acknowledgement is
    sent by a call of its own ACK_WITHIN later, not held back until a lease call or the
    lease's third (before, issue 51: pages a killed worker had parsed to the end were
    fetched again). Time is a test clock."""
    from scrapy import Request
    from twisted.internet.task import Clock

    from scrapy_dedup_suite.frontier.scheduler import ACK_WITHIN

    from .test_frontier_retry import RetrySpider, done, handed_out, scheduler_for

    scheduler = scheduler_for(redis_url, CONCURRENT_REQUESTS=1)
    clock = Clock()
    scheduler.acks_due.call_later = clock.callLater
    shard = scheduler.queue.shards[0]
    pages = [Request(f"http://example.com/{i}", callback=RetrySpider().parse) for i in range(2)]
    entries = [(0, scheduler.codec.encode(page, priority_apart=True)) for page in pages]
    scheduler.queue.push(shard, entries)  # (by another worker)
    scheduler.looks.forget()  # (its open saw the queue empty: as if half a second passed)
    first = handed_out(scheduler)
    assert server.hlen(shard.leases) == 1
    done(scheduler, first)
    clock.advance(ACK_WITHIN / 2)
    assert server.hlen(shard.leases) == 1  # (waits for a call that may take it along)
    clock.advance(ACK_WITHIN / 2)
    assert server.hlen(shard.leases) == 0
    assert scheduler.stats.get_value("frontier/acknowledged") == 1


@pytest.mark.single_server
def test_a_counter_that_is_not_a_number_is_set_aside_not_failed_on(server):
    """The reclaimed counter holding another's value: HINCRBY failed every lease call
    that reclaimed a lease (a worker retrying for ever); now the value goes to the bad
    list as found, the count starts again, and dedup-info reads it."""
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    server.hset(shard.counters, "reclaimed", "lots")
    queue.push(shard, [(0, b"\x01a")])
    FrontierQueue(server, ["t:requests"]).call(shard, 0, take=1)  # a worker dies
    answer = queue.call(shard, 60_000, take=1)
    assert answer.reclaimed == 1 and [e for _, _, e in answer.requests] == [b"\x01a"]
    assert server.lrange(shard.bad, 0, -1) == [b"counter reclaimed lots"]
    assert shard_counts(queue, shard).reclaimed == 1


@pytest.mark.single_server
def test_a_backend_whose_add_script_is_no_add_step_is_refused_at_the_open_in_one_line(
    server, redis_url, caplog
):
    """The frontier records and enqueues through a layout's declared add step (issue 52
    item 4); a backend of one's own whose add script is a plain LuaScript is refused at
    the open in one line naming what to declare, never spliced."""
    import logging

    from scrapy_dedup_suite.server.scripts import LuaScript

    from . import digest_backend
    from .test_frontier_retry import scheduler_for

    plain = LuaScript(
        "plain_digest_add",
        "-- include: prelude\nreturn {1 - redis.call('SADD', KEYS[1], ARGV[2])}\n",
    )

    class PlainLayout(digest_backend.OneDigestSet):
        add_script = plain

    class PlainBackend(digest_backend.DigestSetBackend):
        def __init__(self, server: Any, key: str) -> None:
            super().__init__(server, key)
            self.layout = PlainLayout(key)

    digest_backend.PlainBackend = PlainBackend  # (found by its dotted path)
    caplog.set_level(logging.ERROR)
    scheduler = scheduler_for(redis_url, DEDUP_BACKEND="tests.digest_backend.PlainBackend")
    assert scheduler.refusals.stopping
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "'plain_digest_add' is not declared as an add step" in errors[0]
    assert server.keys("*:frontier*") == []


def test_pending_acks_know_since_when_the_oldest_has_waited():
    """What the metrics' oldest acknowledgement wait reads (issue 56): set when the first
    waits, kept across a batch that takes them all and gives some back, cleared when
    none waits."""
    import time

    shard, other = Shard("{a}:frontier"), Shard("{b}:frontier")
    acks = PendingAcks()
    assert acks.since is None and len(acks) == 0
    before = time.monotonic()
    acks.add(shard, ["w:1"])
    first = acks.since
    assert first is not None and first >= before
    acks.add(other, ["w:2"])
    assert acks.since == first  # (the oldest's)
    batch = acks.take_all()
    assert acks.since is None and batch.since == first
    batch.take(shard)
    assert acks.give_back(batch) == 1 and acks.since == first  # (w:2 still waits)
    acks.take(other)
    assert acks.since is None and not acks
