"""When a worker with nothing to do goes idle (and its spider closes, unless it waits for
start URLs): SCHEDULER_IDLE_BEFORE_CLOSE seconds after the last sign of work.

Signs of work: requests waiting in the queue or leased by any worker (their pages may
yield more), a request this worker took itself, and a page kept for later
(``FailedPagesMiddleware``) that comes due within SCHEDULER_IDLE_BEFORE_CLOSE (or
FRONTIER_WAIT_FOR_RETRIES, the longer): the worker waits for it rather than close with
it due a moment later. One due after that is left for the next run, and the close says
so.

A worker whose request call found nothing while work may come (requests wait, or
other workers hold leases whose pages may yield more) asks again half a second later,
then after twice as long each time it finds nothing, up to the engine's heartbeat
(:class:`EngineWaker`); one that found no work anywhere waits for the heartbeat. An
idle worker so costs Redis one call every few seconds (``python -m bench.idle``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..dedup.engine_state import ask_for_requests

if TYPE_CHECKING:
    from .queue import Shard

#: The most often the idle checks look at the queue in Redis (seconds).
LOOK_EVERY = 1.0
#: The most often a worker that found nothing to take looks again (seconds).
TAKE_EVERY = 0.5
#: The longest it waits to look again while work may come: the engine's heartbeat,
#: after which the engine asks by itself.
TAKE_AT_MOST = 5.0


@dataclass(frozen=True)
class Sighting:
    """What a call to a shard said of it."""

    #: Runs of requests waiting, and leases other workers hold.
    waiting: int
    held: int
    #: When (by the scheduler's clock), and when its first retry is due or its first
    #: download slot ready (or None).
    when: float
    due_at: float | None
    #: Whether a call asking for requests got fewer than it asked: what waits there is
    #: not ready before ``due_at`` (slots full, or blocked: FRONTIER_POLITENESS).
    drained: bool = False
    #: Seconds before a call that found nothing there is made again: TAKE_EVERY,
    #: doubled while the shard stays empty, up to TAKE_AT_MOST (on a Cluster most
    #: shards may be empty: the hosts' homes hold the requests; a worker that
    #: enqueues to a shard forgets what it said).
    every: float = TAKE_EVERY

    @property
    def empty(self) -> bool:
        return not self.waiting and not self.held and self.due_at is None


class ShardLooks:
    """What each shard's last call said, forgotten when it may be stale (this worker
    enqueued, or finished what it took): which shards to take from, and whether any
    work is left, without a call to each every time."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.seen: dict[Shard, Sighting] = {}
        self._next = 0
        #: Calls :meth:`totals` made so far (whether a look was made now or read back).
        self.calls = 0

    def saw(
        self, shard: Shard, waiting: int, held: int, due_in: float | None, drained: bool = False
    ) -> None:
        now = self.clock()
        due_at = None if due_in is None else now + due_in
        seen = Sighting(waiting, held, now, due_at, drained)
        last = self.seen.get(shard)
        if seen.empty and last is not None and last.empty:
            seen = replace(seen, every=min(2 * last.every, TAKE_AT_MOST))
        self.seen[shard] = seen

    def forget(self, shards: Iterable[Shard] | None = None) -> None:
        """Forget what ``shards`` said (None: every shard)."""
        if shards is None:
            self.seen.clear()
        for shard in shards or ():
            self.seen.pop(shard, None)

    def forget_held(self) -> None:
        """Forget what the shards that said leases are held there said (some may be
        this worker's, since acknowledged: on a Cluster, the others stay known)."""
        for shard in [shard for shard, seen in self.seen.items() if seen.held]:
            del self.seen[shard]

    def work_elsewhere(self) -> bool:
        """Whether work may come: a shard's last call said requests wait, other
        workers hold leases (their pages may yield more) or a page kept for later is
        due; or a shard is not looked at yet."""
        if not self.seen:
            return True
        return any(s.waiting or s.held or s.due_at is not None for s in self.seen.values())

    def to_take(self, shards: Sequence[Shard]) -> Iterator[Shard]:
        """The shards in turn, less those found empty, or with nothing ready (what
        waits there is in slots full or blocked), less than TAKE_EVERY ago (and before
        the first of them comes due)."""
        now = self.clock()
        for _ in range(len(shards)):
            shard = shards[self._next % len(shards)]
            self._next += 1
            seen = self.seen.get(shard)
            if seen is None or self._may_have(seen, now):
                yield shard

    @staticmethod
    def _may_have(seen: Sighting, now: float) -> bool:
        if seen.waiting and not seen.drained:
            return True
        return now - seen.when >= seen.every or (seen.due_at is not None and now >= seen.due_at)

    def next_due(self) -> float | None:
        """When (the scheduler's clock) the first shard found drained has something
        ready, or None."""
        dues = [s.due_at for s in self.seen.values() if s.drained and s.due_at is not None]
        return min(dues, default=None)

    def totals(
        self, shards: Sequence[Shard], call: Callable[[Shard], Any]
    ) -> tuple[int, int, float | None]:
        """Runs waiting, leases other workers hold, and when the first retry is due,
        over ``shards``, each ``call``ed again (which says what it saw) if what it last
        said is older than LOOK_EVERY (or, found empty again and again, than the wait
        before it is asked for requests again)."""
        waiting = held = 0
        due: list[float] = []
        for shard in shards:
            seen = self.seen.get(shard)
            if seen is None or self.clock() - seen.when >= max(LOOK_EVERY, seen.every):
                call(shard)
                self.calls += 1
                seen = self.seen[shard]
            waiting += seen.waiting
            held += seen.held
            due += [seen.due_at] if seen.due_at is not None else []
        return waiting, held, min(due, default=None)


