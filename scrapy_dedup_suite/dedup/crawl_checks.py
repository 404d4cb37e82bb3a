"""Every setting a crawl gives the package, checked before Scrapy's engine starts.

The add-on, the batch middleware and the extensions call :func:`check_crawl_settings`
from where Scrapy builds them (before its engine), so that a bad value ends ``scrapy
crawl`` with its own one-line error rather than from inside the engine's start, where
Scrapy follows it with its shutdown tracebacks. What is checked: each setting of the
table the project gave, the backend's name and parameters (no Redis), the dupefilter's
and, when the scheduler is the frontier, the frontier's settings and the dupefilter
class it needs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from ..backends import check_settings as check_backend_settings
from ..backends.keys import spider_key
from ..core import error_lines
from ..core.paths import dotted_path
from ..exceptions import DedupConfigError
from ..settings.table import check_given, read
from .dupefilter import RFPDupeFilter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: The dupefilters this package's stands in for (the same fingerprints, and with the
#: default backend the same set): Scrapy's default and scrapy-redis's.
REPLACED_DUPEFILTERS = ("scrapy.dupefilters.RFPDupeFilter", "scrapy_redis.dupefilter.RFPDupeFilter")
DUPEFILTER = RFPDupeFilter.public_path


def check_crawl_settings(settings: BaseSettings, spider: Any = None) -> None:
    """Raise the DedupConfigError a setting would raise later (see the module), with
    the keys named for ``spider``'s name when given (a spider class); from here on,
    such an error is shown as its one line (:mod:`..core.error_lines`)."""
    error_lines.install()
    check_given(settings)
    name = getattr(spider, "name", None)
    check_backend_settings(settings, name if isinstance(name, str) else None)
    frontier = frontier_class(settings.get("SCHEDULER"))
    if frontier is not None:  # its own settings, checked by itself
        frontier.check_settings(settings)
        if isinstance(name, str):
            spider_key(read(settings, "SCHEDULER_QUEUE_KEY"), name, "SCHEDULER_QUEUE_KEY")


def frontier_class(scheduler: Any) -> Any:
    """The class SCHEDULER names if it is the frontier (or a subclass: it records and
    enqueues, and checks its own settings with ``check_settings``), else None."""
    try:
        cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    except (ImportError, NameError, ValueError, AttributeError):
        return None  # (Scrapy says what it cannot load)
    return cls if getattr(cls, "records_and_enqueues", False) is True else None


def is_frontier(scheduler: Any) -> bool:
    """Whether SCHEDULER names the frontier (or a subclass)."""
    return frontier_class(scheduler) is not None


def frontier_dupefilter(given: Any) -> type[RFPDupeFilter]:
    """The dupefilter class the frontier builds for DUPEFILTER_CLASS ``given``: this
    package's (or a subclass), also in place of Scrapy's and scrapy-redis's; any other
    is refused in one line."""
    if not given:
        return RFPDupeFilter
    try:
        cls = load_object(given) if isinstance(given, str) else given
    except (ImportError, NameError, ValueError, AttributeError) as exc:
        raise DedupConfigError(
            f"DUPEFILTER_CLASS {given!r} cannot be loaded ({exc}); set "
            f'DUPEFILTER_CLASS = "{DUPEFILTER}"'
        ) from None
    if isinstance(cls, type) and issubclass(cls, RFPDupeFilter):
        return cls
    if dotted_path(cls) in REPLACED_DUPEFILTERS:
        return RFPDupeFilter
    raise DedupConfigError(
        f"The frontier scheduler records and enqueues each request in one Redis call, "
        f"through this package's dupefilter; DUPEFILTER_CLASS is {dotted_path(given)!r}: set "
        f'DUPEFILTER_CLASS = "{DUPEFILTER}" (DEDUP_BACKEND chooses its storage)'
    )


def dupefilter_for(crawler: Crawler) -> RFPDupeFilter:
    """This package's dupefilter, as DUPEFILTER_CLASS names it (Scrapy's and
    scrapy-redis's are replaced by it: its default backend is scrapy-redis's set)."""
    given = crawler.settings.get("DUPEFILTER_CLASS")
    cls = frontier_dupefilter(given)
    if given and dotted_path(given) in REPLACED_DUPEFILTERS:
        logger.info(
            "Frontier: DUPEFILTER_CLASS %r replaced by scrapy_dedup_suite's RFPDupeFilter, "
            "which records and enqueues in one call (DEDUP_BACKEND chooses its storage)",
            dotted_path(given),
        )
    return cls.from_crawler(crawler)
