"""Request deduplication for Scrapy and Scrapy-Redis that scales to billions of fingerprints.

Turn it on with the add-on, ``ADDONS = {"scrapy_dedup_suite.Addon": 300}`` (or set
``DUPEFILTER_CLASS = "scrapy_dedup_suite.dupefilter.RFPDupeFilter"`` yourself) and
choose the storage with ``DEDUP_BACKEND`` (the names are in
``scrapy_dedup_suite.backends.BACKENDS``; every setting is in ``settings/table.py``).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``scrapy_dedup_suite.Addon``, imported when asked (the package stays light)."""
    if name == "Addon":
        from .addon import Addon

        return Addon
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