class IdleTimer:
    """See the module; times by the scheduler's clock."""

    def __init__(self, wait: float, retry_wait: float = 0.0) -> None:
        self.wait = wait
        #: A page to try again due within it counts as work (not less than ``wait``).
        self.retry_wait = max(wait, retry_wait)
        #: Since when nothing showed work, or None.
        self.since: float | None = None

    def busy(self) -> None:
        """Work was seen: the wait starts again the next time nothing shows any."""
        self.since = None

    def pending(self, now: float, work: bool, due_at: float | None) -> bool:
        """Whether the worker waits on at ``now``: ``work`` seen (requests waiting or
        leased), the first page kept for later due at ``due_at`` within ``retry_wait``,
        or the wait since nothing showed work not over."""
        if work or (due_at is not None and due_at - now <= self.retry_wait):
            self.since = None
            return True
        if self.since is None:
            self.since = now
        return now - self.since < self.wait


def running_reactor() -> Any | None:
    """The reactor Scrapy installed, if it runs (not for a test's scheduler alone)."""
    from twisted.internet import reactor  # the one Scrapy installed

    running: Any = reactor
    return running if running.running else None


class OneShot:
    """``call`` run ``delay`` seconds after :meth:`ask`, once however often asked
    meanwhile, never after :meth:`stop`; by the reactor that runs (a test's clock may
    stand in: :attr:`call_later`)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.stopped = False
        self.call_later: Callable[..., Any] | None = None
        self._pending: Any = None

    def ask(self, delay: float) -> bool:
        """Whether this asked for a call (none was pending, and a clock runs)."""
        if self.stopped or (self._pending is not None and self._pending.active()):
            return False
        call_later = self.call_later
        if call_later is None:
            reactor = running_reactor()
            if reactor is None:
                return False
            call_later = reactor.callLater
        self._pending = call_later(delay, self.call)
        return True

    def cancel_later_than(self, delay: float) -> None:
        """Cancel the call pending if it comes later than ``delay`` from now (by the
        reactor's clock; a test's stand-in without one: always)."""
        pending = self._pending
        if pending is None or not pending.active():
            return
        at, now = getattr(pending, "getTime", None), running_reactor()
        if at is not None and now is not None and at() <= now.seconds() + delay:
            return
        pending.cancel()
        self._pending = None

    def stop(self) -> None:
        self.stopped = True
        if self._pending is not None and self._pending.active():
            self._pending.cancel()


class EngineWaker:
    """Has the engine ask for requests again: :meth:`now` (a lease call in a thread
    answered: what it brought, or that it brought none, while it ran the crawl could
    not end), or :meth:`later` (a request call found nothing while work may come: a
    worker that starts while others hold every request, or one whose peers' pages
    yield more). Else the engine asks at its next heartbeat, 5 s later."""

    def __init__(self, slot: Callable[[], Any]) -> None:
        self.slot = slot
        self.timer = OneShot(self.now)
        #: When the first request held for its slot's turn is due.
        self.due = OneShot(self.now)
        #: How long :meth:`later` waits next: doubled each time it asked, back to
        #: TAKE_EVERY when :meth:`found` says work came.
        self.patience = TAKE_EVERY

    def now(self) -> None:
        slot = self.slot()
        if slot is not None and not self.timer.stopped:
            ask_for_requests(slot)

    def later(self) -> None:
        """Nothing found while work may come: :meth:`now` after :attr:`patience` (once,
        however often asked meanwhile), which doubles, up to TAKE_AT_MOST, each time
        nothing came."""
        if self.timer.ask(self.patience):
            self.patience = min(2 * self.patience, TAKE_AT_MOST)

    def found(self) -> None:
        """Work came: the next wait is TAKE_EVERY again."""
        self.patience = TAKE_EVERY

    def within(self, delay: float) -> None:
        """:meth:`now` in ``delay`` seconds (a request held comes due), or sooner if
        already asked sooner."""
        self.due.cancel_later_than(delay)
        self.due.ask(max(0.0, delay))

    def stop(self) -> None:
        self.timer.stop()
        self.due.stop()
