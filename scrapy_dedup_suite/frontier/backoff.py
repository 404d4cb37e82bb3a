"""Shared back-off: a site that refuses a request (``FRONTIER_BACKOFF_HTTP_CODES``: 429
and 503) has its download slot blocked for every worker, not only the one that saw it.

The block is the site's ``Retry-After`` (seconds, or an HTTP date) when it sends one;
else ``FRONTIER_BACKOFF`` seconds, doubled for each refusal after a block ended, up to
``FRONTIER_BACKOFF_MAX`` (which bounds ``Retry-After`` too: a site asking for days does
not stop the crawl for days). Refusals of requests sent before the block (the slot's
other requests in flight) do not double it again; a slot not refused for as long as
its last block lasted, after it ended, starts over from ``FRONTIER_BACKOFF``.
The block lives in the slot's state in Redis (``lua/frontier_block.lua``): every
worker's next lease call sees it; a request the worker already took for that slot is
held until it ends. What the response does next is Scrapy's: ``RetryMiddleware``
retries 429 and 503 by default, and the retry waits in the slot's queue for the block
to end.

The call is made on the reactor's thread as the response arrives, before the page is
acknowledged (which frees the slot's concurrency): a refusal is rare, and a block sent
later would let the slot's next request out first.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..server import scripts
from ..settings.table import read

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from .leases import Holdings
    from .queue import FrontierQueue
    from .slots import SlotPolicy

logger = logging.getLogger(__name__)


def retry_after(value: bytes | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds (>= 0): a number of seconds, or an
    HTTP date (against ``now``, the epoch's seconds); None if absent or not either."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # (HTTP dates are GMT)
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class SlotBackoff:
    """Blocks the slot of a request whose response is a refusal (see the module)."""

    def __init__(self, policy: SlotPolicy, codes: list[int], first: float, most: float) -> None:
        self.policy = policy
        self.codes = frozenset(codes)
        self.first_ms = max(1, round(first * 1000))
        self.most_ms = max(self.first_ms, round(most * 1000))

    @classmethod
    def from_settings(cls, settings: BaseSettings, policy: SlotPolicy | None) -> SlotBackoff | None:
        """The back-off, or None without politeness across workers (FRONTIER_POLITENESS)
        or with no FRONTIER_BACKOFF_HTTP_CODES."""
        codes = read(settings, "FRONTIER_BACKOFF_HTTP_CODES")
        if policy is None or not codes:
            return None
        first, most = read(settings, "FRONTIER_BACKOFF"), read(settings, "FRONTIER_BACKOFF_MAX")
        return cls(policy, codes, first, most)

    def asked_ms(self, response: Response) -> int | None:
        """None if ``response`` is no refusal; else the block its ``Retry-After`` asks
        for (ms), or -1 for the back-off's own."""
        if response.status not in self.codes:
            return None
        wait = retry_after(response.headers.get(b"Retry-After"))
        return -1 if wait is None else round(min(wait * 1000, self.most_ms))

    def block(self, queue: FrontierQueue, key: str, asked_ms: int) -> tuple[float, int]:
        """Block download slot ``key`` in its home shard (:mod:`.homes`: on a Cluster,
        where its requests wait): the seconds until the block ends, and the refusals
        its back-off counted."""
        header = self.policy.header(key)
        shard = queue.homes.of_slot(header.split(b" ", 3)[3])
        args = [header, asked_ms, self.first_ms, self.most_ms]
        ms, counted = scripts.FRONTIER_BLOCK(queue.server, [shard.queue], args)
        return int(ms) / 1000, int(counted)

    def hold(self, holdings: Holdings, key: str, until: float) -> int:
        """Hold the requests taken for download slot ``key`` until ``until`` (the
        scheduler's clock): how many."""
        held = 0
        for taken, _, lease_id in holdings.taken:
            if self.policy.key(taken) == key:
                holdings.not_before[lease_id] = max(holdings.not_before.get(lease_id, 0.0), until)
                held += 1
        return held


def on_refusal(
    backoff: SlotBackoff,
    queue: Callable[[], FrontierQueue | None],
    holdings: Holdings,
    clock: Callable[[], float],
    count: Callable[..., None],
    failed: Callable[[BaseException, str], None],
) -> Callable[..., None]:
    """A handler of Scrapy's ``response_downloaded`` signal (sent for every response,
    before the downloader middlewares, so a 429 that ``RetryMiddleware`` retries is
    seen too) that blocks the slot of a refusal."""

    def downloaded(response: Response, request: Request, **_: Any) -> None:
        asked = backoff.asked_ms(response)
        frontier = queue()
        if asked is None or frontier is None:
            return
        key = backoff.policy.key(request)
        try:
            until, strikes = backoff.block(frontier, key, asked)
        except Exception as exc:  # Redis away: this worker's retry goes unblocked
            failed(exc, "block a download slot")
            return
        backoff.hold(holdings, key, clock() + until)
        count("frontier/slot_blocked")
        logger.info(
            "Frontier: %s answered %d; its download slot %r is blocked for %.1f s for every "
            "worker (%s)",
            request.url,
            response.status,
            key,
            until,
            "its Retry-After" if asked >= 0 else f"back-off, refusal {strikes}",
        )

    return downloaded
