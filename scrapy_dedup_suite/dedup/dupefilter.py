"""``RFPDupeFilter``: the one dupefilter class, its storage chosen by ``DEDUP_BACKEND``.

Works under scrapy-redis's scheduler (built with :meth:`RFPDupeFilter.from_spider`,
which never calls ``open``/``close``) and under Scrapy's own scheduler (built
with :meth:`RFPDupeFilter.from_crawler`, then ``open()`` and ``close(reason)``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import ResponseError
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import BaseSettings

from ..backends import DedupBackend, build_backend, other_filters
from ..backends.admission import EvictionWatch
from ..core import error_lines
from ..core.fingerprint import get_fingerprinter, scrapy_redis_fingerprint
from ..server.cluster import refresh_slots
from ..server.connection import UNREACHABLE, get_redis, redis_source, unreachable, without_retries
from ..server.failures import ErrorPolicy, as_failure, is_transient
from ..server.privileges import permission_error
from ..settings.options import DupefilterOptions
from ..settings.table import check, default
from . import advice
from .backend_handle import BackendHandle, HandleAttributes
from .batch import Batches
from .counts import DedupCounts
from .forgetting import Forgetting
from .local_cache import local_cache_for
from .recovery import Recovery
from .request_expiry import RequestExpiry
from .request_step import RequestStep

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

#: Named by its public path (:mod:`scrapy_dedup_suite.dupefilter`), as its log lines always were.
logger = logging.getLogger("scrapy_dedup_suite.dupefilter")

#: scrapy-redis's key for a dupefilter built without a spider (``from_settings``).
SCRAPY_REDIS_DUPEFILTER_KEY = "dupefilter:%(timestamp)s"


def _backend_of(
    backend: DedupBackend | Any, key: str | None, settings: BaseSettings | None
) -> DedupBackend:
    """The backend of ``RFPDupeFilter(backend)`` or, with scrapy-redis's signature,
    of ``RFPDupeFilter(server, key)``: the one the DEDUP_* settings describe at ``key``."""
    if not isinstance(backend, DedupBackend):
        if not isinstance(key, str) or not key:
            raise TypeError(
                "RFPDupeFilter(server, key, debug=False) needs the Redis key as a non-empty "
                f"string, got {key!r}; or pass a DedupBackend: RFPDupeFilter(backend)"
            )
        return build_backend(settings or BaseSettings(), key, server=backend, key=key)
    if key is not None:
        raise TypeError(
            f"RFPDupeFilter({backend!r}, {key!r}): a backend carries its own key; pass "
            "either a backend or (server, key)"
        )
    return backend


class RFPDupeFilter(HandleAttributes, BaseDupeFilter):
    """Redis-backed request duplicates filter with pluggable storage.

    Built either from a backend (``RFPDupeFilter(backend, ...)``, what
    :meth:`from_crawler` and :meth:`from_spider` do) or as scrapy-redis's own
    class is, ``RFPDupeFilter(server, key, debug=False)``: the backend is then
    the one the DEDUP_* settings in ``settings`` (default: the package's
    defaults, i.e. scrapy-redis's set) describe, at ``key``.
    """

    #: Where projects name it (its code lives in this module).
    public_path: ClassVar[str] = "scrapy_dedup_suite.dupefilter.RFPDupeFilter"

    logger = logger

    def __init__(
        self,
        backend: DedupBackend | Any,
        key: str | None = None,
        debug: bool = False,
        *,
        fingerprint: Callable[[Request], str] | None = None,
        stats: StatsCollector | None = None,
        on_error: str = default("DEDUP_ON_ERROR"),
        retries: int = default("DEDUP_ERROR_RETRIES"),
        local_cache: int = default("DEDUP_LOCAL_CACHE"),
        settings: BaseSettings | None = None,
    ) -> None:
        backend = _backend_of(backend, key, settings)
        backend.server = without_retries(backend.server)
        #: The backend (``self.backend``), which the parts below call through it.
        self.handle = BackendHandle(backend, settings)
        self.debug = debug
        self.logdupes = True
        self.counts = DedupCounts(stats, backend.capabilities.probabilistic)
        #: DEDUP_ON_ERROR, DEDUP_ERROR_RETRIES, and whether the crawl is closing
        #: (BatchDedupMiddleware sets ``policy.closing``).
        self.policy = ErrorPolicy(
            check("DEDUP_ON_ERROR", on_error), check("DEDUP_ERROR_RETRIES", retries)
        )
        self.policy.before_retry = lambda error: refresh_slots(self.backend.server)
        #: The setting that chose the server, for the start-up error.
        self.redis_source = redis_source(settings) if settings is not None else "REDIS_URL"
        #: Where the other backends would keep this spider's fingerprints (checked at
        #: open when this filter is empty, to warn of a silent full re-crawl).
        self.others: dict[str, str] = {}
        self._clock: Callable[[], float] = time.monotonic
        self.uses_expire = backend.capabilities.expiring_fingerprints
        self.expiry = RequestExpiry(self.counts, self._clock)
        self.fingerprint = fingerprint or scrapy_redis_fingerprint
        # A subclass's request_fingerprint() (as scrapy-redis's subclasses have) is
        # honoured; without one, request_seen calls the fingerprint function directly.
        overridden = type(self).request_fingerprint is not RFPDupeFilter.request_fingerprint
        self.fingerprint_of = self.request_fingerprint if overridden else self.fingerprint
        self.known = local_cache_for(backend, check("DEDUP_LOCAL_CACHE", local_cache))
        #: Fingerprint, local cache, expiry: the step every path takes (request_step.py).
        expiry = self.expiry if self.uses_expire else None
        self.step = RequestStep(self.fingerprint_of, self.known, expiry)
        #: The crawler (to stop the crawl under DEDUP_ON_ERROR='raise'); ``settings``,
        #: those the backend was built from, are the handle's.
        self.crawler: Crawler | None = None
        #: Eviction noticed while crawling (the policy, and keys evicted since open).
        self.eviction = EvictionWatch(self._clock)
        #: Failed and refused calls, and what was let through unrecorded.
        self.recovery = Recovery(self.handle, self.counts, self.policy, lambda: self.crawler)
        #: The batch path and what it admitted (request_seen answers "new" for those).
        self.batches = Batches(
            self.handle, self.policy, self.counts, self.recovery, self.step,
            eviction=self.eviction, watch_eviction=self.watch_eviction, log=self.log,
        )  # fmt: skip
        self.admitted = self.batches.admitted
        self.forgetting = Forgetting(  # and the pages that failed for good
            self.handle, self.counts, self.fingerprint_of, self.known, self.admitted
        )

    @property
    def stats(self) -> StatsCollector | None:
        return self.counts.stats

    @stats.setter
    def stats(self, stats: StatsCollector | None) -> None:
        self.counts.stats = stats

    @property
    def clock(self) -> Callable[[], float]:
        """The clock of the crawl's age and of eviction checks (injectable)."""
        return self._clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._clock = self.expiry.clock = self.eviction.clock = clock

    # -- construction ------------------------------------------------------------------

    @classmethod
    def _from_settings(
        cls, settings: BaseSettings, spider_name: str | None, crawler: Crawler | None
    ) -> RFPDupeFilter:
        error_lines.install()  # (a refusal from here on is shown as its one line)
        # scrapy-redis's from_settings (no spider): a one-time key, "dupefilter:<timestamp>".
        stamp = {"timestamp": int(time.time())}
        key = None if spider_name is not None else SCRAPY_REDIS_DUPEFILTER_KEY % stamp
        options = DupefilterOptions.from_settings(settings)
        server = get_redis(settings, socket_timeout=options.socket_timeout)
        try:
            backend = build_backend(settings, spider_name or "", server=server, key=key)
        except UNREACHABLE as exc:  # (the hash backend reads which layout is stored)
            raise unreachable(
                server,
                exc,
                redis_source(settings),
                "when the dupefilter was built; the crawl cannot start",
            ) from None
        df = cls(
            backend,
            fingerprint=get_fingerprinter(
                options.fingerprinter, crawler, uniform=backend.capabilities.probabilistic
            ),
            debug=options.debug,
            stats=crawler.stats if crawler is not None else None,
            on_error=options.on_error,
            retries=options.retries,
            local_cache=options.local_cache,
            settings=settings,
        )
        df.crawler = crawler
        if spider_name:
            df.others = other_filters(settings, spider_name, backend.name)
            df.spider_name = spider_name
        return df

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RFPDupeFilter:
        """scrapy-redis's ``from_settings``: no spider, so a one-time key
        ``dupefilter:<timestamp>`` (as scrapy-redis); opened on first use."""
        return cls._from_settings(settings, None, None)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RFPDupeFilter:
        """Scrapy's scheduler: the key is derived from the spider name (stable across runs)."""
        spider = getattr(crawler, "spider", None)
        name = spider.name if spider is not None else crawler.spidercls.name
        return cls._from_settings(crawler.settings, name, crawler)

    @classmethod
    def from_spider(cls, spider: Spider) -> RFPDupeFilter:
        """scrapy-redis's scheduler, which never calls ``open()``: opened here."""
        crawler = getattr(spider, "crawler", None)
        df = cls._from_settings(spider.settings, spider.name, crawler)
        df.open()
        return df

    # -- life cycle --------------------------------------------------------------------

    def open(self) -> None:
        """Check the backend's keys and parameters; fail at start-up if wrong or Redis is
        away (not DEDUP_ON_ERROR: a filter is not used before its parameters are known)."""
        backend = self.backend
        try:
            backend.open()
            if self.others and not backend.held_data:
                warning = advice.other_filters_warning(
                    backend.server, self.others, backend.name, backend.key, self.spider_name
                )
                if warning is not None:
                    self.logger.warning(warning)
            if self.uses_expire:
                self.expiry.start(backend.expire)
        except UNREACHABLE as exc:
            doing = "when the dupefilter opened; the crawl cannot start (DEDUP_ON_ERROR does not "
            raise unreachable(
                backend.server, exc, self.redis_source, doing + "apply at start-up)"
            ) from None
        except ResponseError as exc:  # a command the Redis user may not run: one line
            raise permission_error(exc, backend.server) or exc from None
        self.counts.set("dedup/backend", backend.name)
        self.eviction.look(backend)  # the server's evictions so far: the baseline
        self.logger.info("Dupefilter: %s backend at %r", backend.name, backend.key)

    def close(self, reason: str = "") -> None:
        """Keeps every fingerprint: closing a spider never deletes its history."""
        if self.backend.unreplicated:  # writes whose WAIT (DEDUP_WAIT_REPLICAS) timed out
            self.counts.set("dedup/unreplicated", self.backend.unreplicated)
        self.batches.report_unclaimed()

    def clear(self) -> None:
        """Delete everything stored, the failed pages' record too (scrapy-redis calls this
        when ``SCHEDULER_PERSIST`` is False and on flush). Other workers may go on recording:
        it stays usable. Empties this process's local cache (not another process's)."""
        self.backend.clear()
        self.forgetting.clear()
        if self.known is not None:
            self.known.clear()

    # -- per request -------------------------------------------------------------------

    def request_fingerprint(self, request: Request) -> str:
        return self.fingerprint(request)

    def request_seen(self, request: Request) -> bool:
        step = self.step  # (its parts one by one: a batch's request claimed comes first)
        fp = step.fingerprint_of(request)
        if self.admitted and self.admitted.claim(fp):
            return False  # a batch checked and recorded it: no second round trip
        if step.cached is not None and step.cached(fp):
            self.counts.filtered(0, cached=1)
            return True
        expire = step.expire(request) if step.expire is not None else None
        if self.eviction.due():
            self.watch_eviction()
        backend = self.handle.current
        try:
            if not backend.opened:
                backend.open()
            seen = backend.check_and_add(fp, expire)
        except Exception as exc:  # whatever the client raised: the error policy decides
            failure = as_failure(exc)
            if not is_transient(failure):
                return self.recovery.refused(request, fp, expire, failure)
            return self.recovery.after_failure(request, fp, expire, failure)
        unrecorded = self.recovery.unrecorded
        if not seen and unrecorded.held and unrecorded.discard(fp):
            seen = True  # let through unrecorded before: crawled already, recorded now
        if step.learn is not None:
            step.learn(fp)
        return self.counts.counted(seen)

    def forget(self, *requests: Request) -> int:
        """Make these requests' pages new again (exact backends): how many were seen."""
        return self.forgetting.forget(requests)

    def watch_eviction(self) -> None:
        """Read the server's eviction policy and evictions (EvictionWatch says when)."""
        warning = self.eviction.look(self.backend)
        if warning is not None:
            self.logger.warning(warning)
        if self.eviction.evicted > 0:
            self.counts.set("dedup/evicted_keys", self.eviction.evicted)

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            msg = "Filtered duplicate request: %(request)s"
            self.logger.debug(msg, {"request": request}, extra={"spider": spider})
        elif self.logdupes:
            msg = (
                "Filtered duplicate request %(request)s"
                " - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)"
            )
            self.logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
