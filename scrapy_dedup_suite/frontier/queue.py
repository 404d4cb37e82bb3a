"""The frontier's queue in Redis: requests waiting, and the leases workers hold.

The queue is split in shards. On a single server there is one, so priorities are exact;
on a Cluster there is one per slot of the dupefilter's groups (its blocks, shards), so
that recording a request and enqueueing it stay one call per slot group (a request
recorded and never enqueued would be lost: its parent, fetched again, finds it seen)
and no single key holds the frontier. A shard (``lua/frontier.lua``):

- ``{tag}:frontier``: a sorted set of runs of encoded requests (:mod:`.codec`), up to
  4 KB each, each request with its priority, the highest priority first and first in
  first out within one (``lua/frontier_runs.lua``): a spider that gives each request a
  priority of its own pays no key per priority, and a run costs its requests about
  their length plus 3 to 6 bytes;
- ``{tag}:frontier:leases``: a hash, lease id -> priority and entry, of the requests
  workers took and have not acknowledged (and, on a Cluster, of those recorded here on
  their way to their download slot's home shard: :mod:`.homes`);
  ``{tag}:frontier:expiries``: a sorted set, lease id -> when the lease ends (the
  server's clock, ms);
- ``{tag}:frontier:counters``: a hash (``reclaimed``: leases that ended unacknowledged
  and went back to the queue; ``waiting``: requests in the queue);
- ``{tag}:frontier:aside``: a list of the requests a worker could not decode (their
  callback gone from the spider, a serializer changed), set aside rather than given
  back again and again; a worker's start gives them another try;
- ``{tag}:frontier:later``: a sorted set, "priority entry" -> when it is due (the
  server's clock, ms), of the pages whose download failed for good, to try again
  (FRONTIER_RETRY_TIMES); the lease calls put those due back at the front of the queue;
- ``{tag}:frontier:workers``: a sorted set, worker -> the server's time (ms) of its last
  lease call, so that ``dedup-info`` and the metrics can say who is crawling; a worker
  not seen for an hour is dropped by the next call.

A worker's one call to a shard (``lua/frontier_lease.lua``) acknowledges, renews and
gives back the leases it names, returns what a dead worker held past its lease to the
front of the queue, then leases up to n requests.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.keys import as_str, chunks, frontier_key, slot_of
from ..exceptions import DedupConfigError
from ..server import scripts
from ..server.cluster import is_cluster
from .entries import parse_member, stored_priority
from .server_clock import ServerClock
from .slot_homes import Homes

logger = logging.getLogger(__name__)


def worker_name() -> str:
    """A worker as the queue names it: its host, process and a token of its own
    (``web-3/4121/9f2c``); what the host name holds beyond letters, digits, ``.``,
    ``_`` and ``-`` is dropped (a lease id is the name, ``:`` and a number)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "", socket.gethostname())[:40] or "host"
    return f"{host}/{os.getpid()}/{secrets.token_hex(2)}"


#: After the worker's name in the lease id of a request on its way to its home shard.
MOVE_MARK = "m"


def is_move(lease_id: str) -> bool:
    """Whether ``lease_id`` holds a request on its way home (:mod:`.homes`), not a page."""
    return lease_id.rpartition(":")[2].startswith(MOVE_MARK)


@dataclass(frozen=True)
class Shard:
    """The keys of one shard of the queue, all in one slot."""

    queue: str

    @property
    def leases(self) -> str:
        return f"{self.queue}:leases"

    @property
    def expiries(self) -> str:
        return f"{self.queue}:expiries"

    @property
    def counters(self) -> str:
        return f"{self.queue}:counters"

    @property
    def aside(self) -> str:
        return f"{self.queue}:aside"

    @property
    def later(self) -> str:
        return f"{self.queue}:later"

    @property
    def bad(self) -> str:
        """Members of the shard's keys that are not the frontier's, set aside as found."""
        return f"{self.queue}:bad"

    @property
    def workers(self) -> str:
        return f"{self.queue}:workers"

    @property
    def slots(self) -> str:
        """Per download slot its state (``lua/frontier_slots.lua``)."""
        return f"{self.queue}:slots"

    @property
    def ready(self) -> str:
        """The slots with requests, by when their next may be handed out."""
        return f"{self.queue}:ready"

    def slot_queue(self, name: str | bytes) -> str | bytes:
        """The queue of the requests of download slot ``name``."""
        if isinstance(name, bytes):
            return f"{self.queue}:slot:".encode() + name
        return f"{self.queue}:slot:{name}"

    @property
    def lease_keys(self) -> list[str]:
        return [
            self.queue, self.leases, self.expiries, self.counters, self.aside, self.later,
            self.bad, self.workers,
        ]  # fmt: skip

    @property
    def record_keys(self) -> list[str]:
        """The keys a record-and-enqueue call ends with (``frontier_take``)."""
        return [self.queue, self.leases, self.expiries, self.counters]


