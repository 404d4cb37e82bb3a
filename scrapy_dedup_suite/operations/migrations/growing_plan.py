"""What ``scrapy convert-to-growing`` plans and reports (growing_layout.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...backends.layout import FIELD_BYTES
from ...core.config import human_bytes


@dataclass
class GrowingPlan:
    key: str
    backend: str  # compact, or hash (its sized buckets)
    shards: int
    capacity: int  # what the sized filter was sized for
    buckets: int  # its bucket count
    fields: int  # what its buckets hold
    source_memory: int
    target_memory: int
    #: "start" (sized), "resume" (a conversion under way, or sized buckets left) or "done".
    state: str
    position: int = 0  # sized buckets done

    def describe(self) -> str:
        if self.state == "done":
            return (
                f"{self.key!r}: a {self.backend} filter that grows already, with no sized "
                "buckets left"
            )
        source = (
            f"source  {self.key!r}: {self.backend} filter sized for {self.capacity:,} "
            f"fingerprints, {self.fields:,} fields in {self.buckets:,} buckets of "
            f"{self.shards} group(s), about {human_bytes(self.source_memory)}"
        )
        if self.state == "resume":
            source += f"; the conversion goes on after bucket {self.position:,} of the listing"
        return "\n".join(
            [
                source,
                "target  the same key in buckets that split as it grows (no capacity), about "
                f"{human_bytes(self.target_memory)}",
                "switch  stamps and record at once: a worker running the sized layout opens it "
                "again as growing; one that opens it before the copy has passed a fingerprint "
                "fetches its page once more",
            ]
        )


@dataclass
class GrowingReport:
    plan: GrowingPlan
    copied: int = 0  # fields written into the growing buckets
    present: int = 0  # fields they held already (a rerun, or a crawler since)
    invalid: int = 0  # fields not copied: not 8 bytes (hash: or no expiry as their value)
    expired: int = 0  # (hash) fields not copied: their expiry had passed
    seconds: float = 0.0
    verified: int = 0
    verify_mode: str = "sample"
    removed: int = 0
    kept: int = 0
    memory_freed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        p = self.plan
        if p.state == "done":
            return p.describe() + ": nothing to convert"
        rate = (self.copied + self.present) / self.seconds if self.seconds else 0.0
        lines = [
            f"converted {p.key!r} to buckets that split as it grows: {self.copied:,} "
            f"fingerprints copied, {self.present:,} there already, in {self.seconds:.1f} s "
            f"({rate:,.0f}/s)",
            f"verified {self.verified:,} fields of the sized buckets ({self.verify_mode}): "
            "all found",
        ]
        if self.removed:
            lines.append(
                f"source: {self.removed:,} fields removed ({human_bytes(self.memory_freed)} "
                f"freed), {self.kept:,} kept"
            )
        else:
            lines.append(
                f"sized buckets kept ({human_bytes(p.source_memory)}): run again with "
                "--delete-source to remove them"
            )
        if self.expired:
            lines.append(f"{self.expired:,} expired field(s) not copied")
        if self.invalid:
            lines.append(
                f"left {self.invalid:,} field(s) not a fingerprint's ({FIELD_BYTES} bytes"
                + (", an expiry" if p.backend == "hash" else "")
                + ") in them"
            )
        return "\n".join(lines)
