"""Politeness across workers: the frontier queues requests per download slot and hands
a slot's request out only when the slot is ready for every worker together
(``lua/frontier_slots.lua``), so that N workers keep ``DOWNLOAD_DELAY`` and
``CONCURRENT_REQUESTS_PER_DOMAIN`` per host as one Scrapy process does.

:class:`SlotPolicy` reads the slot settings as Scrapy's downloader does: a request's
slot is ``meta["download_slot"]`` or its URL's host; its delay, jitter and concurrency
are ``DOWNLOAD_SLOTS``'s for that slot, else ``DOWNLOAD_DELAY``, Scrapy's jitter
(``DOWNLOAD_DELAY_JITTER``, or ±50% under ``RANDOMIZE_DOWNLOAD_DELAY`` where Scrapy has
no jitter setting) and ``CONCURRENT_REQUESTS_PER_IP`` (if set) or ``_PER_DOMAIN``. Each
entry the worker sends is tagged with its slot's header; the queue keeps the entry
alone, under its slot.

The worker holds a request its lease call says is due later (at most one delay) and
sets its own downloader's delay for that slot to 0: the frontier keeps the delay, and a
second delay in each worker would only slow the crawl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached

from ..settings.table import read

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

#: The byte that starts an entry tagged with its slot (after the count of returns, if any).
TAG = 5
#: The longest slot name kept in a tag: the header's length is one byte.
NAME_BYTES = 200


def jitter_of(settings: BaseSettings) -> float:
    """Scrapy's jitter for slots that set none: ``DOWNLOAD_DELAY_JITTER`` (Scrapy >=
    2.19) unless ``RANDOMIZE_DOWNLOAD_DELAY`` was set, which is ±50% or none."""
    randomize = settings.getpriority("RANDOMIZE_DOWNLOAD_DELAY") or 0
    if "DOWNLOAD_DELAY_JITTER" in settings and randomize <= (
        settings.getpriority("DOWNLOAD_DELAY_JITTER") or 0
    ):
        return settings.getfloat("DOWNLOAD_DELAY_JITTER")
    return 0.5 if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True) else 0.0


class SlotPolicy:
    """Per request, its download slot and that slot's limits, as the tag the frontier
    reads (see the module's docstring)."""

    def __init__(self, settings: BaseSettings) -> None:
        self.delay = settings.getfloat("DOWNLOAD_DELAY")
        self.jitter = jitter_of(settings)
        self.concurrency = settings.getint("CONCURRENT_REQUESTS_PER_IP", 0) or settings.getint(
            "CONCURRENT_REQUESTS_PER_DOMAIN"
        )
        self.per_slot: dict[str, dict[str, Any]] = settings.getdict("DOWNLOAD_SLOTS")
        self._headers: dict[str, bytes] = {}

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SlotPolicy | None:
        """The policy, or None with FRONTIER_POLITENESS off (each worker's downloader
        keeps its own delays, as without the frontier)."""
        return cls(settings) if read(settings, "FRONTIER_POLITENESS") else None

    @staticmethod
    def key(request: Request) -> str:
        """Scrapy's download slot of ``request`` (``Downloader.get_slot_key``, less the
        DNS look-up of ``CONCURRENT_REQUESTS_PER_IP``: the host names the slot)."""
        slot = request.meta.get("download_slot")
        if slot is not None:
            return str(slot)
        return urlparse_cached(request).hostname or ""

    def limits(self, key: str) -> tuple[float, float, int]:
        """The delay (s), jitter and concurrency of slot ``key``."""
        own = self.per_slot.get(key, {})
        jitter = self.jitter
        if "jitter" in own:
            jitter = float(own["jitter"])
        elif "randomize_delay" in own:
            jitter = 0.5 if own["randomize_delay"] else 0.0
        return (
            float(own.get("delay", self.delay)),
            jitter,
            int(own.get("concurrency", self.concurrency)),
        )

    def header(self, key: str) -> bytes:
        """The tag's header of slot ``key``: "delay jitter concurrency name" (ms,
        thousandths, requests)."""
        header = self._headers.get(key)
        if header is None:
            delay, jitter, concurrency = self.limits(key)
            name = key.encode("utf-8")[:NAME_BYTES]
            fields = f"{round(max(delay, 0.0) * 1000)} {round(min(max(jitter, 0.0), 1.0) * 1000)} "
            header = f"{fields}{max(1, concurrency)} ".encode() + name
            self._headers[key] = header
        return header

    def tag(self, entry: bytes, request: Request) -> bytes:
        """``entry`` tagged with ``request``'s slot."""
        header = self.header(self.key(request))
        return bytes((TAG, len(header))) + header + entry


def local_delay_off(crawler: Crawler, request: Request) -> None:
    """The frontier keeps ``request``'s slot's delay: its downloader slot here, if it
    has one yet, has none of its own (AutoThrottle's, if on, is left to it)."""
    engine = getattr(crawler, "engine", None)
    downloader = getattr(engine, "downloader", None)
    slots = getattr(downloader, "slots", None)
    if not slots or crawler.settings.getbool("AUTOTHROTTLE_ENABLED"):
        return
    slot = slots.get(request.meta.get("download_slot") or SlotPolicy.key(request))
    if slot is not None and slot.delay:
        slot.delay = 0.0