@dataclass
class Leased:
    """What one call to a shard answered."""

    #: Runs of requests waiting in the shard, and leases held there (by any worker),
    #: after the call.
    waiting: int
    held: int
    #: Leases of dead workers this call returned to the queue.
    reclaimed: int
    #: The requests leased: (lease id, priority, entry).
    requests: list[tuple[str, int, bytes]] = field(default_factory=list)
    #: Members of the shard's keys that were not the frontier's, set aside by this call.
    bad: int = 0
    #: Entries set aside by this call for coming back too often (FRONTIER_MAX_RETURNS).
    returned: list[bytes] = field(default_factory=list)
    #: Requests on their way to their slot's home shard whose lease ended, now leased
    #: to this worker to move (:mod:`.homes`): (lease id, priority, entry).
    moves: list[tuple[str, int, bytes]] = field(default_factory=list)
    #: How many of those this call's worker moved (:func:`.homes.rehome`).
    moved: int = 0
    #: Seconds until the first page kept for later is due or a slot is ready, or None.
    due_in: float | None = None
    #: Per request leased, the seconds to hold it before it is sent (its slot's turn),
    #: from ``received`` (``time.monotonic()`` when the answer came).
    holds: list[float] = field(default_factory=list)
    received: float = 0.0


class FrontierQueue:
    """The queue's shards on ``server``: one at ``anchors[0]``'s slot on a single
    server; on a Cluster one per distinct slot of ``anchors`` (the dupefilter's
    groups)."""

    def __init__(self, server: Any, anchors: Sequence[str]) -> None:
        self.server = server
        self.cluster = is_cluster(server)
        shards: dict[int, Shard] = {}
        for anchor in anchors if self.cluster else anchors[:1]:
            shards.setdefault(slot_of(anchor), Shard(frontier_key(anchor)))
        self.shards = list(shards.values())
        self._by_slot = shards
        #: Each download slot's home shard; how long a request recorded elsewhere is held
        #: (ms) until moved there; who moves those a call hands over (None: a command's
        #: look; they stay held until their lease ends again). See :mod:`.homes`.
        self.homes = Homes(self.shards, lambda shard: shard.queue)
        self.move_ms = 60_000
        self.on_moves: Callable[[Shard, Leased], None] | None = None
        #: This worker's lease ids start with it (and count up): where it runs, and a
        #: token of its own.
        self.worker = f"{worker_name()}:"
        #: Whether its calls say it is a worker of the crawl (``{tag}:frontier:workers``),
        #: not a command's look.
        self.crawling = False
        self._next_id = 1
        self._ids = threading.Lock()  # (calls run on the reactor thread and in threads)
        #: Each shard's server's clock as this process's (requests held for their
        #: slot's turn; a Cluster's nodes keep clocks of their own).
        self.clocks: dict[Shard, ServerClock] = {shard: ServerClock() for shard in self.shards}

    @classmethod
    def for_backend(cls, backend: Any, queue_key: str) -> FrontierQueue:
        """The queue beside ``backend``'s fingerprints: at ``queue_key`` on a single
        server; on a Cluster in the slot of each of its groups' stamps (the keys every
        add call starts with), or of its key (``set``, one slot)."""
        anchors = [queue_key]
        if is_cluster(backend.server):
            anchors = list(getattr(backend, "stamp_keys", None) or [backend.key])
        return cls(backend.server, anchors)

    def shard_for(self, key: str) -> Shard:
        """The shard in ``key``'s slot (a record call's first key); the one shard on a
        single server."""
        if not self.cluster:
            return self.shards[0]
        shard = self._by_slot.get(slot_of(key))
        if shard is None:
            raise DedupConfigError(
                f"The frontier has no queue shard in the slot of {key!r}: the backend's add "
                "calls start with a key that is not one of its stamp_keys; give the backend "
                "a stamp_keys list of every group's first key"
            )
        return shard

    def _reserve(self, n: int) -> int:
        """The number of the first of ``n`` new lease ids of this worker's."""
        with self._ids:
            first = self._next_id
            self._next_id += n
        return first

    def lease_ids(self, n: int, moving: bool = False) -> list[str]:
        """``n`` new lease ids of this worker's (``moving``: requests going home)."""
        first, mark = self._reserve(n), MOVE_MARK if moving else ""
        return [f"{self.worker}{mark}{first + i}" for i in range(n)]

    def push(self, shard: Shard, requests: Sequence[tuple[int, bytes]]) -> int:
        """Enqueue ``(priority, entry)`` pairs unrecorded (dont_filter, a takeover);
        one call per 1,000."""
        pushed = 0
        for batch in chunks(requests):
            args: list[Any] = [x for p, entry in batch for x in (stored_priority(p), entry)]
            keys = [shard.queue, shard.counters]
            pushed += int(scripts.FRONTIER_PUSH(self.server, keys, args))
        return pushed

    def call(
        self,
        shard: Shard,
        lease_ms: int,
        take: int = 0,
        acks: Sequence[str] = (),
        renew: Sequence[str] = (),
        release: Sequence[str] = (),
        aside: Sequence[str] = (),
        later: Sequence[Any] = (),
        max_returns: int = 0,
    ) -> Leased:
        """One call to ``shard``: acknowledge ``acks``, renew ``renew`` for ``lease_ms``,
        give back ``release``, set ``aside`` aside (undecodable), end the leases of
        ``later`` (per page that failed for good: lease id, delay in ms, priority, entry
        to try again) and keep those pages until due, reclaim expired leases (setting
        aside those that came back more than ``max_returns`` times, if > 0), put the
        pages due back, then lease up to ``take``
        (their ids reserved first: calls may run at once, from several threads)."""
        first = self._reserve(take)
        args: list[Any] = [lease_ms, take, self.worker, first, max_returns, int(self.crawling)]
        args.append(secrets.randbelow(2**31 - 2) + 1)  # (the slots' jitter)
        for items in (acks, renew, release, aside, later):
            args += [len(items), *items]
        sent = time.monotonic()
        answer = scripts.FRONTIER_LEASE(self.server, shard.lease_keys, args)
        received = time.monotonic()
        moving = 8 + int(answer[4])  # (after the entries set aside)
        start = moving + 3 * int(answer[7])
        # A request held for its slot's turn: until that time on the server's clock, as
        # this process's (the offset of the quickest recent call: no reactor's delay
        # in taking the answer, no half round trip, makes it late or early).
        clock = self.clocks.setdefault(shard, ServerClock())
        ahead = clock.ahead(int(answer[6]) / 1000, sent, received)
        requests, holds = [], []
        for i in range(start, len(answer), 3):
            n = (i - start) // 3
            requests.append((f"{self.worker}{first + n}", int(answer[i]), bytes(answer[i + 1])))
            wait = int(answer[i + 2]) / 1000
            holds.append(max(0.0, wait + ahead) if wait > 0 else 0.0)
        leased = Leased(int(answer[0]), int(answer[1]), int(answer[2]), requests, int(answer[3]))
        leased.holds, leased.received = holds, received
        leased.returned = [bytes(entry) for entry in answer[8:moving]]
        leased.moves = [
            (as_str(answer[i]), int(answer[i + 1]), bytes(answer[i + 2]))
            for i in range(moving, start, 3)
        ]
        leased.due_in = int(answer[5]) / 1000 if int(answer[5]) >= 0 else None
        if leased.bad:
            self.said_bad(shard, leased.bad)
        if leased.moves and self.on_moves is not None:
            self.on_moves(shard, leased)
        return leased

    def said_bad(self, shard: Shard, count: int) -> None:
        logger.error(
            "Frontier: %d member(s) of %r's keys were not the frontier's (another client's, "
            "an older version's or a mistake's): set aside in %r as found, the crawl goes on "
            "without them",
            count,
            shard.queue,
            shard.bad,
        )

    def unaside(self, shard: Shard) -> int:
        """Give the requests set aside in ``shard`` another try (to the front of the
        queue, 1,000 per call): how many."""
        back = 0
        while True:
            keys = [shard.queue, shard.aside, shard.bad, shard.counters]
            read, bad = (int(n) for n in scripts.FRONTIER_UNASIDE(self.server, keys, [1000]))
            back += read - bad
            if bad:
                self.said_bad(shard, bad)
            if read < 1000:
                return back

    def unaside_all(self) -> int:
        """:meth:`unaside` on every shard (a worker's start), said if any: how many."""
        back = sum(self.unaside(shard) for shard in self.shards)
        if back:
            logger.info(
                "Frontier: %d request(s) set aside put back in the queue for another try",
                back,
            )
        return back

    def unlater(self, shard: Shard) -> int:
        """Put every page of ``shard`` waiting to be tried again in the queue now (the
        way back to scrapy-redis's): how many. Each chunk is pushed before it leaves:
        an interruption pushes one chunk twice at most."""
        moved = 0
        while members := self.server.zrange(shard.later, 0, 999):
            pairs = [parse_member(m) for m in members]
            good = [pair for pair in pairs if pair is not None]
            self.push(shard, good)
            self.set_bad(shard, [m for m, pair in zip(members, pairs) if pair is None])
            self.server.zrem(shard.later, *members)
            moved += len(good)
        return moved

    def set_bad(self, shard: Shard, members: Sequence[bytes | str]) -> None:
        """Keep ``members`` (read from ``shard``'s keys, not the frontier's) in its
        list of bad members, and say so."""
        if members:
            self.server.rpush(shard.bad, *members)
            self.said_bad(shard, len(members))

    # -- seen from outside ---------------------------------------------------------------

    def slot_queues(self, shard: Shard) -> list[str | bytes]:
        """The queues of ``shard``'s download slots that hold requests (a sorted set)."""
        if as_str(self.server.type(shard.slots)) != "hash":
            return []
        keys = [shard.slot_queue(name) for name in self.server.hkeys(shard.slots)]
        pipe = self.server.pipeline(transaction=False)
        for key in keys:
            pipe.type(key)
        return [key for key, kind in zip(keys, pipe.execute()) if as_str(kind) == "zset"]

    def keys_of(self, shard: Shard) -> list[str | bytes]:
        """The shard's keys that exist, its download slots' queues among them."""
        keys: list[str | bytes] = [*shard.lease_keys, shard.slots, shard.ready]
        pipe = self.server.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        there = [key for key, found in zip(keys, pipe.execute()) if found]
        return there + self.slot_queues(shard)  # (one of another type is not ours)

    def check(self, shard: Shard) -> None:
        """Refuse, naming it, a key of ``shard`` that holds another type (another
        program's, or damaged): it is never read as the frontier's, nor deleted."""
        kinds = [
            (shard.queue, "zset", "queue"), (shard.leases, "hash", "leases"),
            (shard.expiries, "zset", "lease expiries"), (shard.counters, "hash", "counters"),
            (shard.aside, "list", "requests set aside"),
            (shard.later, "zset", "pages to try again later"),
            (shard.bad, "list", "members set aside as bad"),
            (shard.workers, "zset", "workers seen"),
            (shard.slots, "hash", "download slots"), (shard.ready, "zset", "slots ready"),
        ]  # fmt: skip
        pipe = self.server.pipeline(transaction=False)
        for key, _, _ in kinds:
            pipe.type(key)
        for (key, kind, what), found in zip(kinds, pipe.execute()):
            if as_str(found) not in ("none", kind):
                raise DedupConfigError(
                    f"{key!r} holds a {as_str(found)}, not the frontier's {what} (a {kind}); "
                    "move it away (RENAME) if another program owns it, then run this again"
                )

    def later(self, shard: Shard) -> tuple[int, float | None]:
        """The pages of ``shard`` to try again later, and seconds until the first is due."""
        return int(self.server.zcard(shard.later)), self._seconds_until(shard.later)

    def _seconds_until(self, key: str) -> float | None:
        """Seconds from the server's clock to the first score of ``key`` (a time in ms),
        or None if it is empty."""
        first = self.server.zrange(key, 0, 0, withscores=True)
        if not first:
            return None
        seconds, micros = self.server.time()
        return float(first[0][1]) / 1000 - (int(seconds) + int(micros) / 1e6)

    def clear(self) -> int:
        """Delete every request waiting or leased, and the counters: how many keys. The
        members set aside as bad stay (they are not the frontier's: for a person to read)."""
        deleted = 0
        for shard in self.shards:
            self.check(shard)  # (a key of another type is refused, never deleted)
            keys = [key for key in self.keys_of(shard) if key != shard.bad]  # (one slot)
            if keys:
                deleted += int(self.server.delete(*keys))
        return deleted
