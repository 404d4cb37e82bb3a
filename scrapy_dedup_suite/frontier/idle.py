"""When a worker with nothing to do goes idle (and its spider closes, unless it waits for
start URLs): SCHEDULER_IDLE_BEFORE_CLOSE seconds after the last sign of work.

Signs of work: requests waiting in the queue or leased by any worker (their pages may
yield more), a request this worker took itself, and a page kept for later
(``FailedPagesMiddleware``) that comes due within SCHEDULER_IDLE_BEFORE_CLOSE: the
worker waits for it rather than close with it due a moment later. One due after that
is left for the next run, and the close says so.
"""

from __future__ import annotations


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
