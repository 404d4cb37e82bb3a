"""One step of the janitor's purge of expired hash fields, in each layout of the
``hash`` backend. The janitor (janitor.py) walks a backend's purge units in order, a
step at a time, saving (unit, cursor) after each step, so a pass killed at any point is
finished by the next one; what one step reads and deletes is the layout's:

- shards (:func:`scan_fields`): ``HSCAN`` a batch of fields, then a compare-and-delete
  script on the expired ones (a field a crawler refreshed in between is kept);
- buckets (:func:`purge_buckets`): one script reads consecutive buckets of one slot
  whole (a listpack is read whole anyway) and deletes their expired fields, until it
  has read a batch of fields; in the growing layout, the same script counts them off
  its group's level record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..server import scripts
from ..server.connection import server_time_ms
from .keys import as_str

#: Called with (hash key, expired fields found) after each scan, before they are purged.
OnScan = Callable[[str, list[str]], None]


@dataclass
class PurgeStep:
    """What one step did."""

    #: Where the unit's walk goes on next; 0 when the unit is done.
    cursor: int
    scanned: int = 0
    removed: int = 0
    #: Fields whose value is no expiry: left untouched.
    invalid: int = 0
    #: How long each Redis call of the step took (ms).
    call_ms: list[float] = field(default_factory=list)

    def timed(self, call: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return call()
        finally:
            self.call_ms.append((time.perf_counter() - t0) * 1000)


def scan_fields(
    server: Any, key: str, cursor: int, batch: int, on_scan: OnScan | None = None
) -> PurgeStep:
    """One HSCAN of ``key`` (fingerprint -> expiry in Unix ms) from ``cursor``, then the
    expired fields deleted ``batch`` at a time, each compared again on the server."""
    step = PurgeStep(0)
    cursor, fields = step.timed(lambda: server.hscan(key, cursor, count=batch))
    now = server_time_ms(server)
    candidates = []
    for name, value in fields.items():
        try:
            expiry = int(value)
        except ValueError:
            step.invalid += 1
            continue
        if expiry <= now:
            candidates.append(as_str(name))
    step.scanned = len(fields)
    if on_scan is not None:
        on_scan(key, candidates)
    for part in _parts(candidates, batch):
        step.removed += int(step.timed(partial(scripts.HASH_PURGE, server, [key], part)))
    step.cursor = int(cursor)
    return step


def purge_buckets(
    server: Any,
    keys: Sequence[str],
    batch: int,
    unit_ms: int,
    on_scan: OnScan | None = None,
    record: str | None = None,
) -> tuple[int, PurgeStep]:
    """The expired fields of ``keys`` (buckets of one slot, in order) deleted by one
    script call that stops after the bucket where it has read ``batch`` fields: how many
    buckets it finished, and the step (its cursor is left to the caller). ``record``:
    the level record of a growing filter's group, which counts them off in that call."""
    step = PurgeStep(0)
    script, sent = scripts.BUCKET_PURGE, list(keys)
    if record is not None:
        script, sent = scripts.GROW_HASH_PURGE, [record, *sent]
    done, scanned, removed, invalid = step.timed(lambda: script(server, sent, [batch, unit_ms]))
    step.scanned, step.removed, step.invalid = int(scanned), int(removed), int(invalid)
    if on_scan is not None:  # (read and deleted in one call: no candidates in between)
        on_scan(keys[0], [])
    return int(done), step


def _parts(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
