"""What the dupefilter counts in the crawl's stats (:class:`DedupCounts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..server.failures import error_kind

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

#: The stats a filtered request counts in: Scrapy's own, ours, and (for Bloom
#: backends) the name the source documents' Bloom dupefilter used.
FILTERED = ("dupefilter/filtered", "dedup/filtered")
FILTERED_BLOOM = (*FILTERED, "bloomfilter/filtered")


class DedupCounts:
    """The dupefilter's stats (``dedup/*``, and the filtered requests under every name
    a user may look for); nothing is counted without a stats collector."""

    def __init__(self, stats: StatsCollector | None, probabilistic: bool = False) -> None:
        self.stats = stats
        self._filtered = FILTERED_BLOOM if probabilistic else FILTERED

    def counted(self, seen: bool) -> bool:
        """Count one request's answer (filtered or added); returns it."""
        if seen:
            self.filtered()
        elif self.stats is not None:
            self.stats.inc_value("dedup/added")
        return seen

    def tally(self, seen: int, added: int) -> None:
        """Count a batch's answers at once: ``seen`` filtered, ``added`` new."""
        self.filtered(seen)
        if added and self.stats is not None:
            self.stats.inc_value("dedup/added", added)

    def count(self, name: str, value: int = 1) -> None:
        """Add ``value`` to the stat ``name``."""
        if self.stats is not None:
            self.stats.inc_value(name, value)

    def errors(self, count: int, cause: BaseException | None) -> None:
        """``count`` requests a failed call let through (or failed): ``dedup/errors``,
        and ``dedup/errors/<kind>`` by the call's failure (:func:`error_kind`)."""
        if count and self.stats is not None:
            self.stats.inc_value("dedup/errors", count)
            self.stats.inc_value(f"dedup/errors/{error_kind(cause)}", count)

    def set(self, name: str, value: object) -> None:
        if self.stats is not None:
            self.stats.set_value(name, value)

    def filtered(self, count: int = 1, cached: int = 0) -> None:
        """``count`` duplicates answered by Redis and ``cached`` by the local cache."""
        stats = self.stats
        if stats is None or not count + cached:
            return
        for name in self._filtered:
            stats.inc_value(name, count + cached)
        if cached:
            stats.inc_value("dedup/cache_hits", cached)
