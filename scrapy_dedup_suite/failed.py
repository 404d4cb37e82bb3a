"""The public path of :class:`FailedPagesMiddleware` (the failed pages' middleware):
settings and imports name ``scrapy_dedup_suite.failed.FailedPagesMiddleware``; the code
lives in :mod:`scrapy_dedup_suite.dedup.failed`."""

from __future__ import annotations

from .dedup.failed import FailedPagesMiddleware

__all__ = ["FailedPagesMiddleware"]
