"""``DedupSummary``: one short table about the dupefilter when a spider closes.

Enable with ``EXTENSIONS = {"scrapy_dedup_suite.summary.DedupSummary": 900}``.
It logs the backend, requests checked, requests filtered, the Redis memory of
the dedup keys and, for Bloom backends, fill ratio and estimated false-positive
rate, and adds them to the stats (``dedup/redis_memory_bytes``, ...).
``DEDUP_SUMMARY_JSON = "path"`` also writes them to a file.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy import signals

from ..backends import build_backend
from ..backends.reports import FilterFill, FilterInfo
from ..core.config import human_bytes
from ..dedup.crawl_checks import check_crawl_settings
from ..server.connection import failure_text

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

#: Named by its public path (:mod:`scrapy_dedup_suite.summary`), as its log lines always were.
logger = logging.getLogger("scrapy_dedup_suite.summary")


def summarize(info: FilterInfo, fills: list[FilterFill], stats: dict[str, Any]) -> dict[str, Any]:
    """The summary row: requests checked, Redis memory and, for Bloom filters
    (``fills``), the fullest filter's fill and false-positive rate."""
    added = int(stats.get("dedup/added", 0))
    filtered = int(stats.get("dedup/filtered", 0))
    row: dict[str, Any] = {
        "backend": info.backend,
        "key": info.key,
        "requests_checked": added + filtered,
        "new": added,
        "filtered": filtered,
        "redis_memory_bytes": info.memory_bytes,
    }
    if fills:
        row["fill_ratio"] = max(f.fill_ratio for f in fills)
        row["estimated_error_rate"] = max(f.estimated_error_rate for f in fills)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Summaries as a text table; rows with a ``run`` label get it in a first column."""
    head = ["backend", "checked", "new", "filtered", "Redis memory", "fill", "est. FP rate"]
    labelled = any("run" in r for r in rows)
    if labelled:
        head.insert(0, "run")
    lines = []
    for r in rows:
        lines.append(
            [
                *([r.get("run", "")] if labelled else []),
                r["backend"],
                f"{r['requests_checked']:,}",
                f"{r['new']:,}",
                f"{r['filtered']:,}",
                human_bytes(r["redis_memory_bytes"]),
                f"{r['fill_ratio']:.2%}" if "fill_ratio" in r else "-",
                f"{r['estimated_error_rate']:.2g}" if "estimated_error_rate" in r else "-",
            ]
        )
    widths = [max(len(str(c)) for c in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    return "\n".join(out)


class DedupSummary:
    #: Where projects name it (its code lives in this module).
    public_path: ClassVar[str] = "scrapy_dedup_suite.summary.DedupSummary"

    def __init__(self, crawler: Crawler, path: str | None) -> None:
        self.crawler = crawler
        self.path = path

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupSummary:
        check_crawl_settings(crawler.settings, crawler.spidercls)  # before the engine starts
        ext = cls(crawler, crawler.settings.get("DEDUP_SUMMARY_JSON"))
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_closed(self, spider: Spider, reason: str) -> None:
        try:
            row = self._row(spider)
        except Exception as exc:  # (Redis gone at the close: one line, not a traceback)
            logger.warning(
                "Dedup summary skipped: the dupefilter's Redis could not be read at the close "
                "(%s: %s); the stats lack dedup/redis_memory_bytes",
                type(exc).__name__,
                failure_text(exc),
            )
            return
        stats = self.crawler.stats
        stats.set_value("dedup/redis_memory_bytes", row["redis_memory_bytes"])
        for name in ("fill_ratio", "estimated_error_rate"):
            if name in row:
                stats.set_value(f"dedup/{name}", row[name])
        logger.info("Dedup summary:\n%s", table([row]))
        if self.path:
            with open(self.path, "w") as f:
                json.dump(row, f, indent=1)

    def _row(self, spider: Spider) -> dict[str, Any]:
        backend = build_backend(self.crawler.settings, spider.name)
        try:
            info = backend.info()
            fills = backend.filter_reports(info) if backend.capabilities.report_fill else []
            return summarize(info, fills, self.crawler.stats.get_stats())
        finally:
            backend.server.close()
