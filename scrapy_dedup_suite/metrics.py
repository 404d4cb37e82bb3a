"""The public path of :class:`DedupMetrics` (Prometheus metrics): settings and imports
name ``scrapy_dedup_suite.metrics.DedupMetrics``; the code lives in
:mod:`scrapy_dedup_suite.operations.metrics`."""

from __future__ import annotations

from .operations.metrics import DedupMetrics

__all__ = ["DedupMetrics"]
