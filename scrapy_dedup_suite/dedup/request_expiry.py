"""A request's expiry on backends whose fingerprints expire (:class:`RequestExpiry`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..exceptions import DedupConfigError
from ..settings.table import check
from . import advice

if TYPE_CHECKING:
    from scrapy import Request

    from .counts import DedupCounts

logger = logging.getLogger(__name__)


class RequestExpiry:
    """``request.meta["dedup_expire"]``, read for each request, and the crawl's age
    against the filter's expiry (DEDUP_EXPIRE): once a crawl has run longer, the pages
    it saw first are new again, which is said once."""

    def __init__(self, counts: DedupCounts, clock: Callable[[], float]) -> None:
        self.counts = counts
        self.clock = clock
        self.expire = math.inf
        self._age_limit = math.inf
        self._bad_logged = False

    def start(self, expire: float) -> None:
        """The crawl's age counts from now (the filter opened)."""
        self.expire = expire
        self._age_limit = self.clock() + expire

    def of(self, request: Request) -> float | None:
        """The request's own expiry (None: the filter's); a bad value is counted,
        logged once, and the filter's own expiry applies to that request."""
        if self.clock() > self._age_limit:
            self._age_limit = math.inf  # said once
            logger.warning(advice.age_warning(self.expire))
        value = request.meta.get("dedup_expire")
        if value is None:
            return None
        try:
            return float(check("DEDUP_EXPIRE", value, "request.meta['dedup_expire']"))
        except DedupConfigError as exc:
            self.counts.count("dedup/invalid_expire")
            if not self._bad_logged:
                self._bad_logged = True
                logger.error(
                    "%s (in %s); the filter's DEDUP_EXPIRE applies to such requests. Further "
                    "bad values are counted in dedup/invalid_expire, not logged.",
                    exc,
                    request,
                )
            return None
