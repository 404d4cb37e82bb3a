"""``BatchDedupMiddleware``: a page's links checked and recorded in one round trip.

Turned on with one line::

    SPIDER_MIDDLEWARES = {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}

It collects the requests a callback yields (up to ``DEDUP_BATCH_SIZE``, and at
the end of the callback's output, or when the callback raises), fingerprints
them, checks and records them in one call to the dupefilter's backend (one round
trip on a single server, one per master touched on a cluster), drops the
duplicates with the dupefilter's stats and log lines, and passes the new ones
on; the dupefilter then admits their fingerprints without another round trip.
Items pass through at once, never held back for requests; ``dont_filter``
requests are left alone.

The round trip runs on a thread of its own pool, so the reactor (asyncio's or
any other) goes on downloading and parsing while a batch is in flight; the
callback's output resumes when the answer is in.

What it records must reach the scheduler, or the page would count as seen
without having been queued. So, by construction:

- it batches a callback's output only, which Scrapy's engine waits for when a
  spider closes; start requests pass on unbatched (the engine reads ``start()``
  while a spider closes and drops what it read after the close), and the
  scheduler checks them one by one as without this middleware;
- it must be the last spider middleware that can drop or replace requests in
  the output chain (the lowest order among them): at the first page it looks,
  and if one comes after it, it batches nothing and says which and what order
  to set;
- what a callback yielded before raising is checked and passed on before the
  exception, as Scrapy schedules it without this middleware;
- once the crawl begins closing, a batch stops waiting out an outage
  (DEDUP_BATCH_OUTAGE_WAIT) after its current pause (1 s at most), so a close ends
  within that pause and one socket timeout.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy import Request, signals
from scrapy.spidermiddlewares.base import BaseSpiderMiddleware
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import load_object

from ..core.daemon_threads import DaemonThreads
from ..core.paths import dotted_path
from ..exceptions import ClientFailure
from ..server.connection import check_reachable
from ..settings.options import BatchOptions
from .batch import UNCHECKED, BatchResult
from .crawl_checks import check_crawl_settings, is_frontier
from .dupefilter import RFPDupeFilter
from .engine_state import engine_closing, engine_scheduler, spider_middlewares

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: Named by its public path (:mod:`scrapy_dedup_suite.middleware`), as its log lines always were.
logger = logging.getLogger("scrapy_dedup_suite.middleware")


class Checked:
    """A batch's requests to pass on, and what to raise once they are passed on
    (DEDUP_ON_ERROR='raise': the requests Redis could not check)."""

    def __init__(self, requests: Sequence[Request], failure: Exception | None = None) -> None:
        self.requests = requests
        self.failure = failure

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure


#: Spider middlewares known to pass every request of a callback's output on as it
#: is (Scrapy's own), wherever they stand.
PASS_THROUGH = {"scrapy.spidermiddlewares.start.StartSpiderMiddleware"}


def passes_requests_on(mw: Any) -> bool:
    """Whether the spider middleware ``mw`` certainly passes every request of a
    callback's output on unchanged: it has no output hook, is one of Scrapy's known
    to, or is a ``BaseSpiderMiddleware`` that overrides none of the request hooks."""
    cls = type(mw)
    if dotted_path(cls) in PASS_THROUGH:
        return True
    hooks = ("process_spider_output", "process_spider_output_async")
    if not any(hasattr(mw, name) for name in hooks):
        return True
    if isinstance(mw, BaseSpiderMiddleware):
        base = BaseSpiderMiddleware
        return all(
            getattr(cls, name) is getattr(base, name) for name in (*hooks, "get_processed_request")
        )
    return False


def scheduler_dupefilter(
    crawler: Crawler, component: str, without: str
) -> tuple[bool, RFPDupeFilter | None]:
    """Whether the engine has opened the spider (its scheduler is there), and the
    scheduler's dupefilter if it is this package's; if it is another, a WARNING says
    that ``component`` goes ``without`` it, and what to set."""
    scheduler = engine_scheduler(crawler)
    if scheduler is None:
        return False, None
    df = getattr(scheduler, "df", None)
    if isinstance(df, RFPDupeFilter):
        return True, df
    logger.warning(
        "%s is enabled but the scheduler's dupefilter is %s, not %s: %s. Set "
        'DUPEFILTER_CLASS = "%s".',
        component,
        type(df).__name__ if df is not None else "missing",
        RFPDupeFilter.public_path,
        without,
        RFPDupeFilter.public_path,
    )
    return True, None


class BatchDedupMiddleware:
    """Spider middleware that checks a callback's requests in one batch."""

    #: Where projects name it (its code lives in this module).
    public_path: ClassVar[str] = "scrapy_dedup_suite.middleware.BatchDedupMiddleware"

    def __init__(self, crawler: Crawler, options: BatchOptions) -> None:
        self.crawler = crawler
        self.size = options.size
        self.threads = options.threads
        self.outage_wait = options.outage_wait
        self._threads = DaemonThreads("dedup-batch", self.threads, keep=1)
        self._dupefilter: RFPDupeFilter | None = None
        self._looked_up = False
        #: Whether the scheduler is the frontier, which batches by itself (None: not
        #: known yet).
        self._frontier: bool | None = None
        crawler.signals.connect(self._spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BatchDedupMiddleware:
        check_crawl_settings(crawler.settings, crawler.spidercls)  # before the engine starts
        check_reachable(crawler.settings)  # ... and before scrapy-redis's scheduler pings
        return cls(crawler, BatchOptions.from_settings(crawler.settings))

    # -- the dupefilter ------------------------------------------------------------------

    def dupefilter(self) -> RFPDupeFilter | None:
        """The scheduler's dupefilter, when it is this package's and nothing after this
        middleware can drop or replace requests (else None: the middleware passes
        everything on and the scheduler filters as before)."""
        if not self._looked_up:
            opened, df = scheduler_dupefilter(
                self.crawler, "BatchDedupMiddleware", "requests pass through unbatched"
            )
            if not opened:
                return None  # the engine has not opened the spider yet: look again later
            self._looked_up = True
            if df is not None and self._placed_last():
                df.policy.closing = self.closing
                self._dupefilter = df
        return self._dupefilter

    def _placed_last(self) -> bool:
        """Whether no spider middleware that may drop or replace requests sees a
        callback's output after this one; if one does, say which and what to set."""
        middlewares = spider_middlewares(self.crawler)
        mine = next(i for i, mw in enumerate(middlewares) if mw is self)
        # The output runs from the spider to the engine: from the last middleware of
        # the list (highest order) to the first, so those before this one come after it.
        after = [mw for mw in middlewares[:mine] if not passes_requests_on(mw)]
        if not after:
            return True
        orders = self._orders()
        named = [f"{dotted_path(type(mw))} (order {orders.get(type(mw), '?')})" for mw in after]
        lowest = min((orders[type(mw)] for mw in after if type(mw) in orders), default=None)
        advice = (
            f"give it an order lower than {lowest}, e.g. SPIDER_MIDDLEWARES = "
            f'{{"{dotted_path(type(self))}": {lowest - 1}}}'
            if lowest is not None
            else "give it the lowest order of the spider middlewares"
        )
        logger.warning(
            "BatchDedupMiddleware passes requests on unbatched: %s see(s) a callback's "
            "output after it and may drop or replace requests it has already recorded as "
            "seen, which would lose their pages. To batch, %s.",
            ", ".join(named),
            advice,
        )
        return False

    def _orders(self) -> dict[type, int]:
        """Each enabled spider middleware's class and its order in SPIDER_MIDDLEWARES."""
        orders: dict[type, int] = {}
        for path, order in self.crawler.settings.getwithbase("SPIDER_MIDDLEWARES").items():
            if order is None:
                continue
            try:
                cls = load_object(path) if isinstance(path, str) else path
            except (ImportError, ValueError, NameError):
                continue
            orders[cls] = order
        return orders

    def closing(self) -> bool:
        """Whether the crawl is closing or stopping (read from batch threads too)."""
        return engine_closing(self.crawler)

    # -- spider output -------------------------------------------------------------------

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        if self.under_frontier():
            async for out in result:  # (the frontier batches them itself)
                yield out
            return
        pending: list[Request] = []
        try:
            async for out in result:
                if not isinstance(out, Request) or out.dont_filter:
                    yield out
                    continue
                pending.append(out)
                if len(pending) >= self.size:
                    batch, pending = pending, []
                    checked = await self._check(batch, spider)
                    for request in checked.requests:
                        yield request
                    checked.raise_failure()
        except Exception:
            # Scrapy schedules what a callback yielded before it raised: so do we.
            if pending:
                checked = await self._check(pending, spider)
                for request in checked.requests:
                    yield request
            raise
        if pending:
            checked = await self._check(pending, spider)
            for request in checked.requests:
                yield request
            checked.raise_failure()

    async def _check(self, requests: Sequence[Request], spider: Spider | None) -> Checked:
        df = self.dupefilter()
        if df is None:
            return Checked(requests)
        batches = df.batches
        batch = batches.prepare(requests)
        try:
            if all(batch.known):  # every one known recorded by the local cache: no round trip
                result = batches.check(batch)
            else:
                deferred = self._threads(batches.check, batch, patience=self.outage_wait)
                result = await maybe_deferred_to_future(deferred)
        except Exception as exc:  # (check handles what Redis and its client raise)
            # Some of its calls may have recorded fingerprints: letting every request
            # through (perhaps crawled twice) is safe, passing them on unadmitted is not.
            result = BatchResult([UNCHECKED] * len(requests), error=ClientFailure(exc))
        return Checked(batches.account(batch, result, spider), result.failure)

    def under_frontier(self) -> bool:
        """Whether the scheduler is the frontier: it records and enqueues what the
        engine hands it a batch at a time, so this middleware passes everything on (said
        once). False until the engine opened the spider."""
        if self._frontier is None:
            scheduler = engine_scheduler(self.crawler)
            if scheduler is None:
                return False  # the engine has not opened the spider yet: look again later
            # (By what it says of itself: Scrapy's BaseScheduler makes isinstance() true
            # for any object with a scheduler's three methods.)
            self._frontier = is_frontier(type(scheduler))
            self._looked_up |= self._frontier  # (no dupefilter then)
            if self._frontier:
                logger.info(
                    "BatchDedupMiddleware passes requests on: the frontier scheduler "
                    "records and enqueues them a batch at a time itself (the middleware "
                    "is not needed with it)"
                )
        return self._frontier

    def _spider_closed(self) -> None:
        if self._dupefilter is not None:
            self._dupefilter.batches.report_unclaimed()  # scrapy-redis's scheduler never closes it
        self._threads.stop()
