"""This package's refusals shown as the one line they are, not as a traceback.

A bad setting or an unreachable server stops ``scrapy crawl`` from inside Scrapy's
start: asyncio then logs "Task exception was never retrieved" (AsyncCrawlerProcess),
Twisted "Unhandled error in Deferred" (CrawlerProcess), and Scrapy's engine its own
shutdown errors after it, each with a traceback of Scrapy's internals around the one
line that says what to fix. :func:`install` adds a filter to those loggers that turns
a record carrying a :class:`~..exceptions.DedupError` (raised, or the cause of what was
raised) into that error's message alone, logged once, under this package's name. Any
other record passes untouched.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from ..exceptions import DedupError

#: The loggers Scrapy's start and shutdown report a crawl's failure through.
LOGGERS = ("asyncio", "twisted", "scrapy.core.engine", "scrapy.crawler", "scrapy.utils.signal")
#: How the package's exceptions begin in a traceback's last line (Twisted's text).
PREFIX = "scrapy_dedup_suite.exceptions."
NAME = "scrapy_dedup_suite"


def ours(exc: BaseException | None) -> DedupError | None:
    """The DedupError ``exc`` is, or was raised from or while handling (10 links)."""
    for _ in range(10):
        if exc is None:
            return None
        if isinstance(exc, DedupError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class OneLine(logging.Filter):
    """See the module. Each error is shown once: the records after it that carry the
    same error (Scrapy's shutdown failing because the start failed) are dropped."""

    def __init__(self) -> None:
        super().__init__()
        #: The last errors shown, by identity and message.
        self._shown: deque[tuple[int, str]] = deque(maxlen=16)

    def filter(self, record: logging.LogRecord) -> bool:
        found = self._found(record)
        if found is None:
            return not (self._shown and _aftermath(record))
        error, message = found
        if (id(error), message) in self._shown:
            return False
        self._shown.append((id(error), message))
        record.name = NAME
        record.msg, record.args = message, ()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        record.levelno, record.levelname = logging.ERROR, "ERROR"
        return True

    @staticmethod
    def _found(record: logging.LogRecord) -> tuple[object, str] | None:
        """The error a record carries, and its message."""
        raised: Any = record.exc_info[1] if record.exc_info else None
        if raised is None:
            raised = getattr(record, "exception", None)  # (asyncio's context, if given)
        if isinstance(raised, BaseException):
            found = ours(raised)
            return (found, str(found)) if found is not None else None
        if record.name == "twisted":  # a Failure's text: its last line names the error
            lines = str(record.msg).rstrip().splitlines()
            if lines and lines[-1].startswith(PREFIX):
                return None, lines[-1].split(": ", 1)[-1]
        return None


def _aftermath(record: logging.LogRecord) -> bool:
    """Whether ``record`` is Scrapy's stats extension failing at the close of a crawl
    whose start this package refused (its CoreStats asserts a start time that the
    failed open never set): shown after the refusal's line, it says nothing more."""
    if record.name != "scrapy.utils.signal" or not record.exc_info:
        return False
    raised, trace = record.exc_info[1], record.exc_info[2]
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    where = trace.tb_frame.f_code.co_filename if trace is not None else ""
    return isinstance(raised, AssertionError) and where.endswith("corestats.py")


_FILTER = OneLine()


def install() -> None:
    """Add the filter to Scrapy's, asyncio's and Twisted's loggers (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
