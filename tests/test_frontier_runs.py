"""The frontier's queue in runs (``lua/frontier_runs.lua``) against a model of it: one
list per priority, the highest first, first in first out within one, a request given
back at the front of its priority. Pushes, takes and give-backs in random order, with
one priority for all, a few, or one per request, must come out as the model says."""

from __future__ import annotations

import random

import pytest

from scrapy_dedup_suite.frontier.entries import PRIORITY_BOUND, parse_run
from scrapy_dedup_suite.frontier.figures import shard_counts
from scrapy_dedup_suite.frontier.queue import FrontierQueue


class Model:
    """The queue as lists per priority."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes]] = []

    def push(self, priority: int, entry: bytes, front: bool = False) -> None:
        at = len(self.items)
        for i, (p, _) in enumerate(self.items):
            if p < priority or (front and p == priority):
                at = i
                break
        self.items.insert(at, (priority, entry))

    def take(self, n: int) -> list[tuple[int, bytes]]:
        got, self.items = self.items[:n], self.items[n:]
        return got


@pytest.mark.single_server
@pytest.mark.parametrize("priorities", [1, 5, 10_000])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("size", ["short", "long"])
def test_runs_come_out_as_lists_per_priority_would(server, priorities, seed, size):
    """``short`` entries: runs reach 255 requests; ``long`` ones (up to 2 KB): their 4 KB."""
    rng = random.Random(seed)
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    model = Model()
    made = 0
    for _ in range(150):
        roll = rng.random()
        if roll < 0.55:  # a page's children, at the back of their priorities
            batch = []
            one = rng.random() < 0.5  # (a page's children often share a priority)
            priority = rng.randrange(priorities) - priorities // 2
            for _ in range(rng.randint(1, 40)):
                if not one:
                    priority = rng.randrange(priorities) - priorities // 2
                pad = b"x" * (rng.randrange(40, 2000) if size == "long" else 0)
                batch.append((priority, b"r%d" % made + pad))
                made += 1
            queue.push(shard, batch)
            for priority, entry in batch:
                model.push(priority, entry)
        else:  # a worker takes some, gives some back (to the front), keeps the rest
            n = rng.randint(1, 30)
            leased = queue.call(shard, 60_000, take=n).requests
            assert [(p, e) for _, p, e in leased] == model.take(n)
            share = rng.choice([0.2, 0.6, 1.0])
            back = [item for item in leased if rng.random() < share]
            rng.shuffle(back)  # (given back in any order: each to the front of its priority)
            queue.call(shard, 60_000, release=[lease_id for lease_id, _, _ in back])
            for _, priority, entry in reversed(back):
                model.push(priority, entry, front=True)
        assert shard_counts(queue, shard).waiting == len(model.items)
    rest = queue.call(shard, 60_000, take=100_000).requests
    assert [(p, e) for _, p, e in rest] == model.take(100_000)
    assert not server.exists(shard.queue) and shard_counts(queue, shard).waiting == 0


@pytest.mark.single_server
def test_runs_fill_to_the_allocator_s_4_kb_and_a_longer_request_is_a_run_alone(server):
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"e%03d" % i + b"x" * 96) for i in range(160)])  # (a page's links)
    sizes = [len(member) for member in server.zrange(shard.queue, 0, -1)]
    assert all(4090 - 107 < size <= 4090 for size in sizes[:-1]) and sizes[-1] <= 4090
    queue.push(shard, [(i, b"p%03d" % i + b"x" * 96) for i in range(1, 161)])  # (one each)
    queue.push(shard, [(0, b"big" + b"x" * 5000)])
    members = server.zrange(shard.queue, 0, -1)
    runs = [parse_run(member) for member in members]
    assert all(run for run in runs)
    assert sum(len(run or []) for run in runs) == 321 == shard_counts(queue, shard).waiting
    assert [len(m) > 4090 for m in members].count(True) == 1  # (the long one, alone)
    assert sum(len(m) for m in members) / len(members) > 4090 / 2  # (half full at least)


@pytest.mark.single_server
def test_a_priority_beyond_fifteen_digits_is_kept_at_the_bound(server):
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"zero"), (10**30, b"huge"), (-(10**30), b"tiny"), (7, b"seven")])
    got = queue.call(shard, 60_000, take=10).requests
    assert [(p, e) for _, p, e in got] == [
        (PRIORITY_BOUND, b"huge"), (7, b"seven"), (0, b"zero"), (-PRIORITY_BOUND, b"tiny"),
    ]  # fmt: skip


@pytest.mark.single_server
def test_a_member_of_the_queue_that_is_not_a_run_is_set_aside_and_the_runs_beside_it_come_out(
    server,
):
    queue = FrontierQueue(server, ["t:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(3, b"a"), (1, b"b")])
    server.zadd(shard.queue, {b"\x80\x00\x00\x00\x00\x00" + b"2,99:short": -2, b"5": -5})
    got = queue.call(shard, 60_000, take=10)
    assert [(p, e) for _, p, e in got.requests] == [(3, b"a"), (1, b"b")]
    assert got.bad == 2
    assert server.lrange(shard.bad, 0, -1) == [
        b"queue 5", b"queue \x80\x00\x00\x00\x00\x002,99:short",
    ]  # fmt: skip
