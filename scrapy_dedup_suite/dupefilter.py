"""``RFPDupeFilter``: the one dupefilter class, its storage chosen by ``DEDUP_BACKEND``.

Works under scrapy-redis's scheduler (built with :meth:`RFPDupeFilter.from_spider`,
which never calls ``open``/``close``) and under Scrapy's own scheduler (built
with :meth:`RFPDupeFilter.from_crawler`, then ``open()`` and ``close(reason)``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import BaseSettings

from . import config, scripts
from .backends import (  # noqa: F401 - dupefilter_key re-exported
    DedupBackend,
    build_backend,
    dupefilter_key,
    find_other_filters,
    other_filters,
)
from .backends.base import STABLE_ANSWERS, FailedCall, cluster_node_error
from .connection import (
    UNREACHABLE,
    failure_text,
    get_redis,
    redis_source,
    unreachable,
    without_retries,
)
from .exceptions import (
    DedupBackendError,
    DedupConfigError,
    DedupError,
    InvalidFingerprintError,
    WrongKeyTypeError,
)
from .fingerprint import get_fingerprinter, scrapy_redis_fingerprint
from .options import ON_ERROR, DupefilterOptions, check_local_cache, check_retries

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

T = TypeVar("T")


#: Redis failures that follow DEDUP_ON_ERROR (connection lost, timeout, server
#: loading or failing over, a cluster down, resharding or unreachable); anything
#: else is a misconfigured or damaged filter and is raised.
TRANSIENT = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterError,  # CLUSTERDOWN, MASTERDOWN, redirections exhausted
    TryAgainError,
    SlotNotCoveredError,
    RedisClusterException,  # no node of the cluster reachable
    BusyLoadingError,  # LOADING
    OutOfMemoryError,  # OOM: full memory under noeviction
)

#: Other error replies that mean "not now" rather than "wrong": a long script
#: running, too few replicas (an OOM refusal of a script's own write is matched
#: by its text).
TRANSIENT_REPLIES = ("BUSY ", "NOREPLICAS ")

#: What a failed dedup call raises (RedisClusterException is not a RedisError).
FAILURES = (RedisError, RedisClusterException, DedupBackendError)


def _never() -> bool:
    return False


#: scrapy-redis's key for a dupefilter built without a spider (``from_settings``).
SCRAPY_REDIS_DUPEFILTER_KEY = "dupefilter:%(timestamp)s"


@dataclass
class Batch:
    """Requests to check together (:meth:`RFPDupeFilter.prepare_batch`): their
    fingerprints and expiries, and which of them the local cache knows are recorded
    (those are not sent)."""

    requests: Sequence[Request]
    fingerprints: list[str]
    expires: list[float | None]
    known: list[bool]


class KnownFingerprints:
    """A bounded set of fingerprints this process knows are recorded (least recently
    used dropped first), for backends whose answer never turns from seen back to new
    (``STABLE_ANSWERS``). Used on the reactor thread only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._fps: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, fp: object) -> bool:
        if fp in self._fps:
            self._fps.move_to_end(fp)  # type: ignore[arg-type]
            return True
        return False

    def __len__(self) -> int:
        return len(self._fps)

    def add(self, fp: str) -> None:
        self._fps[fp] = None
        self._fps.move_to_end(fp)
        if len(self._fps) > self.size:
            self._fps.popitem(last=False)

    def clear(self) -> None:
        self._fps.clear()


#: What a batch found for each fingerprint (:attr:`BatchResult.outcomes`).
SEEN = "seen"  # a duplicate: dropped
NEW = "new"  # recorded by the batch: admitted
AMBIGUOUS = "ambiguous"  # a retry after a failed call said "seen", maybe the failed
#                          call's own write: counts as new, admitted
UNCHECKED = "unchecked"  # Redis failed: let through unrecorded (DEDUP_ON_ERROR='allow')
DEFERRED = "deferred"  # the server refused its call, which wrote nothing: passed on
#                        unadmitted, so the scheduler checks it as without the batch
FAILED = "failed"  # Redis failed (DEDUP_ON_ERROR='raise'): dropped, and ``failure``
#                    raised once the others are passed on


