"""What ``scrapy dedup-info`` says of a growing filter (:mod:`.compact_growing`): every
bucket counted and measured, each group's level."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GrowingBuckets:
    """A growing filter's buckets, every one counted, measured and its encoding read."""

    fields: int  # the fingerprints held (HLEN of every bucket)
    buckets: int  # the buckets that hold a field
    shards: int  # its groups (DEDUP_HASH_SHARDS)
    load: int  # fields a bucket averages before its group splits one
    #: Per group: its level, its split pointer and its buckets (2^level + split).
    levels: list[tuple[int, int, int]]
    memory: int  # MEMORY USAGE of every bucket
    hashtables: int  # buckets that left the listpack encoding

    @property
    def bytes_per_fingerprint(self) -> float | None:
        return self.memory / self.fields if self.fields else None

    def describe(self) -> list[str]:
        levels = sorted({level for level, _, _ in self.levels})
        counts = [n for _, _, n in self.levels]
        said = f"level {levels[0]}" if len(levels) == 1 else f"levels {levels[0]}-{levels[-1]}"
        lines = [
            f"{self.fields:,} fingerprints (counted) in {self.buckets:,} buckets that split as "
            f"the filter grows (no capacity): {self.shards} group(s) at {said}, "
            f"{min(counts):,}-{max(counts):,} buckets each; a group splits one past "
            f"{self.load} fields a bucket"
        ]
        per = self.bytes_per_fingerprint
        lines.append(
            f"{self.hashtables:,} of {self.buckets:,} buckets left the compact encoding"
            + (f"; {per:.1f} bytes a fingerprint (MEMORY USAGE, every bucket)" if per else "")
        )
        return lines
