"""The public path of :class:`BatchDedupMiddleware` (the batch middleware): settings and
imports name ``scrapy_dedup_suite.middleware.BatchDedupMiddleware``; the code lives in
:mod:`scrapy_dedup_suite.dedup.middleware`."""

from __future__ import annotations

from .dedup.middleware import BatchDedupMiddleware

__all__ = ["BatchDedupMiddleware"]
