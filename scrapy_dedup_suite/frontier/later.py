"""Pages whose download failed for good, tried again later rather than lost.

``FailedPagesMiddleware`` tells the scheduler when a download failed for good (after
RetryMiddleware's retries). Under a persisted crawl nothing else would ask for that page
again: its parent is done and stays seen. So, FRONTIER_RETRY_TIMES times, the page goes
back to the queue after FRONTIER_RETRY_DELAY, doubled each time: when the engine is done
with it, its lease ends in the same lease call that keeps it in ``{tag}:frontier:later``
until due (``lua/frontier_lease.lua``), so it is never lost in between; the lease calls
put the pages due back at the front of the queue. A worker with nothing else to do
waits for those due within SCHEDULER_IDLE_BEFORE_CLOSE (:mod:`.idle`), no longer: a
close says how many wait, and SCHEDULER_PERSIST keeps them for the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .codec import RequestCodec, RequestEncodingError
from .entries import stored_priority
from .queue import FrontierQueue, Shard

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)


class RetryLater:
    """The pages a worker tries again later: decided when a download fails for good,
    carried by the next lease call to their shard once the engine is done with them."""

    def __init__(
        self, codec: RequestCodec, times: int, delay: float, count: Callable[[str], None]
    ) -> None:
        self.codec = codec
        self.times = times
        self.delay = delay
        self._count = count
        #: Per request failed for good and not yet done: its priority, its entry to try
        #: again, and the delay (ms).
        self._decided: dict[Request, tuple[int, bytes, int]] = {}
        #: Per shard, what its next lease call carries: per page its lease id, delay,
        #: priority and entry.
        self.waiting: dict[Shard, list[Any]] = {}

    def decide(self, request: Request) -> bool:
        """Whether ``request`` (leased by this worker, its download failed for good) is
        tried again later. Its meta counts the times it came back (``frontier_retry``);
        RetryMiddleware's count starts again."""
        tries = int(request.meta.get("frontier_retry", 0))
        if tries >= self.times:
            return False
        meta = {k: v for k, v in request.meta.items() if k != "retry_times"}
        meta["frontier_retry"] = tries + 1
        try:
            entry = self.codec.encode(request.replace(meta=meta), priority_apart=True)
        except RequestEncodingError as exc:  # (it could be queued once: seldom)
            logger.warning("The frontier cannot try %s again later: %s", request, exc)
            return False
        delay_ms = round(self.delay * 1000 * 2**tries)
        self._decided[request] = (stored_priority(request.priority), entry, delay_ms)
        self._count("frontier/retry_later")
        return True

    def done(self, request: Request, shard: Shard, lease_id: str) -> bool:
        """The engine is done with ``request``: whether it is kept for later (carried by
        the next call to ``shard``), rather than acknowledged."""
        decided = self._decided.pop(request, None)
        if decided is None:
            return False
        priority, entry, delay_ms = decided
        self.waiting.setdefault(shard, []).extend([lease_id, delay_ms, priority, entry])
        return True

    def carried(self, shard: Shard) -> list[Any]:
        """What the next call to ``shard`` carries."""
        return self.waiting.pop(shard, [])

    def keep(self, shard: Shard, items: list[Any]) -> None:
        """What a call that failed carried waits for the next call to ``shard``."""
        if items:
            self.waiting.setdefault(shard, []).extend(items)

    def say_at_close(self, queue: FrontierQueue, persist: bool) -> None:
        """The pages that wait to be tried again, if any."""
        if not self.times:
            return
        try:
            found = [queue.later(shard) for shard in queue.shards]
        except Exception:  # (said by the close's other calls)
            return
        waiting = sum(n for n, _ in found)
        if waiting:
            due = min(d for n, d in found if d is not None)
            logger.info(
                "Frontier: %d page(s) whose download failed wait to be tried again, the "
                "first in %.0f s; %s",
                waiting,
                max(0.0, due),
                "kept for the next run (SCHEDULER_PERSIST)"
                if persist
                else "deleted with the queue and the fingerprints (SCHEDULER_PERSIST is off)",
            )
