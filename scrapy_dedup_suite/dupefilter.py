"""``RFPDupeFilter``: the one dupefilter class, its storage chosen by ``DEDUP_BACKEND``.

Works under scrapy-redis's scheduler (built with :meth:`RFPDupeFilter.from_spider`,
which never calls ``open``/``close``) and under Scrapy's own scheduler (built
with :meth:`RFPDupeFilter.from_crawler`, then ``open()`` and ``close(reason)``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import (
    AskError,
    ClusterError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import BaseSettings

from . import config
from .backends import DedupBackend, get_backend_class
from .backends.base import cluster_node_error
from .connection import get_redis
from .exceptions import DedupBackendError, InvalidFingerprintError, WrongKeyTypeError
from .fingerprint import get_fingerprinter, scrapy_redis_fingerprint

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

ON_ERROR = ("allow", "raise")

#: Redis failures that may pass (connection lost, timeout, server loading or
#: failing over, a cluster down or resharding); anything else is a bug or a
#: misconfiguration and is raised.
TRANSIENT = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterError,  # CLUSTERDOWN, MASTERDOWN, redirections exhausted
    TryAgainError,
    SlotNotCoveredError,
)


def dupefilter_key(settings: BaseSettings, backend_name: str, spider_name: str) -> str:
    """``SCHEDULER_DUPEFILTER_KEY`` if the project sets it, else the backend's default."""
    template = settings.get("SCHEDULER_DUPEFILTER_KEY")
    if template is None:
        template = config.default("DEDUP_DEFAULT_KEYS").get(
            backend_name, config.default("DEDUP_DEFAULT_KEY")
        )
    if not isinstance(template, str):
        raise config.DedupConfigError(
            "SCHEDULER_DUPEFILTER_KEY must be a string such as '%(spider)s:dupefilter', "
            f"got {template!r}"
        )
    try:
        return template % {"spider": spider_name}
    except (KeyError, ValueError, TypeError) as exc:
        raise config.DedupConfigError(
            f"SCHEDULER_DUPEFILTER_KEY {template!r} is not a valid key template ({exc}); the only "
            "placeholder is %(spider)s"
        ) from None


def build_backend(
    settings: BaseSettings, spider_name: str, server: Any = None, key: str | None = None
) -> DedupBackend:
    """The backend ``DEDUP_BACKEND`` names, built from settings, not yet opened.

    ``key`` replaces the base key derived from ``SCHEDULER_DUPEFILTER_KEY``.
    """
    cls = get_backend_class(settings.get("DEDUP_BACKEND", config.default("DEDUP_BACKEND")))
    if server is None:
        server = get_redis(settings)
    if key is None:
        key = dupefilter_key(settings, cls.name or settings.get("DEDUP_BACKEND"), spider_name)
    return cls.from_settings(server, key, settings)


class RFPDupeFilter(BaseDupeFilter):
    """Redis-backed request duplicates filter with pluggable storage."""

    logger = logger

    def __init__(
        self,
        backend: DedupBackend,
        *,
        fingerprint: Callable[[Request], str] = scrapy_redis_fingerprint,
        debug: bool = False,
        stats: StatsCollector | None = None,
        on_error: str = config.default("DEDUP_ON_ERROR"),
        retries: int = config.default("DEDUP_ERROR_RETRIES"),
    ) -> None:
        self.backend = backend
        self.fingerprint = fingerprint
        self.debug = debug
        self.stats = stats
        self.on_error = config.check_choice("DEDUP_ON_ERROR", on_error, ON_ERROR)
        self.retries = config.check_int(
            "DEDUP_ERROR_RETRIES", retries, minimum=0, allowed="a whole number >= 0"
        )
        self.logdupes = True
        self._uses_expire = backend.uses_expire
        self._filtered_stats = ["dedup/filtered"]
        if backend.is_bloom:
            self._filtered_stats.append("bloomfilter/filtered")

    # scrapy-redis's RFPDupeFilter exposes these; code written for it reads them.
    @property
    def server(self) -> Any:
        return self.backend.server

    @property
    def key(self) -> str:
        return self.backend.key

    # -- construction ------------------------------------------------------------------

    @classmethod
    def _from_settings(
        cls, settings: BaseSettings, spider_name: str, crawler: Crawler | None
    ) -> RFPDupeFilter:
        backend = build_backend(settings, spider_name)
        return cls(
            backend,
            fingerprint=get_fingerprinter(
                settings.get("DEDUP_FINGERPRINTER", config.default("DEDUP_FINGERPRINTER")), crawler
            ),
            debug=settings.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats if crawler is not None else None,
            on_error=settings.get("DEDUP_ON_ERROR", config.default("DEDUP_ON_ERROR")),
            retries=settings.get("DEDUP_ERROR_RETRIES", config.default("DEDUP_ERROR_RETRIES")),
        )

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
        """Check the backend's keys and parameters; fail at start-up if wrong."""
        self.backend.open()
        if self.stats is not None:
            self.stats.set_value("dedup/backend", self.backend.name)
        self.logger.info("Dupefilter: %s backend at %r", self.backend.name, self.backend.key)

    def close(self, reason: str = "") -> None:
        """Keeps every fingerprint: closing a spider never deletes its history."""

    def clear(self) -> None:
        """Delete everything the backend stored (scrapy-redis calls this when
        ``SCHEDULER_PERSIST`` is False and on flush)."""
        self.backend.clear()

    # -- per request -------------------------------------------------------------------

    def request_fingerprint(self, request: Request) -> str:
        return self.fingerprint(request)

    def request_seen(self, request: Request) -> bool:
        fp = self.fingerprint(request)
        expire = request.meta.get("dedup_expire") if self._uses_expire else None
        try:
            seen = self.backend.check_and_add(fp, expire)
        except TRANSIENT as exc:
            retried = self._retry(fp, expire)
            if retried is None:
                return self._failed(request, exc)
            seen = retried
        except ResponseError as exc:
            raise self._translate(exc, fp) from exc
        stats = self.stats
        if stats is not None:
            if seen:
                for name in self._filtered_stats:
                    stats.inc_value(name)
            else:
                stats.inc_value("dedup/added")
        return seen

    def _retry(self, fp: str, expire: Any) -> bool | None:
        """With DEDUP_ON_ERROR='raise', try again with a growing pause; None if all failed.

        (With 'allow' the request goes through at once: an outage must not stall the crawl.)
        """
        if self.on_error != "raise":
            return None
        for attempt in range(self.retries):
            time.sleep(0.1 * 2**attempt)
            if self.stats is not None:
                self.stats.inc_value("dedup/retries")
            try:
                return self.backend.check_and_add(fp, expire)
            except TRANSIENT:
                continue
        return None

    def _failed(self, request: Request, exc: Exception) -> bool:
        if self.stats is not None:
            self.stats.inc_value("dedup/errors")
        if self.on_error == "raise":
            raise DedupBackendError(
                f"Redis failed while checking {request!r} against the {self.backend.name} "
                f"dupefilter at {self.backend.key!r}, also after {self.retries} retries: {exc}"
            ) from exc
        self.logger.warning(
            "Redis failed while checking %(request)s (%(error)s); letting it through "
            "(DEDUP_ON_ERROR='allow'), it may be crawled twice",
            {"request": request, "error": exc},
        )
        return False

    def _translate(self, exc: ResponseError, fp: str) -> Exception:
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
        return DedupBackendError(f"Redis refused a {self.backend.name} dupefilter call: {message}")

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
