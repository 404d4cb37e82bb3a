"""What one janitor pass did and found (:class:`JanitorReport`), and how it says it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends.reports import FilterFill


@dataclass
class JanitorReport:
    """What one pass did and found."""

    backend: str
    key: str
    skipped: bool = False  # another janitor held the lock
    exists: bool = True  # False when the dupefilter has stored nothing yet
    purged: bool = False  # the backend's entries expire and this pass purged them
    completed: bool = False  # the purge reached the end of every hash
    resumed: bool = False  # it continued a pass that had been interrupted
    scanned: int = 0
    removed: int = 0
    remaining: int = 0  # fields left in the hash after the pass
    calls: int = 0  # Redis calls made by the purge
    seconds: float = 0.0
    slowest_call_ms: float = 0.0
    restored_expiry: list[str] = field(default_factory=list)
    filters: list[FilterFill] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        head = f"{self.backend} dupefilter at {self.key!r}: "
        if self.skipped:
            return head + "skipped, another janitor is running a pass on this key"
        if not self.exists:
            return head + "nothing stored yet, nothing to do"
        parts = list(self.notes)
        if self.purged:
            state = "finished" if self.completed else "interrupted"
            parts.append(
                f"removed {self.removed:,} expired of {self.scanned:,} scanned fields "
                f"({self.remaining:,} remain), pass {state}"
                + (" (resumed)" if self.resumed else "")
            )
            parts.append(f"{self.calls:,} calls, slowest {self.slowest_call_ms:.2f} ms")
        parts += [fill.describe() for fill in self.filters]
        if self.restored_expiry:
            parts.append(f"restored the expiry of {len(self.restored_expiry)} bucket(s)")
        if len(parts) == len(self.notes):  # (a backend with no expiry and no fill to report)
            parts.append(f"nothing to do: the {self.backend} backend has no expiry to purge")
        parts.append(f"{self.seconds:.2f} s")
        return head + "; ".join(parts)
