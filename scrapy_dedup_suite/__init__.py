"""Request deduplication for Scrapy and Scrapy-Redis that scales to billions of fingerprints.

Set ``DUPEFILTER_CLASS = "scrapy_dedup_suite.dupefilter.RFPDupeFilter"`` and
choose the storage with ``DEDUP_BACKEND`` (the names are in
``scrapy_dedup_suite.backends.BACKENDS``; every setting is in ``settings_table.py``).
"""

from __future__ import annotations

__version__ = "0.1.0"
