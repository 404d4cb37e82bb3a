"""A page that failed is not a page that was seen: forgetting fingerprints.

A request is recorded when it is scheduled. If its download then fails for good, its
fingerprint would stay, and the next run and every other worker would take the page
for seen: lost for good on a backend that never expires. ``FailedPagesMiddleware``, a
downloader middleware that Scrapy calls after RetryMiddleware, sees what RetryMiddleware
gave up on (a download exception, or an HTTP code of DEDUP_FAILED_HTTP_CODES) and tells
the dupefilter (:class:`Forgetting`, ``df.forgetting``), which forgets those pages when
the spider closes (DEDUP_FORGET_FAILED), so that the next run downloads them again.

At the close, not at once: forgotten at once, a page that fails every time would be
downloaded again at every link to it; recorded until the close, it is tried once a run
(on ``hash``, once every DEDUP_FAILED_EXPIRE). Bloom filters cannot remove a member:
their failed pages are counted, said, and listed in Redis for ``scrapy dedup-forget
--failed``. Under the frontier scheduler a page that failed for good first goes back to
its queue, to be tried again later (FRONTIER_RETRY_TIMES, with a growing delay).
Docs: docs/failures.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from scrapy import signals
from scrapy.exceptions import IgnoreRequest

from ..settings.table import read
from .engine_state import engine_scheduler
from .forgetting import Forgetting
from .middleware import scheduler_dupefilter

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: The order of FailedPagesMiddleware in DOWNLOADER_MIDDLEWARES: below RetryMiddleware's
#: 550, so that Scrapy calls it with what RetryMiddleware did not retry.
ORDER = 540


class FailedPagesMiddleware:
    """Tells the dupefilter which downloads failed for good; enabled by the add-on at
    :data:`ORDER`. With DEDUP_FORGET_FAILED off it still counts them (``dedup/failed``)
    and says at the close that they stay recorded as seen, as scrapy-redis keeps them."""

    #: Where projects name it (its code lives in this module).
    public_path: ClassVar[str] = "scrapy_dedup_suite.failed.FailedPagesMiddleware"

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.forget = read(crawler.settings, "DEDUP_FORGET_FAILED")
        self.expire = read(crawler.settings, "DEDUP_FAILED_EXPIRE")
        codes = read(crawler.settings, "DEDUP_FAILED_HTTP_CODES")
        if codes is None:
            codes = [int(code) for code in crawler.settings.getlist("RETRY_HTTP_CODES")]
        self.codes = frozenset(codes)
        self._forgetting: Forgetting | None = None
        self._looked_up = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FailedPagesMiddleware:
        middleware = cls(crawler)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def forgetting(self) -> Forgetting | None:
        """The scheduler's dupefilter's, when it is this package's."""
        if not self._looked_up:
            opened, df = scheduler_dupefilter(
                self.crawler, "FailedPagesMiddleware", "failed pages are not forgotten"
            )
            if not opened:
                return None  # the engine has not opened the spider yet: look again later
            self._looked_up = True
            if df is not None:
                self._forgetting = df.forgetting
                self._forgetting.configure(records=self.forget, expire_failed=self.expire)
        return self._forgetting

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Any:
        # Every request counts, dont_filter ones too: RetryMiddleware sets dont_filter on
        # each retry it makes, so the request that fails for good always has it.
        forgetting = self.forgetting()
        if forgetting is not None:
            if response.status in self.codes:
                if not self._retried_later(request):
                    forgetting.failed_for_good(request, f"http_{response.status}")
            elif forgetting.failed:
                forgetting.succeeded(request)
        return response

    def process_exception(
        self, request: Request, exception: BaseException, spider: Spider | None = None
    ) -> None:
        if isinstance(exception, IgnoreRequest):
            return None  # (a decision, not a failure)
        forgetting = self.forgetting()
        if forgetting is not None and not self._retried_later(request):
            forgetting.failed_for_good(request, type(exception).__name__)
        return None

    def _retried_later(self, request: Request) -> bool:
        """Whether the scheduler (the frontier's) puts the page back in its queue to try
        it again later, rather than leave it failed for good."""
        scheduler = engine_scheduler(self.crawler)
        retry_later = getattr(scheduler, "retry_later", None)
        return bool(retry_later(request)) if retry_later is not None else False

    def spider_opened(self, spider: Spider | None = None) -> None:
        forgetting = self.forgetting()
        if forgetting is not None:
            forgetting.open(self.forget)

    def spider_closed(self, spider: Spider | None = None) -> None:
        if self._forgetting is not None:
            self._forgetting.close(self.forget)
