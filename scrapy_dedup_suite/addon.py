"""The Scrapy add-on: one line turns the package on.

    ADDONS = {"scrapy_dedup_suite.Addon": 300}

At add-on priority (below a project's own settings, which still win) it sets
``DUPEFILTER_CLASS`` to this package's dupefilter, inserts ``BatchDedupMiddleware``
into ``SPIDER_MIDDLEWARES`` (a page's links in one round trip) and
``FailedPagesMiddleware`` into ``DOWNLOADER_MIDDLEWARES`` (a page whose download failed
for good is forgotten at the close, DEDUP_FORGET_FAILED), and enables the
summary extension, and the janitor extension where the backend ``DEDUP_BACKEND`` names
has expiries to purge or restore; with ``DEDUP_FRONTIER``, the frontier scheduler in
place of scrapy-redis's. What the project set itself is kept, and the log says what the
add-on set and what it left.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.utils.misc import load_object

from .backends import get_backend_class
from .core.paths import dotted_path
from .dedup import failed
from .dedup.crawl_checks import (
    DUPEFILTER,
    REPLACED_DUPEFILTERS,
    check_crawl_settings,
)
from .dedup.dupefilter import RFPDupeFilter
from .dedup.failed import FailedPagesMiddleware
from .dedup.middleware import BatchDedupMiddleware
from .frontier.scheduler import Scheduler
from .operations.janitor import JanitorExtension
from .operations.metrics import DedupMetrics, metrics_asked
from .operations.summary import DedupSummary
from .settings.table import given_settings, read

logger = logging.getLogger(__name__)

#: The batch middleware's order: the last spider middleware to see a callback's output
#: among Scrapy's own, which pass requests on as they are (docs/batch.md).
MIDDLEWARE_ORDER = 50
SUMMARY_ORDER, JANITOR_ORDER = 900, 500
#: After the summary: its close-time stats are in the last push.
METRICS_ORDER = 950


class Addon:
    """``ADDONS = {"scrapy_dedup_suite.Addon": 300}``: see the module's docstring."""

    def update_settings(self, settings: BaseSettings) -> None:
        # Every setting of the package the project gave, and the backend's name, checked
        # whatever follows: a misspelt value stops the crawl now, in one line.
        check_crawl_settings(settings)
        said: list[str] = []
        kept: list[str] = []
        current = settings.get("DUPEFILTER_CLASS")
        path = dotted_path(current)
        if _is_subclass(current, RFPDupeFilter):
            kept.append(f"DUPEFILTER_CLASS = {path!r}")
        elif path in REPLACED_DUPEFILTERS:
            # Scrapy's default, or scrapy-redis's as its README has projects set it: the
            # ones this package's dupefilter stands in for (same fingerprints, same set).
            priority = max(
                settings.getpriority("DUPEFILTER_CLASS") or 0, SETTINGS_PRIORITIES["addon"]
            )
            settings.set("DUPEFILTER_CLASS", DUPEFILTER, priority=priority)
            said.append(f"DUPEFILTER_CLASS = {DUPEFILTER!r}" + _in_place_of(path, settings))
        else:
            ignored = given_settings(settings)
            logger.warning(
                "scrapy_dedup_suite add-on: DUPEFILTER_CLASS = %r is the project's own, so it "
                "is kept, this package deduplicates nothing and the add-on sets nothing else%s; "
                "remove DUPEFILTER_CLASS from the settings (or set it to %r) to use it",
                path,
                f" (ignored: {', '.join(ignored)})" if ignored else "",
                DUPEFILTER,
            )
            return
        capabilities = get_backend_class(read(settings, "DEDUP_BACKEND")).capabilities
        components: list[tuple[str, type, int]] = [
            ("SPIDER_MIDDLEWARES", BatchDedupMiddleware, MIDDLEWARE_ORDER),
            ("DOWNLOADER_MIDDLEWARES", FailedPagesMiddleware, failed.ORDER),
            ("EXTENSIONS", DedupSummary, SUMMARY_ORDER),
        ]
        if capabilities.purge_expired or capabilities.restore_expiry:
            components.append(("EXTENSIONS", JanitorExtension, JANITOR_ORDER))
        if metrics_asked(settings):
            components.append(("EXTENSIONS", DedupMetrics, METRICS_ORDER))
        _frontier(settings, said, kept)
        for name, cls, order in components:
            given = _order_in(settings, name, cls)
            if given is _ABSENT:
                settings.setdefault_in_component_priority_dict(name, cls, order)
                said.append(f"{name}[{cls.__name__}] = {order}")
            else:
                kept.append(f"{name}[{cls.__name__}] = {given}")
        logger.info(
            "scrapy_dedup_suite add-on set %s%s",
            ", ".join(said) or "nothing",
            f"; kept the project's {', '.join(kept)}" if kept else "",
        )


def _in_place_of(path: str, settings: BaseSettings) -> str:
    """ " in place of ..." when the project named the class it replaces (not Scrapy's
    default)."""
    if (settings.getpriority("DUPEFILTER_CLASS") or 0) > SETTINGS_PRIORITIES["addon"]:
        return f" in place of the project's {path!r}"
    return ""


FRONTIER = "scrapy_dedup_suite.frontier.scheduler.Scheduler"
#: The schedulers DEDUP_FRONTIER replaces: scrapy-redis's, and Scrapy's own default.
REPLACED_SCHEDULERS = ("scrapy_redis.scheduler.Scheduler", "scrapy.core.scheduler.Scheduler")


def _frontier(settings: BaseSettings, said: list[str], kept: list[str]) -> None:
    """DEDUP_FRONTIER: the frontier scheduler in place of scrapy-redis's (or Scrapy's
    default), at the priority the project gave SCHEDULER: it asked for the swap."""
    if not read(settings, "DEDUP_FRONTIER"):
        return
    current = settings.get("SCHEDULER")
    path = dotted_path(current)
    if path == FRONTIER:
        kept.append(f"SCHEDULER = {FRONTIER!r}")
    elif path in REPLACED_SCHEDULERS:
        priority = max(settings.getpriority("SCHEDULER") or 0, SETTINGS_PRIORITIES["addon"])
        settings.set("SCHEDULER", FRONTIER, priority=priority)
        Scheduler.check_settings(settings)
        said.append(f"SCHEDULER = {FRONTIER!r} in place of {path!r} (DEDUP_FRONTIER)")
    else:
        logger.warning(
            "scrapy_dedup_suite add-on: DEDUP_FRONTIER is on but SCHEDULER = %r is not "
            "scrapy-redis's or Scrapy's; it is kept. Set SCHEDULER = %r yourself to use "
            "the frontier",
            current,
            FRONTIER,
        )
        kept.append(f"SCHEDULER = {current!r}")


_ABSENT: Any = object()


def _order_in(settings: BaseSettings, name: str, cls: type) -> Any:
    """The order ``cls`` has in the component dict ``name`` (None: disabled), or _ABSENT."""
    for path_or_cls, order in settings.getdict(name).items():
        if _is_subclass(path_or_cls, cls):
            return order
    return _ABSENT


def _is_subclass(path_or_cls: Any, cls: type) -> bool:
    try:
        found = load_object(path_or_cls) if isinstance(path_or_cls, str) else path_or_cls
    except (ImportError, NameError, ValueError, AttributeError):
        return False
    return isinstance(found, type) and issubclass(found, cls)