@dataclass
class BatchResult:
    """What one batch check-and-add found (:meth:`RFPDupeFilter.check_fingerprints`):
    an outcome per fingerprint; ``error``, the failure behind UNCHECKED ones;
    ``refused``, the refusal behind DEFERRED ones; ``failure``, what to raise for
    FAILED ones."""

    outcomes: list[str]
    retries: int = 0
    error: Exception | None = None
    refused: Exception | None = None
    failure: Exception | None = None

    @property
    def seen(self) -> list[bool]:
        return [outcome == SEEN for outcome in self.outcomes]


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
        on_error: str = config.default("DEDUP_ON_ERROR"),
        retries: int = config.default("DEDUP_ERROR_RETRIES"),
        local_cache: int = config.default("DEDUP_LOCAL_CACHE"),
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
        self.on_error = config.check_choice("DEDUP_ON_ERROR", on_error, ON_ERROR)
        self.retries = check_retries(retries)
        self.logdupes = True
        #: The setting that chose the server, for the start-up error.
        self.redis_source = redis_source(settings) if settings is not None else "REDIS_URL"
        #: Where the other backends would keep this spider's fingerprints (checked at
        #: open when this filter is empty, to warn of a silent full re-crawl).
        self.others: dict[str, str] = {}
        self.spider_name = ""
        self._uses_expire = backend.uses_expire
        #: When a crawl has run longer than the filter's expiry (DEDUP_EXPIRE), pages
        #: it saw first are new again: said once (_warn_of_age). Injectable clock.
        self.clock: Callable[[], float] = time.monotonic
        self._age_limit = math.inf
        self._bad_expire_logged = False
        self._filtered_stats = ["dupefilter/filtered", "dedup/filtered"]
        if backend.is_bloom:
            self._filtered_stats.append("bloomfilter/filtered")
        self.fingerprint = fingerprint or scrapy_redis_fingerprint
        # A subclass that overrides request_fingerprint() (as scrapy-redis's
        # subclasses do) is honoured; without one, request_seen calls the
        # fingerprint function directly.
        overridden = type(self).request_fingerprint is not RFPDupeFilter.request_fingerprint
        self._fp = self.request_fingerprint if overridden else self.fingerprint
        # Fingerprints a batch checked and recorded as new (BatchDedupMiddleware), each
        # with how many of its requests were let through: request_seen answers "new"
        # that many times without a round trip, whatever object carries the fingerprint
        # (a replace() copy made after the batch is admitted as the original was).
        self._admitted: dict[str, int] = {}
        #: Whether the crawl is closing (BatchDedupMiddleware sets it): batches then
        #: stop waiting out an outage, and once one has failed the next fail at once.
        self.closing: Callable[[], bool] = _never
        self._failed_while_closing: Exception | None = None
        self._known: KnownFingerprints | None = None
        local_cache = check_local_cache(local_cache)
        if local_cache and STABLE_ANSWERS in backend.capabilities:
            self._known = KnownFingerprints(local_cache)
        elif local_cache:
            self.logger.warning(
                "DEDUP_LOCAL_CACHE is ignored for the %s backend: its answers turn from seen "
                "back to new when fingerprints expire, which a local cache cannot know",
                backend.name,
            )

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
        backend = build_backend(settings, spider_name or "", server=server, key=key)
        df = cls(
            backend,
            fingerprint=get_fingerprinter(options.fingerprinter, crawler, uniform=backend.is_bloom),
            debug=options.debug,
            stats=crawler.stats if crawler is not None else None,
            on_error=options.on_error,
            retries=options.retries,
            local_cache=options.local_cache,
            settings=settings,
        )
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
        try:
            self.backend.open()
            if self.others and not self.backend.held_data:
                self._warn_of_other_filters()
            if self._uses_expire:
                self._age_limit = self.clock() + float(getattr(self.backend, "expire", math.inf))
        except UNREACHABLE as exc:
            raise unreachable(
                self.backend.server,
                exc,
                self.redis_source,
                "when the dupefilter opened; the crawl cannot start (DEDUP_ON_ERROR does not "
                "apply at start-up)",
            ) from None
        if self.stats is not None:
            self.stats.set_value("dedup/backend", self.backend.name)
        self.logger.info("Dupefilter: %s backend at %r", self.backend.name, self.backend.key)

    def _warn_of_age(self) -> None:
        self._age_limit = math.inf  # once
        self.logger.warning(
            "This crawl has run longer than DEDUP_EXPIRE (%s s): the fingerprints it "
            "recorded first have expired, so their pages count as new again, and a site "
            "whose pages link to each other is crawled again and again. Raise DEDUP_EXPIRE "
            "above the crawl's length (or use request.meta['dedup_expire'] for the pages "
            "that should come back sooner).",
            f"{getattr(self.backend, 'expire', 0):g}",
        )

    def _warn_of_other_filters(self) -> None:
        """This filter held nothing: if another backend holds this spider's
        fingerprints, say so (the crawl would fetch all of them again) and how to
        keep them."""
        found = find_other_filters(self.backend.server, self.others)
        if not found:
            return
        chosen = self.backend.name
        advice = []
        for name, _key, _what in found:
            if name == "set" and chosen in ("bloom", "windowed-bloom", "hash"):
                advice.append(
                    f"convert the set with `scrapy migrate-set-to-bloom --spider "
                    f"{self.spider_name} --to {chosen}`, or set DEDUP_BACKEND = 'set' to go on "
                    "with it"
                )
            else:
                advice.append(f"set DEDUP_BACKEND = {name!r} to go on with it")
        self.logger.warning(
            "The %s dupefilter at %r holds nothing yet, but this spider's fingerprints are "
            "elsewhere: %s. This crawl does not see them, so it fetches every page they "
            "recorded again. To keep them: %s.",
            chosen,
            self.backend.key,
            "; ".join(what for _, _, what in found),
            "; or ".join(dict.fromkeys(advice)),
        )

    def close(self, reason: str = "") -> None:
        """Keeps every fingerprint: closing a spider never deletes its history."""
        if self.stats is not None and self.backend.unreplicated:
            # Writes whose WAIT (DEDUP_WAIT_REPLICAS) timed out.
            self.stats.set_value("dedup/unreplicated", self.backend.unreplicated)
        self.report_unclaimed()

    def report_unclaimed(self) -> int:
        """Say (once) how many requests a batch recorded as new that never reached the
        scheduler: their pages are recorded but were not queued. Returns that number."""
        count = sum(self._admitted.values())
        if count:
            self._admitted.clear()
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
        if self._known is not None:
            self._known.clear()

    # -- per request -------------------------------------------------------------------

    def request_fingerprint(self, request: Request) -> str:
        return self.fingerprint(request)

    def request_seen(self, request: Request) -> bool:
        fp = self._fp(request)
        if self._admitted and fp in self._admitted:
            self._claim(fp)  # a batch checked and recorded it: no second round trip
            return False
        known = self._known
        if known is not None and fp in known:
            self._count_filtered(0, cached=1)
            return True
        expire = None
        if self._uses_expire:
            expire = self._expire(request)
            if self.clock() > self._age_limit:
                self._warn_of_age()
        backend = self.backend
        try:
            if not backend.opened:
                backend.open()
            seen = backend.check_and_add(fp, expire)
        except FAILURES as exc:
            if not self._transient(exc):
                raise self._translate(exc, fp) from exc
            return self._after_failure(request, fp, expire, exc)
        if known is not None:
            known.add(fp)
        if seen:
            self._count_filtered()
        elif self.stats is not None:
            self.stats.inc_value("dedup/added")
        return seen

    def _claim(self, fp: str) -> None:
        left = self._admitted[fp] - 1
        if left:
            self._admitted[fp] = left
        else:
            del self._admitted[fp]

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
            return config.check_expire("request.meta['dedup_expire']", value)
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

    # -- batches (BatchDedupMiddleware) -------------------------------------------------

    def prepare_batch(self, requests: Sequence[Request]) -> Batch:
        """Fingerprints and expiries of ``requests``, and which the local cache knows
        (on the reactor thread: the fingerprinter, the cache and the stats are not
        thread-safe)."""
        fps = [self._fp(request) for request in requests]
        if self._uses_expire:
            expires = [self._expire(request) for request in requests]
        else:
            expires = [None] * len(fps)
        known = self._known
        cached = [fp in known for fp in fps] if known is not None else [False] * len(fps)
        return Batch(requests, fps, expires, cached)

    def check_batch(self, batch: Batch, patience: float = 0.0) -> BatchResult:
        """:meth:`check_fingerprints` for the fingerprints of ``batch`` the local cache
        does not know (those it knows answer "seen"). Safe to run in a thread."""
        if not any(batch.known):
            return self.check_fingerprints(batch.fingerprints, batch.expires, patience)
        todo = [i for i, known in enumerate(batch.known) if not known]
        if not todo:
            return BatchResult([SEEN] * len(batch.known))
        sent = self.check_fingerprints(
            [batch.fingerprints[i] for i in todo], [batch.expires[i] for i in todo], patience
        )
        outcomes = [SEEN] * len(batch.known)
        for j, i in enumerate(todo):
            outcomes[i] = sent.outcomes[j]
        sent.outcomes = outcomes
        return sent

    def check_fingerprints(
        self,
        fingerprints: Sequence[str],
        expires: Sequence[float | None] | None = None,
        patience: float = 0.0,
    ) -> BatchResult:
        """Check and record many fingerprints in one round trip per master.

        What a call could not answer: if the server refused the call, it wrote
        nothing, and its fingerprints are DEFERRED to the scheduler's per-request
        check; if the call failed on the way (it may have run), they are tried again
        for ``patience`` seconds (DEDUP_BATCH_OUTAGE_WAIT), and a "seen" then is not
        trusted (AMBIGUOUS); past that, DEDUP_ON_ERROR applies to them as
        :meth:`request_seen` applies it to one request. Blocking and touching no
        stats: safe to run in a thread; then :meth:`account` on the reactor thread."""
        count = len(fingerprints)
        each = list(expires) if expires is not None else [None] * count
        result = BatchResult([NEW] * count)
        backend = self.backend
        failed = self._failed_while_closing
        if failed is not None and self.closing():
            return self._give_up(result, range(count), failed)  # closing: no call, no wait
        try:
            if not backend.opened:  # after clear(), say: opened again under the policy
                backend.open()
            answers, failures = backend.try_check_and_add_many(fingerprints, each)
        except FAILURES as exc:
            answers, failures = [None] * count, [FailedCall(list(range(count)), exc)]
        for i, seen in enumerate(answers):
            if seen:
                result.outcomes[i] = SEEN
        retry: list[int] = []
        error: Exception | None = None
        for call in failures:
            if not isinstance(call.error, FAILURES):
                raise call.error
            if self._transient(call.error):
                retry += call.indices
                error = error or call.error
                continue
            result.refused = self._translate(call.error, fingerprints[call.indices[0]])
            for i in call.indices:
                result.outcomes[i] = DEFERRED
        if error is None:
            return result
        retry.sort()
        again_fps = [fingerprints[i] for i in retry]
        again_expires = [each[i] for i in retry]
        try:
            again, result.retries, error = self._retry(
                lambda: backend.check_and_add_many(again_fps, again_expires),
                again_fps[0],
                error,
                patience,
            )
        except DedupError as exc:  # refused on a retry, after a call that may have run
            result.failure = exc
            for i in retry:
                result.outcomes[i] = FAILED
            return result
        if again is not None:
            for i, seen in zip(retry, again):
                result.outcomes[i] = AMBIGUOUS if seen else NEW
            return result
        if self.closing():
            self._failed_while_closing = error
        return self._give_up(result, retry, error)

    def _give_up(
        self, result: BatchResult, indices: Iterable[int], error: Exception
    ) -> BatchResult:
        """Fingerprints Redis could not check: let through or failed (DEDUP_ON_ERROR)."""
        indices = list(indices)
        if self.on_error == "raise":
            result.failure = DedupBackendError(
                f"Redis failed while checking a batch of {len(indices)} request(s) against "
                f"the {self.backend.name} dupefilter at {self.backend.key!r}, also after "
                f"{self.retries} retries: {failure_text(error)}"
            )
            result.failure.__cause__ = error
            outcome = FAILED
        else:
            result.error = error
            outcome = UNCHECKED
        for i in indices:
            result.outcomes[i] = outcome
        return result

    def account(
        self, batch: Batch, result: BatchResult, spider: Spider | None = None
    ) -> list[Request]:
        """Count and log a batch's answers as :meth:`request_seen` would, admit its new
        requests (their request_seen answers False with no round trip), and return the
        requests to pass on: the new ones and the DEFERRED ones, which the scheduler
        checks one by one. Then raise ``result.failure``, if any, yourself."""
        stats = self.stats
        requests = batch.requests
        outcomes = result.outcomes
        tally = {outcome: outcomes.count(outcome) for outcome in set(outcomes)}
        if stats is not None:
            stats.inc_value("dedup/batches")
            stats.inc_value("dedup/batched", len(requests))
            if result.retries:
                stats.inc_value("dedup/retries", result.retries)
            failed = tally.get(UNCHECKED, 0) + tally.get(FAILED, 0)
            if failed:
                stats.inc_value("dedup/errors", failed)
            for outcome, name in ((NEW, "dedup/added"), (AMBIGUOUS, "dedup/ambiguous")):
                if tally.get(outcome):
                    stats.inc_value(name, tally[outcome])
            if tally.get(DEFERRED):
                stats.inc_value("dedup/batch_deferred", tally[DEFERRED])
        if tally.get(UNCHECKED):
            self.logger.warning(
                "Redis failed while checking a batch of %(count)d request(s) (%(error)s); "
                "letting them through (DEDUP_ON_ERROR='allow'), they may be crawled twice",
                {"count": tally[UNCHECKED], "error": failure_text(result.error)},
            )
        if tally.get(DEFERRED):
            self.logger.warning(
                "Redis refused a batch call for %(count)d request(s) (%(error)s); it wrote "
                "nothing, and the scheduler checks each of them as without the batch",
                {"count": tally[DEFERRED], "error": result.refused},
            )
        known = self._known
        admitted = self._admitted
        passed = []
        cached = 0
        for request, fp, outcome, was_known in zip(
            requests, batch.fingerprints, outcomes, batch.known
        ):
            if outcome == SEEN:
                cached += was_known
                if known is not None:
                    known.add(fp)
                if spider is not None:
                    self.log(request, spider)
                continue
            if outcome == FAILED:
                continue
            if outcome != DEFERRED:
                if known is not None and outcome != UNCHECKED:
                    known.add(fp)
                admitted[fp] = admitted.get(fp, 0) + 1
            passed.append(request)
        self._count_filtered(tally.get(SEEN, 0) - cached, cached)
        return passed

    @staticmethod
    def _transient(exc: Exception) -> bool:
        """Whether a failed call follows DEDUP_ON_ERROR: the server could not be
        reached or refused for now (full memory, busy script, cluster down, read
        only), as opposed to a filter that is misconfigured or damaged."""
        if isinstance(exc, TRANSIENT):
            return True
        if isinstance(exc, ResponseError):
            message = str(exc)
            return (
                message.startswith(TRANSIENT_REPLIES)
                or "command not allowed when used memory" in message
            )
        return False

    def _after_failure(self, request: Request, fp: str, expire: Any, exc: Exception) -> bool:
        """The call failed. With DEDUP_ON_ERROR='raise', try again at once (no
        pause: the reactor must not sleep), up to DEDUP_ERROR_RETRIES times; then
        let the request through ('allow') or raise.

        The failed call may have been run by Redis before the connection broke,
        so a retry that answers "seen" may be answering our own write: it is not
        trusted, and the request counts as new (``dedup/ambiguous``). A request let
        through unchecked counts in ``dedup/errors`` only.
        """
        seen, retries, exc = self._retry(lambda: self.backend.check_and_add(fp, expire), fp, exc)
        if self.stats is not None and retries:
            self.stats.inc_value("dedup/retries", retries)
        if seen is not None:
            if self.stats is not None:
                self.stats.inc_value("dedup/ambiguous" if seen else "dedup/added")
            return False
        if self.stats is not None:
            self.stats.inc_value("dedup/errors")
        if self.on_error == "raise":
            raise DedupBackendError(
                f"Redis failed while checking {request!r} against the {self.backend.name} "
                f"dupefilter at {self.backend.key!r}, also after {self.retries} retries: "
                f"{failure_text(exc)}"
            ) from exc
        self.logger.warning(
            "Redis failed while checking %(request)s (%(error)s); letting it through "
            "(DEDUP_ON_ERROR='allow'), it may be crawled twice",
            {"request": request, "error": failure_text(exc)},
        )
        return False

    def _retry(
        self, attempt: Callable[[], T], fp: str, error: Exception, patience: float = 0.0
    ) -> tuple[T | None, int, Exception]:
        """After ``error``, a transient failure: with DEDUP_ON_ERROR='raise', call
        ``attempt`` again at once (the reactor must not sleep), up to
        DEDUP_ERROR_RETRIES times; then, for ``patience`` seconds (a batch in its own
        thread only), again after growing pauses. Returns its answer (None if every
        retry failed, or none was made), the retries made and the last error. Touches
        no stats (the batch path runs it in a thread)."""
        at_once = self.retries if self.on_error == "raise" else 0
        deadline = time.monotonic() + patience
        pause = 0.05
        retries = 0
        while True:
            if retries >= at_once:
                left = deadline - time.monotonic()
                if left <= 0 or self.closing():  # closing: a pause (1 s at most) ends it
                    return None, retries, error
                time.sleep(min(pause, left))
                pause = min(2 * pause, 1.0)
            retries += 1
            try:
                return attempt(), retries, error
            except FAILURES as exc:
                if not self._transient(exc):
                    raise self._translate(exc, fp) from exc
                error = exc

    def _translate(self, exc: Exception, fp: str) -> Exception:
        if isinstance(exc, DedupError):
            return exc
        message = str(exc)
        if isinstance(exc, AskError):
            return cluster_node_error(exc)
        if "WRONGTYPE" in message:
            # Find out which key, and report it exactly.
            try:
                self.backend.check_types(self.backend.expected_types())
            except WrongKeyTypeError as precise:
                return precise
        if "dedup: fingerprint" in message:
            return InvalidFingerprintError(
                f"fingerprint {fp!r} is not a hex digest of at least 16 bytes, which the "
                f"{self.backend.name} backend needs"
            )
        return DedupBackendError(
            f"Redis refused a {self.backend.name} dupefilter call: {scripts.explain(message)}"
        )

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
