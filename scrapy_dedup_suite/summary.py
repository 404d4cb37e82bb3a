"""The public path of :class:`DedupSummary` (the closing summary): settings and imports
name ``scrapy_dedup_suite.summary.DedupSummary``; the code lives in
:mod:`scrapy_dedup_suite.operations.summary`."""

from __future__ import annotations

from .operations.summary import DedupSummary

__all__ = ["DedupSummary"]
