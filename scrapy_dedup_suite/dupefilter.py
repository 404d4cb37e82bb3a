"""``RFPDupeFilter``: the one dupefilter class, its storage chosen by ``DEDUP_BACKEND``.

Works under scrapy-redis's scheduler (built with :meth:`RFPDupeFilter.from_spider`,
which never calls ``open``/``close``) and under Scrapy's own scheduler (built
with :meth:`RFPDupeFilter.from_crawler`, then ``open()`` and ``close(reason)``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import BaseSettings
from scrapy.utils.defer import deferred_from_coro

from . import advice, batch
from .backends import (  # noqa: F401 - dupefilter_key re-exported
    DedupBackend,
    build_backend,
    dupefilter_key,
    other_filters,
)
from .backends.admission import EvictionWatch
from .batch import (  # noqa: F401 - re-exported: the batch API's types and outcomes
    AMBIGUOUS,
    DEFERRED,
    FAILED,
    NEW,
    SEEN,
    UNCHECKED,
    Batch,
    BatchResult,
)
from .connection import (
    UNREACHABLE,
    failure_text,
    get_redis,
    redis_source,
    refresh_slots,
    unreachable,
    without_retries,
)
from .exceptions import DedupBackendError, DedupConfigError, InvalidFingerprintError
from .failures import ErrorPolicy, as_failure, code_of, is_transient, translate
from .fingerprint import get_fingerprinter, scrapy_redis_fingerprint
from .local_cache import KnownFingerprints, Unrecorded
from .options import DupefilterOptions
from .settings_table import check, default

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: scrapy-redis's key for a dupefilter built without a spider (``from_settings``).
SCRAPY_REDIS_DUPEFILTER_KEY = "dupefilter:%(timestamp)s"


class RFPDupeFilter(BaseDupeFilter):
    """Redis-backed request duplicates filter with pluggable storage.

    Built either from a backend (``RFPDupeFilter(backend, ...)``, what
    :meth:`from_crawler` and :meth:`from_spider` do) or as scrapy-redis's own
    class is, ``RFPDupeFilter(server, key, debug=False)``: the backend is then
    the one the DEDUP_* settings in ``settings`` (default: the package's
    defaults, i.e. scrapy-redis's set) describe, at ``key``.
    """

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
        if not isinstance(backend, DedupBackend):
            # scrapy-redis's signature: (server, key, debug=False).
            if not isinstance(key, str) or not key:
                raise TypeError(
                    "RFPDupeFilter(server, key, debug=False) needs the Redis key as a non-empty "
                    f"string, got {key!r}; or pass a DedupBackend: RFPDupeFilter(backend)"
                )
            backend = build_backend(settings or BaseSettings(), key, server=backend, key=key)
        elif key is not None:
            raise TypeError(
                f"RFPDupeFilter({backend!r}, {key!r}): a backend carries its own key; pass "
                "either a backend or (server, key)"
            )
        backend.server = without_retries(backend.server)
        self.backend = backend
        self.debug = debug
        self.stats = stats
        #: DEDUP_ON_ERROR, DEDUP_ERROR_RETRIES, and whether the crawl is closing.
        self.policy = ErrorPolicy(
            check("DEDUP_ON_ERROR", on_error), check("DEDUP_ERROR_RETRIES", retries)
        )
        self.policy.before_retry = lambda error: refresh_slots(self.backend.server)
        self.logdupes = True
        #: The setting that chose the server, for the start-up error.
        self.redis_source = redis_source(settings) if settings is not None else "REDIS_URL"
        #: Where the other backends would keep this spider's fingerprints (checked at
        #: open when this filter is empty, to warn of a silent full re-crawl).
        self.others: dict[str, str] = {}
        self.spider_name = ""
        self._uses_expire = backend.capabilities.expiring_fingerprints
        #: When a crawl has run longer than the filter's expiry (DEDUP_EXPIRE), pages
        #: it saw first are new again: said once. Injectable clock.
        self.clock: Callable[[], float] = time.monotonic
        self._age_limit = math.inf
        self._bad_expire_logged = False
        self._filtered_stats = ["dupefilter/filtered", "dedup/filtered"]
        if backend.capabilities.probabilistic:
            self._filtered_stats.append("bloomfilter/filtered")
        self.fingerprint = fingerprint or scrapy_redis_fingerprint
        # A subclass that overrides request_fingerprint() (as scrapy-redis's
        # subclasses do) is honoured; without one, request_seen calls the
        # fingerprint function directly.
        overridden = type(self).request_fingerprint is not RFPDupeFilter.request_fingerprint
        self._fp = self.request_fingerprint if overridden else self.fingerprint
        #: What batches (BatchDedupMiddleware) recorded as new and let through:
        #: request_seen answers "new" for them without a round trip.
        self.admitted = batch.Admitted()
        #: What this process let through while Redis could not record it: each once.
        self.unrecorded = Unrecorded()
        #: The settings the backend was built from (to open it again after a conversion)
        #: and the crawler (to stop the crawl under DEDUP_ON_ERROR='raise').
        self.settings = settings
        self.crawler: Crawler | None = None
        self._said: set[str] = set()  # refusals logged (each said once)
        #: Eviction noticed while crawling (the policy, and keys evicted since open).
        self.eviction = EvictionWatch(lambda: self.clock())
        self._stopping = False
        self.known: KnownFingerprints | None = None
        local_cache = check("DEDUP_LOCAL_CACHE", local_cache)
        if local_cache and backend.capabilities.stable_answers:
            self.known = KnownFingerprints(local_cache)
        elif local_cache:
            self.logger.warning(
                "DEDUP_LOCAL_CACHE is ignored for the %s backend: its answers turn from seen "
                "back to new when fingerprints expire, which a local cache cannot know",
                backend.name,
            )

    @property
    def on_error(self) -> str:
        return self.policy.on_error

    @property
    def retries(self) -> int:
        return self.policy.retries

    @property
    def closing(self) -> Callable[[], bool]:
        """Whether the crawl is closing (BatchDedupMiddleware sets it): batches then
        stop waiting out an outage, and once one has failed the next fail at once."""
        return self.policy.closing

    @closing.setter
    def closing(self, closing: Callable[[], bool]) -> None:
        self.policy.closing = closing

    # scrapy-redis's RFPDupeFilter exposes these; code written for it reads and sets them.
    @property
    def server(self) -> Any:
        return self.backend.server

    @server.setter
    def server(self, server: Any) -> None:
        self.backend = self.backend.rebind(server=without_retries(server))

    @property
    def key(self) -> str:
        return self.backend.key

    @key.setter
    def key(self, key: str) -> None:
        self.backend = self.backend.rebind(key=key)

    # -- construction ------------------------------------------------------------------

    @classmethod
    def _from_settings(
        cls, settings: BaseSettings, spider_name: str | None, crawler: Crawler | None
    ) -> RFPDupeFilter:
        key = None
        if spider_name is None:
            # scrapy-redis's from_settings: a one-time key, "dupefilter:<timestamp>".
            key = SCRAPY_REDIS_DUPEFILTER_KEY % {"timestamp": int(time.time())}
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
        """Check the backend's keys and parameters; fail at start-up if wrong, or if
        Redis cannot be reached (DEDUP_ON_ERROR applies to requests, not to this check:
        a filter must not be used before its parameters are known)."""
        backend = self.backend
        try:
            backend.open()
            if self.others and not backend.held_data:
                warning = advice.other_filters_warning(
                    backend.server, self.others, backend.name, backend.key, self.spider_name
                )
                if warning is not None:
                    self.logger.warning(warning)
            if self._uses_expire:
                self._age_limit = self.clock() + backend.expire
        except UNREACHABLE as exc:
            raise unreachable(
                backend.server,
                exc,
                self.redis_source,
                "when the dupefilter opened; the crawl cannot start (DEDUP_ON_ERROR does not "
                "apply at start-up)",
            ) from None
        if self.stats is not None:
            self.stats.set_value("dedup/backend", backend.name)
        self.eviction.look(backend)  # the server's evictions so far: the baseline
        self.logger.info("Dupefilter: %s backend at %r", backend.name, backend.key)

    def close(self, reason: str = "") -> None:
        """Keeps every fingerprint: closing a spider never deletes its history."""
        if self.stats is not None and self.backend.unreplicated:
            # Writes whose WAIT (DEDUP_WAIT_REPLICAS) timed out.
            self.stats.set_value("dedup/unreplicated", self.backend.unreplicated)
        self.report_unclaimed()

    def report_unclaimed(self) -> int:
        """Say (once) how many requests a batch recorded as new that never reached the
        scheduler: their pages are recorded but were not queued. Returns that number."""
        count = self.admitted.take_unclaimed()
        if count:
            if self.stats is not None:
                self.stats.inc_value("dedup/batch_unclaimed", count)
            self.logger.warning(
                "%d request(s) that BatchDedupMiddleware recorded as new never reached the "
                "scheduler (a component after it dropped them): their pages are recorded as "
                "seen without having been queued",
                count,
            )
        return count

    def clear(self) -> None:
        """Delete everything the backend stored (scrapy-redis calls this when
        ``SCHEDULER_PERSIST`` is False and on flush). Other workers may go on
        recording into the same filter: it stays usable for them and for later runs.
        Empties this process's local cache (another process's clear() does not reach it)."""
        self.backend.clear()
        if self.known is not None:
            self.known.clear()

    # -- per request -------------------------------------------------------------------

    def request_fingerprint(self, request: Request) -> str:
        return self.fingerprint(request)

    def request_seen(self, request: Request) -> bool:
        fp = self._fp(request)
        if self.admitted and self.admitted.claim(fp):
            return False  # a batch checked and recorded it: no second round trip
        known = self.known
        if known is not None and fp in known:
            self._count_filtered(0, cached=1)
            return True
        expire = None
        if self._uses_expire:
            expire = self._expire(request)
            if self.clock() > self._age_limit:
                self._age_limit = math.inf  # said once
                self.logger.warning(advice.age_warning(self.backend.expire))
        if self.eviction.due():
            self._watch_eviction()
        backend = self.backend
        try:
            if not backend.opened:
                backend.open()
            seen = backend.check_and_add(fp, expire)
        except Exception as exc:  # whatever the client raised: the error policy decides
            failure = as_failure(exc)
            if not is_transient(failure):
                return self._refused(request, fp, expire, failure)
            return self._after_failure(request, fp, expire, failure)
        if not seen and self.unrecorded and self.unrecorded.discard(fp):
            seen = True  # let through unrecorded before: crawled already, recorded now
        if known is not None:
            known.add(fp)
        return self._counted(seen)

    def _counted(self, seen: bool) -> bool:
        """Count one request's answer (filtered or added); returns it."""
        if seen:
            self._count_filtered()
        elif self.stats is not None:
            self.stats.inc_value("dedup/added")
        return seen

    def _watch_eviction(self) -> None:
        """Read the server's eviction policy and evictions (EvictionWatch says when)."""
        warning = self.eviction.look(self.backend)
        if warning is not None:
            self.logger.warning(warning)
        if self.stats is not None and self.eviction.evicted > 0:
            self.stats.set_value("dedup/evicted_keys", self.eviction.evicted)

    def _count_filtered(self, count: int = 1, cached: int = 0) -> None:
        stats = self.stats
        if stats is None or not count + cached:
            return
        for name in self._filtered_stats:
            stats.inc_value(name, count + cached)
        if cached:
            stats.inc_value("dedup/cache_hits", cached)

    def _expire(self, request: Request) -> float | None:
        """``request.meta["dedup_expire"]`` if valid; a bad value is counted, logged
        once, and the filter's own expiry applies to that request."""
        value = request.meta.get("dedup_expire")
        if value is None:
            return None
        try:
            return float(check("DEDUP_EXPIRE", value, "request.meta['dedup_expire']"))
        except DedupConfigError as exc:
            if self.stats is not None:
                self.stats.inc_value("dedup/invalid_expire")
            if not self._bad_expire_logged:
                self._bad_expire_logged = True
                self.logger.error(
                    "%s (in %s); the filter's DEDUP_EXPIRE applies to such requests. Further "
                    "bad values are counted in dedup/invalid_expire, not logged.",
                    exc,
                    request,
                )
            return None

    # -- batches (BatchDedupMiddleware; the logic is in batch.py) -----------------------

    def prepare_batch(self, requests: Sequence[Request]) -> Batch:
        """Fingerprints and expiries of ``requests``, and which the local cache knows
        (on the reactor thread: the fingerprinter, the cache and the stats are not
        thread-safe)."""
        fps = [self._fp(request) for request in requests]
        if self._uses_expire:
            expires = [self._expire(request) for request in requests]
        else:
            expires = [None] * len(fps)
        known = self.known
        cached = [fp in known for fp in fps] if known is not None else [False] * len(fps)
        return Batch(requests, fps, expires, cached)

    def check_batch(self, requests: Batch, patience: float = 0.0) -> BatchResult:
        """:func:`batch.check_batch`: blocking and touching no stats, safe in a thread."""
        return batch.check_batch(self.backend, self.policy, requests, patience)

    def check_fingerprints(
        self,
        fingerprints: Sequence[str],
        expires: Sequence[float | None] | None = None,
        patience: float = 0.0,
    ) -> BatchResult:
        """:func:`batch.check`: blocking and touching no stats, safe in a thread."""
        return batch.check(self.backend, self.policy, fingerprints, expires, patience)

    def account(
        self, requests: Batch, result: BatchResult, spider: Spider | None = None
    ) -> list[Request]:
        """Count and log a batch's answers as :meth:`request_seen` would, admit its new
        requests (their request_seen answers False with no round trip), and return the
        requests to pass on: the new ones and the DEFERRED ones, which the scheduler
        checks one by one. Then raise ``result.failure``, if any, yourself (in a running
        crawl the crawl is stopped instead, and the failed requests passed on)."""
        if result.failure is not None and self._stop_crawl(result.failure):
            # DEDUP_ON_ERROR='raise' in a running crawl: stopped, and the requests Redis
            # could not check go to the scheduler's queue instead of being dropped.
            result.outcomes = [UNCHECKED if o == FAILED else o for o in result.outcomes]
            result.failure = None
        tally = Counter(result.outcomes)
        if self.eviction.due(len(requests.requests)):
            self._watch_eviction()
        batch.count_stats(self.stats, requests, result, tally)
        batch.warn(self.logger, result, tally)
        unrecorded = self.unrecorded
        passed, duplicates, cached = batch.sort_out(
            requests, result, self.known, self.admitted, unrecorded
        )
        if unrecorded.let_through_again and self.stats is not None:
            self.stats.inc_value("dedup/unrecorded_filtered", unrecorded.let_through_again)
        unrecorded.let_through_again = 0
        if spider is not None:
            for request in duplicates:
                self.log(request, spider)
        self._count_filtered(len(duplicates) - cached, cached)
        return passed

    def _after_failure(self, request: Request, fp: str, expire: Any, exc: Exception) -> bool:
        """The call failed. With DEDUP_ON_ERROR='raise', try again at once (no
        pause: the reactor must not sleep), up to DEDUP_ERROR_RETRIES times; then
        let the request through ('allow') or raise.

        The failed call may have been run by Redis before the connection broke,
        so a retry that answers "seen" may be answering our own write: it is not
        trusted, and the request counts as new (``dedup/ambiguous``). A request let
        through unchecked counts in ``dedup/errors`` only.
        """
        backend = self.backend
        try:
            seen, retries, exc = self.policy.retry(lambda: backend.check_and_add(fp, expire), exc)
        except Exception as refused:  # (retry raises only what is not transient)
            raise translate(as_failure(refused), backend, fp) from refused
        if self.stats is not None and retries:
            self.stats.inc_value("dedup/retries", retries)
        if seen is not None:
            if self.stats is not None:
                self.stats.inc_value("dedup/ambiguous" if seen else "dedup/added")
            return False
        if code_of(exc) == "OOM" and self._recorded_before(fp):
            return True  # full memory refuses writes; reads still answer duplicates
        return self._let_through(
            request,
            fp,
            DedupBackendError(
                f"Redis failed while checking {request!r} against the {backend.name} "
                f"dupefilter at {backend.key!r}, also after {self.retries} retries: "
                f"{failure_text(exc)}"
            ),
            exc,
        )

    def _recorded_before(self, fp: str) -> bool:
        """Whether a read-only check finds ``fp`` (a call that could not write, on a
        server out of memory): then the request is a duplicate, filtered."""
        try:
            found = self.backend.contains(fp)
        except Exception:  # (reads fail too: the request is let through once)
            return False
        if found:
            self._count_filtered()
            if self.stats is not None:
                self.stats.inc_value("dedup/read_only_filtered")
        return found

    def _refused(self, request: Request, fp: str, expire: Any, failure: Exception) -> bool:
        """Redis refused the call: the filter is damaged (a key of another type), changed
        under this worker (a conversion's stamp) or refused the fingerprint. A filter whose
        stamps were switched by a conversion is opened again as its record now says, and
        the call made there; anything else follows the error policy, the request never
        dropped."""
        backend = self.backend
        error = translate(failure, backend, fp)
        if isinstance(error, InvalidFingerprintError):
            raise error from failure  # every request would be refused: the fingerprinter
        if code_of(failure) == "dedup:STAMP" and self._reopen():
            try:
                return self._check_now(fp, expire)
            except Exception as exc:
                failure = as_failure(exc)
                error = translate(failure, self.backend, fp)
        return self._let_through(request, fp, error, failure, refused=True)

    def _check_now(self, fp: str, expire: Any) -> bool:
        """One check-and-add of ``fp`` on the backend, counted as request_seen counts."""
        return self._counted(self.backend.check_and_add(fp, expire))

    def _reopen(self) -> bool:
        """Build the backend again from the settings and what the filter's record says
        now (a conversion switched its layout under this worker): whether it changed."""
        old = self.backend
        if self.settings is None:
            return False
        try:
            new = build_backend(self.settings, self.spider_name, server=old.server, key=old.key)
            new.open()
        except Exception as exc:
            self.logger.error(
                "The %s filter at %r refused this worker's layout, and opening it again failed: %s",
                old.name,
                old.key,
                failure_text(exc),
            )
            return False
        if type(new) is type(old):
            return False
        new.server = without_retries(new.server)
        self.backend = new
        self.logger.warning(
            "The filter at %r was converted under this worker (its stamps say another layout): "
            "reopened it as %s and went on; other workers do the same on their next request",
            old.key,
            type(new).__name__,
        )
        if self.stats is not None:
            self.stats.inc_value("dedup/reopened")
        return True

    def _let_through(
        self, request: Request, fp: str, error: Exception, cause: Exception, refused: bool = False
    ) -> bool:
        """Redis could not record ``fp``. DEDUP_ON_ERROR='raise': the crawl stops (its
        requests kept where the scheduler keeps them) or, without a running crawl,
        ``error`` is raised. 'allow': the request is let through, once: this process
        answers "seen" for it from then on (:class:`Unrecorded`), so no page is crawled
        at every link to it while Redis fails."""
        unrecorded = self.unrecorded
        if not self.policy.raises and fp in unrecorded:
            self._count_filtered()
            if self.stats is not None:
                self.stats.inc_value("dedup/unrecorded_filtered")
            return True
        if self.stats is not None:
            self.stats.inc_value("dedup/errors")
        if self.policy.raises:
            if not self._stop_crawl(error):
                raise error from cause
            return False
        unrecorded.add(fp)
        if refused:
            said = str(error)
            if said not in self._said:
                self._said.add(said)
                self.logger.error(
                    "%s. Requests this call refuses are let through (DEDUP_ON_ERROR='allow'), "
                    "each once, and counted in dedup/errors",
                    said.rstrip("."),
                )
            return False
        self.logger.warning(
            "Redis failed while checking %(request)s (%(error)s); letting it through "
            "(DEDUP_ON_ERROR='allow'), it may be crawled twice",
            {"request": request, "error": failure_text(cause)},
        )
        return False

    def _stop_crawl(self, error: Exception) -> bool:
        """DEDUP_ON_ERROR='raise' in a running crawl: say ``error`` and close the spider
        (reason ``dedup_error``). Whether a crawl was there to stop."""
        try:  # (a crawler not crawling yet says so with a RuntimeError)
            engine = self.crawler.engine if self.crawler is not None else None
            spider = self.crawler.spider if self.crawler is not None else None
        except RuntimeError:
            return False
        if engine is None or spider is None or not engine.running:
            return False
        if not self._stopping:
            self._stopping = True
            self.logger.error(
                "%s. Stopping the crawl (DEDUP_ON_ERROR='raise'): requests already "
                "scheduled stay in the scheduler's queue",
                str(error).rstrip("."),
            )
            close = getattr(engine, "close_spider_async", None)  # Scrapy >= 2.14
            if close is not None:
                deferred_from_coro(close(reason="dedup_error"))
            else:
                engine.close_spider(spider, "dedup_error")
        return True

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
