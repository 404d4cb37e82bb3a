"""The source of a migration: the scrapy-redis fingerprint set, read with SSCAN."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from ...backends.keys import as_str, chunks
from .errors import SourceError


class SetSource:
    """The set at ``key``, read ``batch`` members per SSCAN call."""

    def __init__(self, server: Any, key: str, batch: int) -> None:
        self.server = server
        self.key = key
        self.batch = batch

    def check(self) -> int:
        """The number of members; refused unless the key holds a set."""
        kind = as_str(self.server.type(self.key))
        if kind == "none":
            raise SourceError(
                f"Source {self.key!r} does not exist. Give the set scrapy-redis wrote "
                "(--source KEY, or --spider NAME for %(spider)s:dupefilter)."
            )
        if kind != "set":
            raise SourceError(
                f"Source {self.key!r} holds a {kind}, not a set of fingerprints; nothing was "
                "written. Name the scrapy-redis fingerprint set with --source."
            )
        return self.size()

    def size(self) -> int:
        return int(self.server.scard(self.key))

    def memory(self) -> int:
        return int(self.server.memory_usage(self.key) or 0)

    def sample(self, n: int) -> list[str]:
        """Up to ``n`` distinct members, at random."""
        return [as_str(m) for m in self.server.srandmember(self.key, n)]

    def remove(self, members: Sequence[str]) -> int:
        """SREM ``members``, ``batch`` per call; the number removed."""
        return sum(int(self.server.srem(self.key, *part)) for part in chunks(members, self.batch))

    def scan(self, cursor: int, limit: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
        """SSCAN batches from ``cursor`` until the end or ``limit`` members, read
        ahead by a thread (the socket waits release the GIL) while we compute."""
        batches: queue.Queue[Any] = queue.Queue(maxsize=8)
        stop = threading.Event()

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    batches.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def reader() -> None:
            c, read = cursor, 0
            try:
                while True:
                    c, members = self.server.sscan(self.key, c, count=self.batch)
                    c = int(c)
                    read += len(members)
                    if not put((c, members)) or c == 0 or (limit and read >= limit):
                        break
            except Exception as exc:  # handed to the consumer
                put(exc)
            put(None)

        thread = threading.Thread(target=reader, name="migrate-sscan", daemon=True)
        thread.start()
        try:
            while True:
                item = batches.get()
                if item is None:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()
