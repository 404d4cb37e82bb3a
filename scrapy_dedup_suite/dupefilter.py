"""The public path of :class:`RFPDupeFilter` (the dupefilter): settings and imports name
``scrapy_dedup_suite.dupefilter.RFPDupeFilter``; the code lives in
:mod:`scrapy_dedup_suite.dedup.dupefilter`."""

from __future__ import annotations

from .dedup.dupefilter import RFPDupeFilter

__all__ = ["RFPDupeFilter"]
