"""What ``scrapy convert-hash-layout`` plans (:class:`ConversionPlan`) and what it did
(:class:`ConversionReport`), each saying itself in words."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...core.config import human_bytes


@dataclass
class ConversionPlan:
    key: str
    shards: int
    fields: int
    source_memory: int
    expiry: str  # who expires the fields: "janitor" or "server"
    capacity: int
    buckets: int
    target_memory: int
    #: "start" (layout 1), "resume" (a conversion under way) or "done" (nothing left).
    state: str
    shard: int = 0
    cursor: int = 0

    def describe(self) -> str:
        if self.state == "done":
            return f"{self.key!r}: a hash filter in buckets already, with no shards left"
        source = (
            f"source  {self.key!r}: hash filter of layout 1, {self.fields:,} fields in "
            f"{self.shards} shard(s), about {human_bytes(self.source_memory)}; expired by "
            f"the {self.expiry}"
        )
        if self.state == "resume":
            source += f"; the conversion goes on at shard {self.shard}"
        return "\n".join(
            [
                source,
                f"target  the same key in {self.buckets:,} buckets sized for "
                f"{self.capacity:,} fingerprints (DEDUP_COMPACT_CAPACITY), about "
                f"{human_bytes(self.target_memory)}; each fingerprint keeps its expiry",
                "switch  stamps and record at once: stop the filter's crawlers and janitor "
                "first (a worker left running on layout 1 is refused from then on)",
            ]
        )


@dataclass
class ConversionReport:
    plan: ConversionPlan
    copied: int = 0  # fields written into the buckets
    present: int = 0  # fields the buckets held already (a rerun, or a crawler since)
    expired: int = 0  # fields not copied: expired
    invalid: int = 0  # fields not copied: no expiry in them
    seconds: float = 0.0
    verified: int = 0
    verify_mode: str = "sample"
    removed: int = 0
    kept: int = 0
    memory_freed: int = 0
    source_deleted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        p = self.plan
        if p.state == "done":
            return p.describe() + ": nothing to convert"
        rate = (self.copied + self.present) / self.seconds if self.seconds else 0.0
        lines = [
            f"converted {p.key!r} to buckets: {self.copied:,} fingerprints copied, "
            f"{self.present:,} there already, {self.expired:,} expired left behind, in "
            f"{self.seconds:.1f} s ({rate:,.0f}/s)",
            f"verified {self.verified:,} unexpired source fields ({self.verify_mode}): all found",
        ]
        if self.source_deleted:
            lines.append(f"source shards deleted, {human_bytes(self.memory_freed)} freed")
        elif self.removed:
            lines.append(
                f"source: {self.removed:,} fields removed ({human_bytes(self.memory_freed)} "
                f"freed), {self.kept:,} kept (no expiry in them)"
            )
        else:
            lines.append(
                f"source shards kept ({human_bytes(p.source_memory)}; nothing expires them "
                "now): run again with --delete-source to remove them"
            )
        if self.invalid:
            lines.append(f"left {self.invalid:,} field(s) that hold no expiry, in the shards")
        return "\n".join(lines)
