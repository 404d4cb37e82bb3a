"""Each download slot's home shard (frontier/homes.py): on a Cluster, one host's
requests are recorded all over it (in the groups of their fingerprints) and wait in
one shard, where its delay and concurrency are kept for every worker. A request
recorded away from its home is held there under its worker's lease until it is moved;
a worker that dies in between leaves it to the next call there. On the single server
there is one shard: nothing moves, and the same checks hold."""

from __future__ import annotations

import hashlib
import time

from scrapy_dedup_suite.backends.compact import CompactBackend
from scrapy_dedup_suite.frontier import homes
from scrapy_dedup_suite.frontier.homes import crawl_queue, move
from scrapy_dedup_suite.frontier.queue import FrontierQueue, Shard
from scrapy_dedup_suite.frontier.record import record_and_enqueue
from scrapy_dedup_suite.frontier.slot_homes import Homes, slot_name
from scrapy_dedup_suite.server.cluster import node_of
from scrapy_dedup_suite.server.connection import server_time_ms

from .test_frontier_slots import tagged

ON_CLUSTER = True

HOUR = 3600.0
PAGES = 40


def recorded(server, move_ms: int = 60_000):
    """A compact filter of four groups (on the Cluster: in several slots), a worker's
    queue beside it, and the moves of PAGES requests of one host that worker recorded
    (a delay of an hour): the filter, the queue, the requests, the moves."""
    backend = CompactBackend(server, "t:dedup", capacity=5_000, shards=4)
    backend.open()
    queue = FrontierQueue.for_backend(backend, "t:requests")
    queue.move_ms = move_ms
    fingerprints = [hashlib.sha1(b"%d" % i).hexdigest() for i in range(PAGES)]
    requests = [(0, tagged(f"http://a.test/{i}", DOWNLOAD_DELAY=HOUR)) for i in range(PAGES)]
    moves: list = []
    seen, failed = record_and_enqueue(
        backend, queue, fingerprints, [None] * PAGES, requests, moves=moves
    )
    assert failed == [] and seen == [False] * PAGES
    return backend, queue, requests, moves


def by_name(shard: Shard) -> str:
    return shard.queue


def home_of(queue: FrontierQueue, entry: bytes) -> Shard:
    return queue.homes.of(entry) or queue.shards[0]


def waiting(server, shard: Shard) -> int:
    return int(server.hget(shard.counters, "waiting") or 0)


def test_a_slot_s_home_is_the_same_for_every_worker_whatever_the_order_of_its_shards():
    shards = [Shard(f"{{t{n}}}:frontier") for n in range(3)]
    entry = tagged("http://a.test/0")
    assert slot_name(entry) == b"a.test" and slot_name(b"\x03\x00" + entry) == b"a.test"
    assert slot_name(b"\x01http://a.test/0") is None and slot_name(b"\x05\x09short") is None
    assert Homes(shards, by_name).of(entry) == Homes(shards[::-1], by_name).of(entry)
    assert Homes(shards[:1], by_name).of(entry) is None  # (one shard: nothing moves)
    names = {Homes(shards, by_name).of(tagged(f"http://h{n}.test/")) for n in range(30)}
    assert names == set(shards)  # (hosts spread over the shards)


def test_a_host_s_requests_recorded_all_over_wait_in_its_home_shard(server, topology):
    """Recorded in four groups' shards; each held where it was recorded, moved home,
    then its lease acknowledged: the host's one queue hands out one request an hour,
    whoever recorded the others, and nothing is left held anywhere."""
    _, queue, requests, moves = recorded(server)
    home = home_of(queue, requests[0][1])
    if topology == "cluster":
        assert len(queue.shards) > 1 and 0 < len(moves) < PAGES  # (recorded all over)
        origins = {one.origin for one in moves}
        assert home not in origins and all(server.hlen(s.leases) for s in origins)
    else:
        assert moves == []
    done, errors = move(queue, moves)
    assert errors == [] and done == moves
    for origin in {one.origin for one in moves}:
        queue.call(origin, 60_000, acks=[one.lease_id for one in moves if one.origin == origin])
    assert [server.hlen(shard.leases) for shard in queue.shards] == [0] * len(queue.shards)
    assert [waiting(server, shard) for shard in queue.shards if shard != home] == [0] * (
        len(queue.shards) - 1
    )
    first = queue.call(home, 60_000, take=PAGES)  # (the first now, the next in an hour)
    assert len(first.requests) == 2 and first.holds[0] == 0.0  # (in the order they came)
    assert 3599 < first.holds[1] <= 3600
    assert waiting(server, home) == PAGES - 2  # (every other one there, its turn to come)
    for shard in queue.shards:
        assert queue.call(shard, 60_000, take=PAGES).requests == []  # (one an hour)


