"""The frontier's settings, read and checked once (:class:`FrontierOptions`).

Beside the frontier rather than in :mod:`..settings.options`: they build the
request codec, which is the frontier's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings.table import read
from .codec import RequestCodec, request_classes, serializer


@dataclass(frozen=True)
class FrontierOptions:
    """The frontier scheduler's settings (scrapy-redis's where they are its)."""

    persist: bool
    flush_on_start: bool
    idle_before_close: float
    queue_key: str
    lease: float
    prefetch: int
    serializer: Any
    retry_times: int = 0
    read_pickle: bool = False
    request_classes: tuple[type, ...] = ()
    retry_delay: float = 60.0
    max_returns: int = 0
    #: How long a worker with nothing else to do waits for a page to try again.
    retry_wait: float = 0.0

    @classmethod
    def from_settings(cls, settings: Any) -> FrontierOptions:
        prefetch = read(settings, "FRONTIER_PREFETCH") or settings.getint("CONCURRENT_REQUESTS")
        return cls(
            persist=read(settings, "SCHEDULER_PERSIST"),
            flush_on_start=read(settings, "SCHEDULER_FLUSH_ON_START"),
            idle_before_close=read(settings, "SCHEDULER_IDLE_BEFORE_CLOSE"),
            queue_key=read(settings, "SCHEDULER_QUEUE_KEY"),
            lease=read(settings, "FRONTIER_LEASE"),
            prefetch=max(1, prefetch),
            serializer=serializer(read(settings, "SCHEDULER_SERIALIZER")),
            retry_times=read(settings, "FRONTIER_RETRY_TIMES"),
            retry_delay=read(settings, "FRONTIER_RETRY_DELAY"),
            max_returns=read(settings, "FRONTIER_MAX_RETURNS"),
            retry_wait=retry_wait(settings),
            read_pickle=read(settings, "FRONTIER_READ_PICKLE"),
            request_classes=request_classes(read(settings, "FRONTIER_REQUEST_CLASSES")),
        )

    def codec(self) -> RequestCodec:
        """The request encoding these settings choose (its spider set at the open)."""
        return RequestCodec(None, self.serializer, self.read_pickle, self.request_classes)


def retry_wait(settings: Any) -> float:
    """How long a worker with nothing else to do waits for a page to try again that
    comes due: FRONTIER_WAIT_FOR_RETRIES, or SCHEDULER_IDLE_BEFORE_CLOSE if longer."""
    return float(
        max(
            read(settings, "FRONTIER_WAIT_FOR_RETRIES"),
            read(settings, "SCHEDULER_IDLE_BEFORE_CLOSE"),
        )
    )
