"""The public path of :class:`JanitorExtension` (the janitor's extension): settings and
imports name ``scrapy_dedup_suite.janitor.JanitorExtension``; the code lives in
:mod:`scrapy_dedup_suite.operations.janitor`."""

from __future__ import annotations

from .operations.janitor import Janitor, JanitorExtension
from .operations.janitor_report import JanitorReport

__all__ = ["Janitor", "JanitorExtension", "JanitorReport"]
