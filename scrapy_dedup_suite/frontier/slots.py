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

A slot's delay is raised by what a worker learned of it (:func:`learned_delays`):
robots.txt's ``Crawl-delay`` (Scrapy >= 2.18, with ``ROBOTSTXT_OBEY``) and, under
AutoThrottle, the delay AutoThrottle set for its slot. A worker that learned one tags
its requests for that slot with it ("delay:learned"); the slot keeps the last one said
(a worker that learned nothing leaves it), and its delay is the larger of the two: so
AutoThrottle's adjusted delay is shared by every worker.

The worker holds a request its lease call says is due later (at most one delay) and
sets its own downloader's delay for that slot to 0: the frontier keeps the delay, and a
second delay in each worker would only slow the crawl (AutoThrottle's is left to it:
it adjusts from it).
"""

from __future__ import annotations

from collections.abc import Callable
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
#: The most download slots whose header (and robots.txt's delay) a worker keeps built.
KEPT = 10_000
#: The longest delay a tag carries (s): a day (a robots.txt asking more is read as a day).
MOST_DELAY = 86400.0


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
        #: Per slot, its last header and the learned delay it was built with.
        self._headers: dict[str, tuple[float | None, bytes]] = {}
        #: The delay (s) this worker learned a request's slot needs, or None (set at the
        #: open: :func:`learned_delays`).
        self.learned: Callable[[Request, str], float | None] = lambda request, key: None

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

    def header(self, key: str, learned: float | None = None) -> bytes:
        """The tag's header of slot ``key``: "delay jitter concurrency name" (ms,
        thousandths, requests); "delay:learned" with a delay learned (s)."""
        cached = self._headers.get(key)
        if cached is not None and cached[0] == learned:
            return cached[1]
        delay, jitter, concurrency = self.limits(key)
        ms = f"{round(min(max(delay, 0.0), MOST_DELAY) * 1000)}"
        if learned is not None:
            ms += f":{round(min(max(learned, 0.0), MOST_DELAY) * 1000)}"
        name = key.encode("utf-8")[:NAME_BYTES]
        fields = f"{ms} {round(min(max(jitter, 0.0), 1.0) * 1000)} {max(1, concurrency)} "
        header = fields.encode() + name
        if len(self._headers) >= KEPT:  # (a crawl of many hosts: the recent ones kept)
            self._headers.clear()
        self._headers[key] = (learned, header)
        return header

    def tag(self, entry: bytes, request: Request) -> bytes:
        """``entry`` tagged with ``request``'s slot."""
        key = self.key(request)
        header = self.header(key, self.learned(request, key))
        return bytes((TAG, len(header))) + header + entry


def learned_delays(crawler: Crawler) -> Callable[[Request, str], float | None]:
    """What this worker learned a request's slot needs as its delay (s), or None:
    robots.txt's ``Crawl-delay`` for its user agent, where the worker's
    ``RobotsTxtMiddleware`` parsed that host's robots.txt (Scrapy >= 2.18 reads it;
    none in it is 0), and under AutoThrottle the delay AutoThrottle set for the slot
    here (the larger)."""
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware

    downloader = getattr(getattr(crawler, "engine", None), "downloader", None)
    middlewares = getattr(getattr(downloader, "middleware", None), "middlewares", ())
    robots = next((m for m in middlewares if isinstance(m, RobotsTxtMiddleware)), None)
    throttled = crawler.settings.getbool("AUTOTHROTTLE_ENABLED")
    #: Per host, the robots.txt parser read, the user agent asked for, and its delay.
    read: dict[str, tuple[Any, Any, float]] = {}

    def learned(request: Request, key: str) -> float | None:
        delay: float | None = None
        parsers = getattr(robots, "_parsers", None)
        if isinstance(parsers, dict):
            netloc = urlparse_cached(request).netloc
            parser = parsers.get(netloc)
            crawl_delay = getattr(parser, "crawl_delay", None)
            if callable(crawl_delay):
                agent = getattr(robots, "_robotstxt_useragent", None) or request.headers.get(
                    b"User-Agent", crawler.settings.get("USER_AGENT")
                )
                known = read.get(netloc)
                if known is not None and known[0] is parser and known[1] == agent:
                    delay = known[2]
                else:
                    try:
                        delay = float(crawl_delay(agent) or 0.0)
                    except (TypeError, ValueError):  # (a robots.txt's odd value: none)
                        delay = 0.0
                    if len(read) >= KEPT:
                        read.clear()
                    read[netloc] = (parser, agent, delay)
        slot = (getattr(downloader, "slots", None) or {}).get(key) if throttled else None
        if slot is not None:
            delay = max(delay or 0.0, float(getattr(slot, "delay", 0.0) or 0.0))
        return delay if delay is None or delay == delay else None  # (NaN: none)

    return learned


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
