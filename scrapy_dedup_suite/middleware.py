"""``BatchDedupMiddleware``: a page's links checked and recorded in one round trip.

Turned on with one line::

    SPIDER_MIDDLEWARES = {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50}

It collects the requests a callback yields (up to ``DEDUP_BATCH_SIZE``, and at
the end of the callback's output), fingerprints them, checks and records them
in one call to the dupefilter's backend (one round trip on a single server, one
per master touched on a cluster), drops the duplicates with the dupefilter's
stats and log lines, and passes the new ones on; the dupefilter then admits
those without another round trip. Items pass through at once, never held back
for requests; ``dont_filter`` requests are left alone. Start requests are
batched the same way.

The round trip runs on a thread of its own pool, so the reactor (asyncio's or
any other) goes on downloading and parsing while a batch is in flight; the
callback's output resumes when the answer is in.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from .dupefilter import RFPDupeFilter
from .options import BatchOptions

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class BatchDedupMiddleware:
    """Spider middleware that checks a callback's requests in one batch."""

    def __init__(self, crawler: Crawler, options: BatchOptions) -> None:
        self.crawler = crawler
        self.size = options.size
        self.threads = options.threads
        self.outage_wait = options.outage_wait
        self._pool: ThreadPool | None = None
        self._dupefilter: RFPDupeFilter | None = None
        self._looked_up = False
        crawler.signals.connect(self._stop_pool, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BatchDedupMiddleware:
        return cls(crawler, BatchOptions.from_settings(crawler.settings))

    # -- the dupefilter ------------------------------------------------------------------

    def dupefilter(self) -> RFPDupeFilter | None:
        """The scheduler's dupefilter, when it is this package's (else None: the
        middleware passes everything on and the scheduler filters as before)."""
        if not self._looked_up:
            engine = self.crawler.engine
            slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
            scheduler = getattr(slot, "scheduler", None)
            if scheduler is None:
                return None  # the engine has not opened the spider yet: look again later
            self._looked_up = True
            df = getattr(scheduler, "df", None)
            if isinstance(df, RFPDupeFilter):
                self._dupefilter = df
            else:
                logger.warning(
                    "BatchDedupMiddleware is enabled but the scheduler's dupefilter is %s, not "
                    "scrapy_dedup_suite.dupefilter.RFPDupeFilter: requests pass through "
                    "unbatched. Set DUPEFILTER_CLASS = "
                    '"scrapy_dedup_suite.dupefilter.RFPDupeFilter".',
                    type(df).__name__ if df is not None else "missing",
                )
        return self._dupefilter

    # -- spider output -------------------------------------------------------------------

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        async for out in self._batched(result, spider):
            yield out

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for out in self._batched(start, self.crawler.spider):
            yield out

    async def _batched(
        self, result: AsyncIterator[Any], spider: Spider | None
    ) -> AsyncIterator[Any]:
        pending: list[Request] = []
        async for out in result:
            if not isinstance(out, Request) or out.dont_filter:
                yield out
                continue
            pending.append(out)
            if len(pending) >= self.size:
                for request in await self._check(pending, spider):
                    yield request
                pending = []
        if pending:
            for request in await self._check(pending, spider):
                yield request

    async def _check(self, requests: Sequence[Request], spider: Spider | None) -> Iterable[Request]:
        df = self.dupefilter()
        if df is None:
            return requests
        from twisted.internet import reactor  # the one Scrapy installed

        batch = df.prepare_batch(requests)
        if all(batch.known):  # every one known recorded by the local cache: no round trip
            return df.account(batch, df.check_batch(batch), spider)
        deferred = deferToThreadPool(
            reactor, self._threads(), df.check_batch, batch, patience=self.outage_wait
        )
        result = await maybe_deferred_to_future(deferred)
        return df.account(batch, result, spider)

    def _threads(self) -> ThreadPool:
        if self._pool is None:
            self._pool = ThreadPool(1, self.threads, name="dedup-batch")
            self._pool.start()
        return self._pool

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool = None
