"""A worker's leases of the next requests (:class:`Taking`): here and now when it has
none, or in a thread before those taken run out, so that the engine seldom waits for
Redis; what a call brings is decoded into the requests taken, and what cannot be is set
aside with one line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.python.failure import Failure

from ..core.daemon_threads import DaemonThreads
from .codec import RequestCodec, RequestEncodingError
from .idle import ShardLooks, running_reactor
from .leases import Holdings
from .queue import FrontierQueue, Leased, Shard
from .shard_calls import ShardCalls

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from .incoming import Quiet

logger = logging.getLogger(__name__)


class Taking:
    """Leases up to ``prefetch`` requests a call from the shards of ``queue()`` into
    ``holdings.taken``, through ``calls``; ``looks`` says which shard may have some.
    Told: ``on_found()`` when a call brought requests, ``on_answered()`` when a call
    in a thread answered (whatever it brought), ``failed(exc, doing)`` when one
    raised."""

    def __init__(
        self,
        queue: Callable[[], FrontierQueue | None],
        calls: ShardCalls,
        holdings: Holdings,
        looks: ShardLooks,
        codec: RequestCodec,
        prefetch: int,
        count: Callable[..., None],
        quiet: Quiet,
        failed: Callable[[BaseException, str], None],
    ) -> None:
        self.queue = queue
        self.calls = calls
        self.holdings = holdings
        self.looks = looks
        self.codec = codec
        self.prefetch = prefetch
        self.count = count
        self.quiet = quiet
        self.failed = failed
        #: The scheduler's clock (a test may set it): when a request held is due.
        self.clock: Callable[[], float] = time.monotonic
        self.on_found: Callable[[], None] = lambda: None
        self.on_answered: Callable[[], None] = lambda: None
        #: Runs a lease call in a thread (once the reactor runs): a daemon thread of
        #: its own, which a forced shutdown does not wait for.
        self.thread = DaemonThreads("dedup-frontier-lease", 1)
        self.in_thread: Callable[..., Deferred[Any]] = self.thread
        #: The lease call running in a thread, if any.
        self.running: Deferred[Any] | None = None
        #: Whether the scheduler is closing: no call in a thread any more.
        self.closed = False

    def take(self) -> None:
        """Lease from the next shard that may have some (one call on a single server),
        here and now."""
        queue = self.queue()
        assert queue is not None
        for shard in self.looks.to_take(queue.shards):
            try:
                leased = self.calls.call(shard, self.prefetch)
            except Exception as exc:  # Redis away: nothing taken; the engine asks again
                self.failed(exc, "lease requests")
                return
            if self.took(shard, leased):
                return

    def ahead(self) -> None:
        """Lease the next requests in a thread (one lease call at a time); the engine is
        woken when they arrive (``on_answered``)."""
        if self.running is not None or self.closed or running_reactor() is None:
            return
        queue = self.queue()
        assert queue is not None
        shard = next(self.looks.to_take(queue.shards), None)
        if shard is None:
            return
        calls, holdings = self.calls, self.holdings
        acks, later = calls.carried(shard)

        def call(*args: Any, **kwargs: Any) -> Any:  # (in the thread)
            leased = queue.call(*args, **kwargs)
            holdings.arriving = (shard, [lease_id for lease_id, _, _ in leased.requests])
            return leased

        def answered(leased: Leased) -> None:
            self.running = None
            calls.called(shard, acks, leased, take)
            self.took(shard, leased)  # (after a close began: given back by the close)
            holdings.arriving = None
            self.on_answered()

        def failed(failure: Failure) -> None:
            self.running = None
            calls.keep(shard, acks, later)
            self.failed(failure.value or RuntimeError(str(failure)), "lease requests")
            self.on_answered()

        lease_ms, take, most = calls.lease_ms, self.prefetch, calls.max_returns
        ahead = self.in_thread(call, shard, lease_ms, take, acks, later=later, max_returns=most)
        self.running = ahead.addCallbacks(answered, failed)

    def took(self, shard: Shard, leased: Leased) -> bool:
        """Decode what ``leased`` holds into the requests taken (those that cannot be
        are set aside): whether it held any."""
        aside = []
        since = time.monotonic() - leased.received if leased.received else 0.0
        now = self.clock() - since  # (when the answer came, not when the reactor took it)
        holds = leased.holds or [0.0] * len(leased.requests)
        for (lease_id, priority, entry), hold in zip(leased.requests, holds):
            try:
                request = self.codec.decode(entry, priority)
            except RequestEncodingError as exc:
                logger.error(
                    "%s; set aside in %r (the next worker's start tries it again)", exc, shard.aside
                )
                aside.append(lease_id)
                continue
            self.holdings.taken.append((request, shard, lease_id))
            if hold > 0:  # (its slot's turn comes later: held until then)
                self.holdings.not_before[lease_id] = now + hold
        self.count("frontier/leased", len(leased.requests))
        self.count("frontier/slot_wait", round(sum(holds), 3))  # (s held for slots' turns)
        if leased.requests:
            self.on_found()
        if aside:
            try:
                self.calls.call(shard, 0, aside=aside)
                self.count("frontier/set_aside", len(aside))
            except Exception as exc:  # still leased: back to the queue when its lease ends
                self.quiet.warn("The frontier could not set requests aside: %s", exc)
        return bool(leased.requests)

    def stop(self) -> None:
        """At the close (the call in a thread, if any, has answered)."""
        self.thread.stop()
