"""Request deduplication for Scrapy and Scrapy-Redis that scales to billions of fingerprints.

Set ``DUPEFILTER_CLASS = "scrapy_dedup_suite.dupefilter.RFPDupeFilter"`` and
choose the storage with ``DEDUP_BACKEND``: ``"set"``, ``"hash"``, ``"bloom"``
or ``"windowed-bloom"``.
"""

from __future__ import annotations

__version__ = "0.1.0"