def test_requests_held_to_move_by_a_worker_that_died_are_moved_by_the_next_call(server, topology):
    """The worker dies after its record call, before it moved what it holds: each
    lease ends (1 ms) and the next call to that shard, by another worker, hands it the
    requests to move; it moves them home and acknowledges them. Every request waits at
    home once, none is lost, none stays held."""
    backend, dead, requests, moves = recorded(server, move_ms=1)
    live = crawl_queue(backend, "t:requests", 60_000)  # (a worker's: it moves them)
    assert live.homes.shards == dead.homes.shards and live.worker != dead.worker
    moved = 0
    deadline = time.monotonic() + 30
    while any(server.hlen(shard.leases) for shard in live.shards):
        assert time.monotonic() < deadline, "the held requests were never moved"
        moved += sum(live.call(shard, 60_000).moved for shard in live.shards)
    assert moved == len(moves) and (moves != []) == (topology == "cluster")
    home = home_of(live, requests[0][1])
    assert waiting(server, home) == PAGES
    assert sum(waiting(server, shard) for shard in live.shards) == PAGES


def test_a_shard_found_empty_is_called_less_and_less_often_until_this_worker_sends_there():
    """On a Cluster most queue shards may be empty (the hosts' homes hold the requests):
    a worker asks one found empty again after TAKE_EVERY, doubled while it stays empty,
    up to TAKE_AT_MOST; one with requests or leases keeps TAKE_EVERY. Enqueueing to a
    shard forgets what that shard said, and only that one. (Before, a worker's every
    enqueue and every page done forgot every shard, and its next ask called all 16 of
    a compact filter's groups on a Cluster: 11.9 lease calls a page, 2.3 since.)"""
    from scrapy_dedup_suite.frontier.idle import TAKE_AT_MOST, TAKE_EVERY, ShardLooks

    now = [0.0]
    looks = ShardLooks(lambda: now[0])
    empty, busy = Shard("{a}:frontier"), Shard("{b}:frontier")

    def asked(at: float) -> list[Shard]:
        now[0] = at
        return list(looks.to_take([empty, busy]))

    looks.saw(empty, 0, 0, None)
    looks.saw(busy, 0, 2, None, drained=True)  # (another worker's leases)
    waits, at = [], 0.0
    while len(waits) < 6:
        step = at
        while empty not in asked(step):
            step += 0.25
        waits.append(step - at)
        at = step
        looks.saw(empty, 0, 0, None)  # (still empty)
    assert waits[0] == TAKE_EVERY and waits == sorted(waits) and waits[-1] == TAKE_AT_MOST
    looks.saw(busy, 0, 2, None, drained=True)
    assert busy not in asked(at + TAKE_EVERY / 2) and busy in asked(at + TAKE_EVERY)
    looks.saw(busy, 0, 2, None, drained=True)
    looks.forget({empty})  # (this worker enqueued there)
    assert asked(now[0]) == [empty]  # (and what the other said is still known)
    looks.forget_held()  # (done with all it took: where leases were held, look again)
    assert busy not in looks.seen


def test_a_request_an_older_version_gave_back_on_its_way_home_is_still_crawled(server):
    """A worker of the version before homes, in a rolling upgrade, takes back a lease
    that held a request on its way home and puts it in the queue as it is, marked
    (byte 6): a lease call hands it out without the mark, so it decodes and is
    crawled, never set aside again and again."""
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    entry = tagged("http://a.test/0")
    queue.push(shard, [(0, b"\x03\x01\x06" + entry)])  # (given back once, marked)
    leased = queue.call(shard, 60_000, take=5)
    assert [e for _, _, e in leased.requests] == [b"\x01http://a.test/0"]


def test_what_the_acknowledgement_of_moves_reclaims_is_counted(server, topology, monkeypatch):
    """rehome acknowledges the moves in a call of its own to their origin, which reclaims
    what ended there meanwhile too: another worker's lease that ended between the call
    that handed the moves and that one is counted in the handing call's figures (what
    frontier/reclaimed counts), not dropped."""
    backend, _, _, moves = recorded(server, move_ms=1)
    if topology == "single":
        assert moves == []  # (one shard: nothing moves, nothing to acknowledge)
        return
    origin = moves[0].origin
    other = FrontierQueue.for_backend(backend, "t:requests")
    other.push(origin, [(0, tagged("http://b.test/0"))])
    clock = node_of(server, origin.leases)
    real = homes.move

    def move_then_a_lease_ends(queue: FrontierQueue, some: list) -> tuple:
        answer = real(queue, some)
        held = other.call(origin, 1, take=1)  # (a lease of 1 ms)
        assert len(held.requests) == 1
        ends = server_time_ms(clock) + 2
        while server_time_ms(clock) < ends:
            pass
        return answer

    monkeypatch.setattr(homes, "move", move_then_a_lease_ends)
    live = crawl_queue(backend, "t:requests", 60_000)
    reclaimed = moved = 0
    deadline = time.monotonic() + 30
    while not moved:
        assert time.monotonic() < deadline, "the held requests were never handed to move"
        leased = live.call(origin, 60_000)
        reclaimed, moved = reclaimed + leased.reclaimed, leased.moved
    assert moved == sum(one.origin == origin for one in moves)
    assert reclaimed == 1 and server.hlen(origin.leases) == 0
