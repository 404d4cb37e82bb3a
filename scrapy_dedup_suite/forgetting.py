"""What a dupefilter forgets (:class:`Forgetting`, ``df.forgetting``): requests given
back from code, and the pages that failed for good in this run, forgotten when the
spider closes (see :mod:`.failed`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .backends.forget import cannot_forget
from .connection import failure_text
from .exceptions import DedupConfigError
from .failures import as_failure, translate

if TYPE_CHECKING:
    from scrapy import Request

    from .dupefilter import RFPDupeFilter

logger = logging.getLogger(__name__)

#: The most failed pages a process remembers in one run (about 200 bytes each); the
#: ones after are counted and said, not forgotten.
FAILED_LIMIT = 100_000


class Forgetting:
    """A dupefilter's forgetting: requests given back from code (:meth:`forget`) and
    the pages that failed for good in this run (:attr:`failed`), forgotten at close."""

    def __init__(self, df: RFPDupeFilter) -> None:
        self.df = df
        #: Fingerprints of pages that failed for good in this run, with their URLs.
        self.failed: dict[str, str] = {}
        #: Failed pages past :data:`FAILED_LIMIT` (not remembered).
        self.overflow = 0

    def forget(self, requests: Iterable[Request]) -> int:
        """Remove the fingerprints of ``requests`` (an exact backend; a Bloom filter's
        refusal is a DedupConfigError saying what to do instead): how many were
        recorded. This process's local cache and batch admissions forget them too."""
        fps = list(dict.fromkeys(self.df.fingerprint_of(request) for request in requests))
        return self.forget_fingerprints(fps)

    def forget_fingerprints(self, fingerprints: list[str]) -> int:
        df = self.df
        backend = df.backend
        if not backend.capabilities.forget:
            raise DedupConfigError(cannot_forget(backend))
        if not fingerprints:
            return 0
        try:
            if not backend.opened:
                backend.open()
            removed = backend.forget_many(fingerprints)
        except Exception as exc:  # whatever the client raised, as the package's error
            raise translate(as_failure(exc), backend, fingerprints[0]) from exc
        known = df.known
        for fp in fingerprints:
            if known is not None:
                known.discard(fp)
            df.admitted.pop(fp, None)
            self.failed.pop(fp, None)
        df.counts.count("dedup/forgotten", removed)
        return removed

    def failed_for_good(self, request: Request, reason: str) -> None:
        """``request``'s download failed for good (``reason``: ``http_503``, an
        exception's class name): count it, and remember its page to forget at close,
        with the pages that redirected to it."""
        df = self.df
        df.counts.count("dedup/failed")
        df.counts.count(f"dedup/failed/{reason}")
        urls = [*request.meta.get("redirect_urls", ()), request.url]
        for url in urls:
            fp = df.fingerprint_of(request if url == request.url else request.replace(url=url))
            if fp in self.failed:
                continue
            if len(self.failed) >= FAILED_LIMIT:
                self.overflow += 1
                continue
            self.failed[fp] = url

    def succeeded(self, request: Request) -> None:
        """``request`` was downloaded after all (a retry by other means): not failed."""
        self.failed.pop(self.df.fingerprint_of(request), None)

    def close(self, forget_failed: bool) -> int:
        """At the spider's close: forget the pages that failed for good (if
        ``forget_failed`` and the backend can), and say so in one line. Never raises:
        a close must end. Returns how many were forgotten."""
        count = len(self.failed) + self.overflow
        if not count:
            return 0
        backend = self.df.backend
        past = (
            f" ({self.overflow} past the {FAILED_LIMIT:,} a run remembers stay recorded)"
            if self.overflow
            else ""
        )
        if not forget_failed:
            logger.info(
                "%d page(s) failed for good in this run and stay recorded as seen "
                "(DEDUP_FORGET_FAILED is off): the next run does not download them",
                count,
            )
            return 0
        if not backend.capabilities.forget:
            logger.warning(
                "%d page(s) failed for good in this run and stay recorded as seen. %s",
                count,
                cannot_forget(backend),
            )
            return 0
        urls = list(self.failed.values())
        try:
            self.forget_fingerprints(list(self.failed))
        except Exception as exc:  # (a close must end: said, and the pages named)
            logger.error(
                "%d page(s) failed for good in this run, and forgetting them failed (%s): "
                "they stay recorded as seen; forget them with scrapy dedup-forget, e.g. %s",
                count,
                failure_text(exc),
                ", ".join(urls[:3]),
            )
            return 0
        logger.info(
            "%d page(s) failed for good in this run; forgot them, so that the next run "
            "downloads them again (dedup/forgotten)%s",
            len(urls),
            past,
        )
        self.failed.clear()
        return len(urls)
