"""What the frontier's queue holds, as ``dedup-info`` and the metrics show it: per shard
(:func:`shard_counts`, three round trips whatever the queue's size), for the crawl
(:func:`crawl_figures`, :func:`crawl_status`), and its download slots with the most
requests waiting (:func:`busiest_slots`)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends.keys import as_str, memory_usage
from .entries import whole_priority
from .queue import FrontierQueue, Shard

#: A worker counts as running when its last call is at most this old (seconds), or
#: FRONTIER_LEASE if longer: a live worker's keeper renews every third of it.
SEEN_WITHIN = 60.0


def server_ms(server: Any) -> float:
    """The server's clock in ms, to the microsecond: a lease that ends this millisecond
    reads as ended once it has (``connection.server_time_ms`` keeps whole ms, as the
    expiries are written)."""
    seconds, micros = server.time()
    return int(seconds) * 1000 + int(micros) / 1000


@dataclass
class ShardCounts:
    """What one shard of the queue holds."""

    queue: str
    waiting: int
    held: int
    #: Lease ids per worker (the part before the last ':').
    held_by: dict[str, int]
    #: Seconds until the oldest lease ends (< 0: ended, not yet reclaimed), or None.
    oldest_lease_ends_in: float | None
    reclaimed: int
    memory_bytes: int
    #: Requests set aside: no worker could decode them.
    aside: int = 0
    #: Pages to try again later, and seconds until the first is due (< 0: due).
    later: int = 0
    next_due_in: float | None = None
    #: Members of its keys that were not the frontier's, set aside as found.
    bad: int = 0
    #: Workers whose calls reached the shard in the last hour: seconds since the last.
    seen: dict[str, float] = field(default_factory=dict)


def shard_counts(
    queue: FrontierQueue, shard: Shard, now_ms: float | None = None, memory: bool = True
) -> ShardCounts:
    """``shard``'s figures: its keys' types checked (one of another type is refused,
    naming it), then one read of them all and, if ``memory``, one of their memory
    (MEMORY USAGE; else 0); times from ``now_ms`` (else the server's clock, read once
    more)."""
    queue.check(shard)
    pipe = queue.server.pipeline(transaction=False)
    pipe.hmget(shard.counters, ["waiting", "reclaimed"])
    pipe.exists(shard.queue, shard.slots)  # (the shard's queue, its slots' queues)
    pipe.hkeys(shard.leases)
    pipe.zrange(shard.expiries, 0, 0, withscores=True)
    pipe.llen(shard.aside)
    pipe.zcard(shard.later)
    pipe.zrange(shard.later, 0, 0, withscores=True)
    pipe.llen(shard.bad)
    pipe.zrange(shard.workers, 0, -1, withscores=True)
    counters, there, ids, expiry, aside, later, due, bad, workers = pipe.execute()
    now_ms = server_ms(queue.server) if now_ms is None else now_ms

    def since(first: list[Any]) -> float | None:
        return (float(first[0][1]) - now_ms) / 1000 if first else None

    waiting = whole_priority(counters[0] or b"0") or 0
    held_by: dict[str, int] = {}
    for lease_id in ids:
        worker = as_str(lease_id).rpartition(":")[0]
        held_by[worker] = held_by.get(worker, 0) + 1
    return ShardCounts(
        shard.queue,
        max(0, waiting) if there else 0,  # (see frontier_count)
        len(ids),
        held_by,
        since(expiry),
        whole_priority(counters[1] or b"0") or 0,
        memory_usage(queue.server, queue.keys_of(shard)) if memory else 0,
        int(aside),
        int(later),
        since(due),
        int(bad),
        {as_str(name): max(0.0, (now_ms - float(ms)) / 1000) for name, ms in workers},
    )


@dataclass
class SlotFigures:
    """One download slot of a shard (``lua/frontier_slots.lua``), as dedup-info lists it."""

    name: str
    waiting: int
    leased: int
    concurrency: int
    #: Its delay (s): its settings', or a delay a worker learned (Crawl-delay), the larger.
    delay: float
    #: Seconds until its next request may be sent (0: now), and until a site's refusal
    #: stops blocking it (None: not blocked); the refusals its back-off counted.
    next_in: float
    blocked_for: float | None
    refusals: int


def slot_figures(name: Any, line: Any, now_ms: float) -> SlotFigures | None:
    """A slot's state read back (untrusted: None for a line that is not the frontier's),
    as ``frontier_slot_state`` reads it: five numbers, then three or four more, else
    none of those (an older version's line)."""
    fields = as_str(line).split(" ")
    head, rest = fields[:5], fields[5:]
    if len(head) < 5 or not all(f.isdigit() and len(f) <= 15 for f in head):
        return None
    if len(rest) not in (3, 4) or not all(f.isdigit() and len(f) <= 15 for f in rest):
        rest = []
    n = [int(f) for f in head + rest] + [0] * (4 - len(rest))
    next_at, leased, delay, _, conc, blocked, strikes, learned, waiting = n
    return SlotFigures(
        as_str(name), waiting, leased, conc, max(delay, learned) / 1000,
        round(max(0.0, (next_at - now_ms) / 1000), 3),
        round((blocked - now_ms) / 1000, 3) if blocked > now_ms else None, strikes,
    )  # fmt: skip


def busiest_slots(queue: FrontierQueue, now_ms: float, top: int) -> tuple[int, list[SlotFigures]]:
    """How many download slots the shards keep, and the ``top`` with the most requests
    waiting (then the most leased). Reads every slot's state (HSCAN, 1,000 at a time):
    costs the slots that exist."""
    counted = [0]

    def read() -> Iterator[SlotFigures]:
        for shard in queue.shards:
            for name, line in queue.server.hscan_iter(shard.slots, count=1000):
                counted[0] += 1
                figures = slot_figures(name, line, now_ms)
                if figures is not None:
                    yield figures

    ranked = heapq.nsmallest(top, read(), key=lambda f: (-f.waiting, -f.leased, f.name))
    return counted[0], ranked


def crawl_figures(
    queue: FrontierQueue, lease: float, retry_wait: float, slots: int = 0
) -> dict[str, Any]:
    """The queue's figures over its shards (see ``dedup-info``'s JSON), with the crawl's
    status (:func:`crawl_status`) for FRONTIER_LEASE ``lease`` and the wait for pages to
    try again ``retry_wait`` (:func:`~.frontier_options.retry_wait`), and with ``slots``
    the download slots with the most requests waiting (:func:`busiest_slots`). The
    server's clock is read once (a Cluster's: one node's; leases keep to theirs no
    better)."""
    now_ms = server_ms(queue.server)
    shards = [shard_counts(queue, shard, now_ms) for shard in queue.shards]
    held_by: dict[str, int] = {}
    seen: dict[str, float] = {}
    for s in shards:
        for worker, n in s.held_by.items():
            held_by[worker] = held_by.get(worker, 0) + n
        for worker, ago in s.seen.items():
            seen[worker] = min(ago, seen.get(worker, ago))
    ends = [s.oldest_lease_ends_in for s in shards if s.oldest_lease_ends_in is not None]
    dues = [s.next_due_in for s in shards if s.next_due_in is not None]
    waiting = sum(s.waiting for s in shards)
    memory = sum(s.memory_bytes for s in shards)
    held = waiting + sum(s.held + s.aside + s.later for s in shards)
    within = max(SEEN_WITHIN, lease)
    view: dict[str, Any] = {
        "shards": len(shards),
        "queue": shards[0].queue,
        "waiting": waiting,
        "leased": sum(s.held for s in shards),
        "leased_by": held_by,
        "oldest_lease_ends_in": min(ends) if ends else None,
        "reclaimed": sum(s.reclaimed for s in shards),
        "set_aside": sum(s.aside for s in shards),
        "bad": sum(s.bad for s in shards),
        "retry_later": sum(s.later for s in shards),
        "next_retry_in": min(dues) if dues else None,
        "memory_bytes": memory,
        "bytes_per_request": round(memory / held, 1) if held else None,
        "workers_seen": {w: round(ago, 1) for w, ago in sorted(seen.items())},
        "workers_seen_within": within,
        "workers_seen_lately": sum(1 for ago in seen.values() if ago <= within),
        "per_shard": [asdict(s) for s in shards],
    }
    if slots:
        view["slots"], busiest = busiest_slots(queue, now_ms, slots)
        view["busiest_slots"] = [asdict(f) for f in busiest]
    view["status"], view["status_detail"] = crawl_status(view, lease, retry_wait)
    return view


def crawl_status(view: dict[str, Any], lease: float, retry_wait: float) -> tuple[str, str]:
    """Where a crawl of the frontier stands, from its figures (:func:`crawl_figures`),
    FRONTIER_LEASE and how long a worker waits for a page to try again
    (FRONTIER_WAIT_FOR_RETRIES or SCHEDULER_IDLE_BEFORE_CLOSE, the longer):

    - ``finished``: nothing waits, no lease is held, and no page waits to be tried again
      within ``retry_wait`` (those due later are left for the next run, said);
    - ``stalled``: a lease ended unrenewed: its worker stopped (when it was last seen);
    - ``running``: workers hold leases they renew (how many were seen lately);
    - ``retrying``: only pages that wait to be tried again, the first within the wait;
    - ``waiting``: requests wait and no worker holds a lease (workers seen lately, if any).
    """
    waiting, leased, later = view["waiting"], view["leased"], view["retry_later"]
    due = view["next_retry_in"]
    within, recent = view["workers_seen_within"], view["workers_seen_lately"]
    seen = f"{recent:,} worker(s) seen in the last {within:,.0f} s"
    if not waiting and not leased and (not later or due > retry_wait):
        if not later:
            return "finished", "nothing waits, no lease is held, no page waits to be tried again"
        return "finished", (
            f"nothing waits and no lease is held; {later:,} page(s) wait to be tried again, "
            f"the first in {due:,.0f} s, after the {retry_wait:,.0f} s a worker waits for "
            "them: left for the next run"
        )
    ends = view["oldest_lease_ends_in"]
    if ends is not None and ends < 0:
        holders = sorted(view["leased_by"])
        stale = [w for w in holders if view["workers_seen"].get(w, within + 1) > lease]
        stale = stale or holders
        names = ", ".join(
            f"{w} (last seen {view['workers_seen'][w]:,.0f} s ago)"
            if w in view["workers_seen"]
            else f"{w} (not seen for an hour)"
            for w in stale[:5]
        )
        return "stalled", (
            f"leases held by worker(s) not seen since their lease ended: {names or '?'}; "
            f"the next worker's call takes their requests back ({seen})"
        )
    if leased:
        return "running", f"{seen}; {len(view['leased_by']):,} hold leases they renew"
    if not waiting:
        when = f"the first in {due:,.0f} s" if due > 0 else "the first now"
        return "retrying", f"only pages that wait to be tried again ({when}; {seen})"
    if recent:
        return "waiting", f"requests wait and no worker holds a lease ({seen})"
    return "waiting", (
        f"requests wait, no worker holds a lease and none was seen in the last {within:,.0f} s: "
        "is a worker running?"
    )
