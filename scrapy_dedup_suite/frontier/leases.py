"""The leases a worker holds, kept alive by a thread of their own, and the requests that
come back too often set aside.

The engine runs callbacks on the reactor's thread: a callback that blocks it (a slow
parser, a ``time.sleep``, a synchronous HTTP call) stops everything the reactor does.
Were the leases renewed on the reactor, a callback blocking longer than FRONTIER_LEASE
would lose them: another worker takes the page and blocks the same way, and the crawl
fetches it again and again. :class:`LeaseKeeper` renews them from a daemon thread of
its own every third of FRONTIER_LEASE, which a blocked reactor does not stop (a frozen
or dead process stops it, as it should: its leases then end and come back).

A request that still comes back from workers that held it past their lease (killed,
frozen, cut off from Redis) counts it in its queue item; the lease call sets it aside
once it came back FRONTIER_MAX_RETURNS times (a page that kills every worker that takes
it: out of memory, a crash in a library), and :func:`say_returned` names its URL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .acks import PendingAcks
from .codec import RequestCodec, RequestEncodingError
from .queue import FrontierQueue, Shard

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)

#: What the keeper renews: per shard, the lease ids the worker holds now.
Held = Callable[[], dict[Shard, list[str]]]


class Holdings:
    """The leases a worker holds, in each of their states (changed on the reactor's
    thread only; :meth:`ids` is read from the keeper's)."""

    def __init__(self) -> None:
        #: Leased and not yet handed to the engine: (request, shard, lease id).
        self.taken: deque[tuple[Request, Shard, str]] = deque()
        #: Handed to the engine and not yet done.
        self.in_flight: dict[Request, tuple[Shard, str]] = {}
        #: Lease id -> when (``time.monotonic()``) its request was handed to the engine,
        #: then when the downloader took it (:meth:`reached`), until it is acknowledged
        #: (:func:`.acks.stamped`).
        self.sent: dict[str, float] = {}
        #: Done, waiting for the requests handed on up to then to be settled (their
        #: children among them): (that number, request, shard, lease id).
        self.settling: deque[tuple[int, Request, Shard, str]] = deque()
        #: Done, acknowledged by the next call to their shard (a lease call, or a
        #: record call of the scheduler's ``incoming``).
        self.acks = PendingAcks()
        #: Leased by a call in a thread, from its answer until the reactor takes them
        #: (which a blocked reactor does late).
        self.arriving: tuple[Shard, list[str]] | None = None
        #: Lease id -> when (the scheduler's clock) a request taken may be handed to the
        #: engine: its download slot's turn (FRONTIER_POLITENESS), at most a delay ahead.
        self.not_before: dict[str, float] = {}

    def reached(self, request: Request) -> None:
        """Scrapy's ``request_reached_downloader``: ``request`` passed the downloader's
        middlewares (robots.txt's among them) and is sent now: its send time."""
        held = self.in_flight.get(request)
        if held is not None:
            self.sent[held[1]] = time.monotonic()

    def on(self, shard: Shard) -> int:
        """How many requests taken, in flight or settling are ``shard``'s."""
        ours = sum(1 for s, _ in self.in_flight.values() if s == shard)
        ours += sum(1 for _, _, s, _ in self.settling if s == shard)
        return ours + sum(1 for _, s, _ in self.taken if s == shard)

    def give_back(self) -> dict[Shard, list[str]]:
        """Per shard, the leases taken and not started, no longer this worker's."""
        released: dict[Shard, list[str]] = {}
        for _, shard, lease_id in self.taken:
            released.setdefault(shard, []).append(lease_id)
        self.taken.clear()
        self.not_before.clear()
        return released

    def next_due(self, now: float) -> tuple[Request, Shard, str] | float | None:
        """The first request taken that is due at ``now`` (out of :attr:`taken`); else
        the seconds until one is, or None if none is taken."""
        taken, not_before = self.taken, self.not_before
        if not taken:
            return None
        if not not_before:
            return taken.popleft()
        first = None
        for i, held in enumerate(taken):
            due = not_before.get(held[2])
            if due is None or due <= now:
                del taken[i]
                not_before.pop(held[2], None)
                return held
            first = due if first is None else min(first, due)
        assert first is not None
        return first - now

    def ids(self, later: dict[Shard, list[Any]]) -> dict[Shard, list[str]]:
        """Per shard, every lease held: taken, in flight, done and settling or not yet
        acknowledged, arriving, and kept for ``later`` (its items four per page, the
        lease id first)."""
        held: dict[Shard, list[str]] = {}
        for shard, lease_id in list(self.in_flight.values()):
            held.setdefault(shard, []).append(lease_id)
        for _, shard, lease_id in list(self.taken):
            held.setdefault(shard, []).append(lease_id)
        for _, _, shard, lease_id in list(self.settling):
            held.setdefault(shard, []).append(lease_id)
        for shard, ids in self.acks.lease_ids():
            held.setdefault(shard, []).extend(ids)
        for shard, items in list(later.items()):
            held.setdefault(shard, []).extend(list(items)[0::4])
        arriving = self.arriving
        if arriving is not None:
            held.setdefault(arriving[0], []).extend(arriving[1])
        return held


class LeaseKeeper:
    """Renews ``held()`` in ``queue`` every third of the lease from a daemon thread (see
    the module). On the reactor's thread: ``reclaimed(shard, leased)`` with what a
    call reclaimed (a dead worker's leases), ``failed(exc)`` with what a call raised."""

    def __init__(
        self,
        queue: Callable[[], FrontierQueue | None],
        lease_ms: int,
        max_returns: int,
        held: Held,
        reclaimed: Callable[[Shard, Any], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        self.queue = queue
        self.lease_ms = lease_ms
        self.max_returns = max_returns
        self.held = held
        self.every = lease_ms / 3000
        self.reclaimed = reclaimed
        self.failed = failed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="dedup-frontier-renew", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """No new renewal after this (one running ends as it is: renewing a lease given
        back or acknowledged meanwhile holds nothing again, and one the close could not
        give back ends a lease later)."""
        self._stop.set()
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.renew()

    def renew(self) -> None:
        """Renew every lease held now (a call per shard, that renews only: what the
        reactor's calls carry stays theirs)."""
        queue = self.queue()
        for shard, ids in _snapshot(self.held).items():
            if self._stop.is_set() or queue is None:
                return
            try:
                leased = queue.call(shard, self.lease_ms, renew=ids, max_returns=self.max_returns)
            except Exception as exc:  # said on the reactor's thread; tried again next time
                _on_reactor(self.failed, exc)
                continue
            if leased.reclaimed or leased.returned or leased.moved:
                _on_reactor(self.reclaimed, shard, leased)


def _snapshot(held: Held) -> dict[Shard, list[str]]:
    """``held()`` read from another thread than the one that changes what it reads: a
    read that met a change is read again."""
    for _ in range(100):
        try:
            return held()
        except RuntimeError:  # (a dict or deque changed while it was read)
            continue
    return {}


def _on_reactor(call: Callable[..., Any], *args: Any) -> None:
    from twisted.internet import reactor  # the one Scrapy installed

    reactor.callFromThread(call, *args)


def say_returned(
    codec: RequestCodec, shard: Shard, entries: Iterable[bytes], max_returns: int
) -> int:
    """One ERROR per request a lease call set aside for coming back too often, naming
    it; how many."""
    n = 0
    for entry in entries:
        n += 1
        try:
            what = f"<{codec.fields(entry)['url']}>"
        except RequestEncodingError:
            what = repr(entry[:120])
        logger.error(
            "Frontier: %s was taken by %d workers in turn that each held it past "
            "FRONTIER_LEASE (killed, frozen or cut off from Redis, maybe by this page): set "
            "aside in %r, the crawl goes on without it; a worker's start gives it one more "
            "try (FRONTIER_MAX_RETURNS)",
            what,
            max_returns + 1,
            shard.aside,
        )
    return n
