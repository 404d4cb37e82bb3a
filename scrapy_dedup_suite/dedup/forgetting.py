"""What a dupefilter forgets (:class:`Forgetting`, ``df.forgetting``): requests given
back from code, and the pages that failed for good, forgotten when the spider closes
(see :mod:`.failed`).

The failed pages are also recorded in Redis beside the filter (``<key>:failed``, a hash
fingerprint -> URL, up to :data:`FAILED_LIMIT`): a run killed before its close leaves
them to the next run, which forgets them when it opens, and a Bloom filter's stay listed
for ``scrapy dedup-forget --failed``."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..backends.clearing import delete_if_type
from ..backends.forget import cannot_forget
from ..backends.keys import chunks, failed_key, read_hash
from ..exceptions import DedupConfigError
from ..server.connection import failure_text
from ..server.failures import as_failure, translate

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request

    from .backend_handle import BackendHandle
    from .batch import Admitted
    from .counts import DedupCounts
    from .local_cache import KnownFingerprints

logger = logging.getLogger(__name__)

#: The most failed pages a process remembers in one run (about 200 bytes each), and
#: the most the record in Redis holds; the ones after are counted and said, not forgotten.
FAILED_LIMIT = 100_000


class Forgetting:
    """A dupefilter's forgetting: requests given back from code (:meth:`forget`) and
    the pages that failed for good (:attr:`failed`, and the record in Redis), forgotten
    when the spider opens and closes. It removes fingerprints (``fingerprint_of``) from
    the backend (``handle``), the local cache (``known``) and what a batch ``admitted``,
    counted in ``counts``."""

    def __init__(
        self,
        handle: BackendHandle,
        counts: DedupCounts,
        fingerprint_of: Callable[[Request], str],
        known: KnownFingerprints | None,
        admitted: Admitted,
    ) -> None:
        self.handle = handle
        self.counts = counts
        self.fingerprint_of = fingerprint_of
        self.known = known
        self.admitted = admitted
        #: Fingerprints of pages that failed for good in this run, with their URLs.
        self.failed: dict[str, str] = {}
        #: Failed pages past :data:`FAILED_LIMIT` (not remembered).
        self.overflow = 0
        #: Whether failed pages are recorded in Redis (DEDUP_FORGET_FAILED).
        self.records = True
        #: Seconds a failed page stays seen within the run where fingerprints expire
        #: (DEDUP_FAILED_EXPIRE; 0: until the close).
        self.expire_failed = 0.0
        self._said: set[str] = set()

    def configure(self, records: bool, expire_failed: float) -> None:
        """FailedPagesMiddleware's settings: whether failed pages are recorded in Redis
        (DEDUP_FORGET_FAILED), and how long one stays seen (DEDUP_FAILED_EXPIRE)."""
        self.records = records
        self.expire_failed = expire_failed

    @property
    def failed_key(self) -> str:
        return failed_key(self.handle.current.key)

    # -- forgetting ----------------------------------------------------------------------

    def forget(self, requests: Iterable[Request]) -> int:
        """Remove the fingerprints of ``requests`` (an exact backend; a Bloom filter's
        refusal is a DedupConfigError saying what to do instead): how many were
        recorded. This process's local cache and batch admissions forget them too."""
        fps = list(dict.fromkeys(self.fingerprint_of(request) for request in requests))
        return self.forget_fingerprints(fps)

    def forget_fingerprints(self, fingerprints: list[str]) -> int:
        backend = self.handle.current
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
        known = self.known
        for fp in fingerprints:
            if known is not None:
                known.discard(fp)
            self.admitted.pop(fp, None)
        self.counts.count("dedup/forgotten", removed)
        return removed

    def recorded(self) -> dict[str, str]:
        """The failed pages recorded in Redis: this run's, and those a run killed before
        its close or another worker left."""
        return read_hash(self.handle.current.server, self.failed_key)

    def forget_failed(self) -> dict[str, str]:
        """Forget the pages that failed for good, this process's and those recorded, and
        remove their records (those another worker adds meanwhile stay): the pages."""
        pages = {**self.recorded(), **self.failed}
        if not pages:
            return pages
        self.forget_fingerprints(list(pages))
        self.drop_records(list(pages))
        self.failed.clear()
        return pages

    def drop_records(self, fingerprints: list[str]) -> None:
        """Remove these failed pages from the record in Redis."""
        server = self.handle.current.server
        for part in chunks(fingerprints):
            server.hdel(self.failed_key, *part)

    def clear(self) -> None:
        """The filter was cleared: its failed pages with it (a key of another type is
        an error, and kept)."""
        self.failed.clear()
        delete_if_type(self.handle.current, [self.failed_key], {self.failed_key: "hash"})

    # -- what FailedPagesMiddleware says ---------------------------------------------------

    def failed_for_good(self, request: Request, reason: str) -> None:
        """``request``'s download failed for good (``reason``: ``http_503``, an
        exception's class name): count it, and remember its page to forget at close,
        with the pages that redirected to it."""
        self.counts.count("dedup/failed")
        self.counts.count(f"dedup/failed/{reason}")
        new: dict[str, str] = {}
        for url in [*request.meta.get("redirect_urls", ()), request.url]:
            fp = self.fingerprint_of(request if url == request.url else request.replace(url=url))
            if fp in self.failed:
                continue
            if len(self.failed) >= FAILED_LIMIT:
                self.overflow += 1
                continue
            self.failed[fp] = new[fp] = url
        if new and self.records:
            self._call(lambda server: self._record(server, new), "record failed pages in Redis")
            caps = self.handle.current.capabilities
            if self.expire_failed and caps.expiring_fingerprints and caps.forget:
                self._call(lambda server: self._expire_soon(list(new)), "expire failed pages")

    def _expire_soon(self, fingerprints: list[str]) -> None:
        """Record ``fingerprints`` again with the short expiry of DEDUP_FAILED_EXPIRE (a
        page asked for between the two calls is downloaded: once more at most)."""
        backend = self.handle.current
        backend.forget_many(fingerprints)
        backend.check_and_add_many(fingerprints, [self.expire_failed] * len(fingerprints))

    def _record(self, server: Any, new: dict[str, str]) -> None:
        """Record ``new`` in Redis while the record holds fewer than FAILED_LIMIT."""
        if int(server.hlen(self.failed_key)) < FAILED_LIMIT:
            server.hset(self.failed_key, mapping=new)

    def succeeded(self, request: Request) -> None:
        """``request`` was downloaded after all (a retry by other means): not failed."""
        fp = self.fingerprint_of(request)
        if self.failed.pop(fp, None) is not None and self.records:
            self._call(lambda server: server.hdel(self.failed_key, fp), "update failed pages")

    def _call(self, call: Any, doing: str) -> None:
        """A Redis call for the record of failed pages; a failure is said once, never
        raised (this process still forgets its own at its close)."""
        try:
            call(self.handle.current.server)
        except Exception as exc:  # (the pages stay in this process's list)
            if doing not in self._said:
                self._said.add(doing)
                logger.warning(
                    "Could not %s (%s): this process still forgets its own at its close; a "
                    "run killed before then leaves them recorded as seen",
                    doing,
                    failure_text(exc),
                )

    # -- at the spider's open and close ----------------------------------------------------

    def open(self, forget_failed: bool) -> int:
        """At the spider's open: forget the failed pages a run killed before its close
        (or another worker) left recorded. Never raises. Returns how many."""
        if not forget_failed or not self.handle.current.capabilities.forget:
            return 0
        try:
            pages = self.forget_failed()
        except Exception as exc:  # (the crawl goes on: said)
            logger.error(
                "Could not forget the failed pages recorded in Redis (%s): the next close "
                "tries again",
                failure_text(exc),
            )
            return 0
        if pages:
            logger.info(
                "Forgot %d page(s) recorded as failed for good by an earlier run that did not "
                "close, or by another worker: this run downloads them again",
                len(pages),
            )
        return len(pages)

    def close(self, forget_failed: bool) -> int:
        """At the spider's close: forget the pages that failed for good (if
        ``forget_failed`` and the backend can), and say so in one line. Never raises:
        a close must end. Returns how many were forgotten."""
        count = len(self.failed) + self.overflow
        if not count:
            return 0
        backend = self.handle.current
        if not forget_failed:
            logger.info(
                "%d page(s) failed for good in this run and stay recorded as seen "
                "(DEDUP_FORGET_FAILED is off): the next run does not download them",
                count,
            )
            return 0
        if not backend.capabilities.forget:
            logger.warning(
                "%d page(s) failed for good in this run and stay recorded as seen; they are "
                "listed by scrapy dedup-forget --spider %s --failed. %s",
                count,
                self.handle.spider_name or "NAME",
                cannot_forget(backend),
            )
            return 0
        urls = list(self.failed.values())
        try:
            pages = self.forget_failed()
        except Exception as exc:  # (a close must end: said, and the pages named)
            logger.error(
                "%d page(s) failed for good in this run, and forgetting them failed (%s): "
                "they stay recorded as seen, and the next run forgets them when it opens; "
                "e.g. %s",
                count,
                failure_text(exc),
                ", ".join(urls[:3]),
            )
            return 0
        past = (
            f" ({self.overflow} past the {FAILED_LIMIT:,} a run remembers stay recorded)"
            if self.overflow
            else ""
        )
        logger.info(
            "%d page(s) failed for good in this run; forgot them, so that the next run "
            "downloads them again (dedup/forgotten)%s",
            len(urls),
            past,
        )
        return len(pages)
