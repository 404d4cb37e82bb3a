"""Scrapy's private engine state, read in one place.

Scrapy publishes no way to learn when its engine is done with a request, to ask it for
requests now, or to see the spider middlewares' order; the frontier and the batch path
need all three. This module is the only one that reads the engine's private parts:

- the engine's slot (``engine._slot``; ``engine.slot`` in older versions): its
  ``scheduler``, ``closing`` (a Deferred once the spider is closing), ``inprogress``
  (the requests being downloaded or parsed) and ``nextcall`` (the engine's next turn);
- ``engine.scraper.spidermw.middlewares``, in the order output runs back through them.

Checked against Scrapy 2.13 (the lowest setup.cfg declares, .ci/constraints-lowest.txt)
through 2.19 (the newest, tested by CI's newest stage). A version without them makes
:func:`watch_engine` refuse in one line (the frontier cannot run without it); the
other readers answer None or "closing", and their callers go on without.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..exceptions import DedupConfigError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def engine_slot(crawler: Crawler) -> Any:
    """The engine's slot (its scheduler, and whether it is closing), or None."""
    engine = crawler.engine
    return getattr(engine, "_slot", None) or getattr(engine, "slot", None)


def engine_scheduler(crawler: Crawler) -> Any:
    """The scheduler the engine opened the spider with, or None before it did."""
    return getattr(engine_slot(crawler), "scheduler", None)


def engine_closing(crawler: Crawler) -> bool:
    """Whether the crawl is closing or stopping (read from batch threads too)."""
    engine = crawler.engine
    if engine is None or not engine.running:
        return True
    slot = engine_slot(crawler)
    return slot is None or getattr(slot, "closing", None) is not None


def ask_for_requests(slot: Any) -> None:
    """Have the engine of ``slot`` (:func:`engine_slot`) ask for requests at its next
    turn of the reactor, not at its heartbeat."""
    slot.nextcall.schedule()


def spider_middlewares(crawler: Crawler) -> list[Any]:
    """The spider middlewares, in the engine's order (output runs from the last)."""
    assert crawler.engine is not None
    return list(crawler.engine.scraper.spidermw.middlewares)


def watch_engine(crawler: Crawler, done: Callable[[Any], None]) -> None:
    """``done(request)`` when the engine is done with a request: when it leaves the
    engine's set of requests in progress, after its response was parsed and what the
    callback yielded was scheduled (or its failure handled)."""
    slot = engine_slot(crawler)
    inprogress = getattr(slot, "inprogress", None)
    if not isinstance(inprogress, set):
        raise DedupConfigError(
            "The frontier scheduler cannot see when this Scrapy's engine is done with a "
            "request (no engine slot with a set of requests in progress); use Scrapy "
            ">= 2.13 or another SCHEDULER"
        )

    class InProgress(set):  # type: ignore[type-arg]
        def remove(self, request: Any) -> None:
            super().remove(request)
            done(request)

    slot.inprogress = InProgress(inprogress)
