"""What the dupefilter does when Redis fails or refuses a call (:class:`Recovery`).

A call that failed on the way (connection lost, timeout, failover, full memory) may
have run: it is retried under DEDUP_ON_ERROR, and a "seen" from the retry is not
trusted. A call the server refused wrote nothing: a filter converted under this
worker is opened again as its record now says; anything else follows the error
policy. Either way the request is never dropped: it is let through (each once,
:class:`~scrapy_dedup_suite.dedup.local_cache.Unrecorded`) or the crawl is stopped with
its requests kept where the scheduler keeps them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_from_coro

from ..exceptions import DedupBackendError, InvalidFingerprintError
from ..server.connection import failure_text
from ..server.failures import as_failure, code_of, translate
from .local_cache import Unrecorded

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

    from ..server.failures import ErrorPolicy
    from .backend_handle import BackendHandle
    from .counts import DedupCounts

logger = logging.getLogger(__name__)


class Recovery:
    """A dupefilter's answers when its call failed or was refused, and what it let
    through unrecorded (:attr:`unrecorded`): on its backend (``handle``), counted in
    ``counts``, under ``policy``; ``crawler()``: the crawl to stop, if any."""

    def __init__(
        self,
        handle: BackendHandle,
        counts: DedupCounts,
        policy: ErrorPolicy,
        crawler: Callable[[], Crawler | None],
    ) -> None:
        self.handle = handle
        self.counts = counts
        self.policy = policy
        self.crawler = crawler
        #: What this process let through while Redis could not record it: each once.
        self.unrecorded = Unrecorded()
        self._said: set[str] = set()  # refusals logged (each said once)
        self._stopping = False

    def after_failure(self, request: Request, fp: str, expire: Any, exc: Exception) -> bool:
        """The call failed. With DEDUP_ON_ERROR='raise', try again at once (no
        pause: the reactor must not sleep), up to DEDUP_ERROR_RETRIES times; then
        let the request through ('allow') or raise.

        The failed call may have been run by Redis before the connection broke,
        so a retry that answers "seen" may be answering our own write: it is not
        trusted, and the request counts as new (``dedup/ambiguous``). A request let
        through unchecked counts in ``dedup/errors`` only.
        """
        backend = self.handle.current
        try:
            seen, retries, exc = self.policy.retry(lambda: backend.check_and_add(fp, expire), exc)
        except Exception as refused:  # (retry raises only what is not transient)
            raise translate(as_failure(refused), backend, fp) from refused
        if retries:
            self.counts.count("dedup/retries", retries)
        if seen is not None:
            self.counts.count("dedup/ambiguous" if seen else "dedup/added")
            return False
        if code_of(exc) == "OOM" and self._recorded_before(fp):
            return True  # full memory refuses writes; reads still answer duplicates
        return self.let_through(
            request,
            fp,
            DedupBackendError(
                f"Redis failed while checking {request!r} against the {backend.name} "
                f"dupefilter at {backend.key!r}, also after {self.policy.retries} retries: "
                f"{failure_text(exc)}"
            ),
            exc,
        )

    def _recorded_before(self, fp: str) -> bool:
        """Whether a read-only check finds ``fp`` (a call that could not write, on a
        server out of memory): then the request is a duplicate, filtered."""
        try:
            found = self.handle.current.contains(fp)
        except Exception:  # (reads fail too: the request is let through once)
            return False
        if found:
            self.counts.filtered()
            self.counts.count("dedup/read_only_filtered")
        return found

    def refused(self, request: Request, fp: str, expire: Any, failure: Exception) -> bool:
        """Redis refused the call: the filter is damaged (a key of another type), changed
        under this worker (a conversion's stamp) or refused the fingerprint. A filter whose
        stamps were switched by a conversion is opened again as its record now says, and
        the call made there; anything else follows the error policy, the request never
        dropped."""
        handle = self.handle
        error = translate(failure, handle.current, fp)
        if isinstance(error, InvalidFingerprintError):
            raise error from failure  # every request would be refused: the fingerprinter
        if code_of(failure) == "dedup:STAMP" and handle.reopen():
            self.counts.count("dedup/reopened")
            try:
                return self.counts.counted(handle.current.check_and_add(fp, expire))
            except Exception as exc:
                failure = as_failure(exc)
                error = translate(failure, handle.current, fp)
        return self.let_through(request, fp, error, failure, refused=True)

    def let_through(
        self, request: Request, fp: str, error: Exception, cause: Exception, refused: bool = False
    ) -> bool:
        """Redis could not record ``fp``. DEDUP_ON_ERROR='raise': the crawl stops (its
        requests kept where the scheduler keeps them) or, without a running crawl,
        ``error`` is raised. 'allow': the request is let through, once: this process
        answers "seen" for it from then on (:class:`Unrecorded`), so no page is crawled
        at every link to it while Redis fails."""
        unrecorded = self.unrecorded
        raises = self.policy.raises
        if not raises and fp in unrecorded:
            self.counts.filtered()
            self.counts.count("dedup/unrecorded_filtered")
            return True
        self.counts.errors(1, cause)
        if raises:
            if not self.stop_crawl(error):
                raise error from cause
            return False
        unrecorded.add(fp)
        if refused:
            said = str(error)
            if said not in self._said:
                self._said.add(said)
                logger.error(
                    "%s. Requests this call refuses are let through (DEDUP_ON_ERROR='allow'), "
                    "each once, and counted in dedup/errors",
                    said.rstrip("."),
                )
            return False
        logger.warning(
            "Redis failed while checking %(request)s (%(error)s); letting it through "
            "(DEDUP_ON_ERROR='allow'), it may be crawled twice",
            {"request": request, "error": failure_text(cause)},
        )
        return False

    def stop_crawl(self, error: Exception) -> bool:
        """DEDUP_ON_ERROR='raise' in a running crawl: say ``error`` and close the spider
        (reason ``dedup_error``). Whether a crawl was there to stop."""
        crawler = self.crawler()
        try:  # (a crawler not crawling yet says so with a RuntimeError)
            engine = crawler.engine if crawler is not None else None
            spider = crawler.spider if crawler is not None else None
        except RuntimeError:
            return False
        if engine is None or spider is None or not engine.running:
            return False
        if not self._stopping:
            self._stopping = True
            logger.error(
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
