"""When a worker with nothing to do goes idle (and its spider closes, unless it waits for
start URLs): SCHEDULER_IDLE_BEFORE_CLOSE seconds after the last sign of work.

Signs of work: requests waiting in the queue or leased by any worker (their pages may
yield more), a request this worker took itself, and a page kept for later
(``FailedPagesMiddleware``) that comes due within SCHEDULER_IDLE_BEFORE_CLOSE: the
worker waits for it rather than close with it due a moment later. One due after that
is left for the next run, and the close says so.

A worker whose request call found nothing while work may come asks again within a
second (:class:`EngineWaker`), not at the engine's next heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class IdleTimer:
    """See the module; times by the scheduler's clock."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        #: Since when nothing showed work, or None.
        self.since: float | None = None

    def busy(self) -> None:
        """Work was seen: the wait starts again the next time nothing shows any."""
        self.since = None

    def pending(self, now: float, work: bool, due_at: float | None) -> bool:
        """Whether the worker waits on at ``now``: ``work`` seen (requests waiting or
        leased), the first page kept for later due at ``due_at`` within the wait, or the
        wait since nothing showed work not over."""
        if work or (due_at is not None and due_at - now <= self.wait):
            self.since = None
            return True
        if self.since is None:
            self.since = now
        return now - self.since < self.wait


class OneShot:
    """``call`` run ``delay`` seconds after :meth:`ask`, once however often asked
    meanwhile, never after :meth:`stop`; by the reactor that runs (a test's clock may
    stand in: :attr:`call_later`)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.stopped = False
        self.call_later: Callable[..., Any] | None = None
        self._pending: Any = None

    def ask(self, delay: float) -> None:
        if self.stopped or (self._pending is not None and self._pending.active()):
            return
        call_later = self.call_later
        if call_later is None:
            from twisted.internet import reactor as installed  # the one Scrapy installed

            reactor: Any = installed
            if not reactor.running:
                return
            call_later = reactor.callLater
        self._pending = call_later(delay, self.call)

    def stop(self) -> None:
        self.stopped = True
        if self._pending is not None and self._pending.active():
            self._pending.cancel()


class EngineWaker:
    """Has the engine ask for requests again: :meth:`now` (a lease call in a thread
    answered: what it brought, or that it brought none, while it ran the crawl could
    not end), or :meth:`soon` (a request call found nothing while work may come: a
    worker that starts while others hold every request, or one whose peers' pages
    yield more). Else the engine asks at its next heartbeat, 5 s later."""

    def __init__(self, slot: Callable[[], Any]) -> None:
        self.slot = slot
        self.timer = OneShot(self.now)

    def now(self) -> None:
        slot = self.slot()
        if slot is not None and not self.timer.stopped:
            slot.nextcall.schedule()

    def soon(self, delay: float) -> None:
        """:meth:`now` in ``delay`` seconds (once, however often asked meanwhile)."""
        self.timer.ask(delay)

    def stop(self) -> None:
        self.timer.stop()
