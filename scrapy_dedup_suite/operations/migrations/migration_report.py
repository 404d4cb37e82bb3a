"""What a migration plans and reports, and its progress bar."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ...core.bloom_math import BloomParams
from ...core.config import human_bytes


@dataclass
class Plan:
    source: str
    target: str
    backend: str
    members: int
    source_memory: int
    capacity: int
    error_rate: float
    bits: int
    hashes: int
    blocks: int
    target_memory: int
    target_exists: bool
    items_already: float
    resulting_error_rate: float
    new_members: int = 0  # members not in the target yet (estimated from a sample)
    bucket: str = ""
    layers: int = 0  # a scalable target: the most layers it may have (0: a fixed filter)
    expire: float = 0.0  # an exact target (hash): seconds each fingerprint stays seen
    server_filter: str = ""  # the server's own Bloom filters: "NONSCALING" or "expansion N"

    def describe(self) -> str:
        where = f" (current bucket {self.bucket})" if self.bucket else ""
        existing = (
            f"exists, holds about {self.items_already:,.0f} fingerprints"
            if self.target_exists
            else "will be created"
        )
        source = (
            f"source  {self.source!r}: a set of {self.members:,} fingerprints, "
            f"about {_mb(self.source_memory)} of Redis memory"
        )
        if self.server_filter:  # the server's own Bloom filters (BF.*)
            room = (
                f"capacity {self.capacity:,}"
                if self.capacity
                else "grows past its capacity (sub-filters)"
            )
            return "\n".join(
                [
                    source,
                    f"target  {self.target!r}{where}: {self.backend} filter, {existing}",
                    f"        the server's Bloom filters (BF.*), {self.blocks} block(s), "
                    f"{self.server_filter}, {room} at error rate {self.error_rate}, about "
                    f"{_mb(self.target_memory)} (estimated)",
                    f"after   about {self.items_already + self.new_members:,.0f} fingerprints, "
                    f"false-positive rate about {self.resulting_error_rate:.3g}",
                    "writes  through the filter's own check-and-add (BF.INSERT), in batches",
                ]
            )
        if not self.error_rate:  # an exact target (hash, compact)
            sized = (
                f", sized for {self.capacity:,} (DEDUP_COMPACT_CAPACITY)" if self.capacity else ""
            )
            stays = (
                f"each stays seen for {self.expire:,.0f} s (DEDUP_EXPIRE) from now"
                if self.expire
                else "each stays seen for good"
            )
            return "\n".join(
                [
                    source,
                    f"target  {self.target!r}: {self.backend} filter in {self.blocks} "
                    f"shard(s){sized}, {existing}, about {_mb(self.target_memory)} (estimated at "
                    "a full bucket's cost a fingerprint; far below its capacity each bucket "
                    "holds a few and costs about 90 B: the run measures it)",
                    f"after   about {self.items_already + self.new_members:,.0f} fingerprints, "
                    f"exact; {stays}",
                    "writes  through the filter's own script, in batches",
                ]
            )
        return "\n".join(
            [
                source,
                f"target  {self.target!r}{where}: {self.backend} filter, {existing}",
                f"        capacity {self.capacity:,} at error rate {self.error_rate}: "
                f"m = {self.bits:,} bits in {self.blocks} block(s), k = {self.hashes}, "
                f"{_mb(self.target_memory)} of bitmaps",
                f"after   about {self.items_already + self.new_members:,.0f} fingerprints, "
                f"false-positive rate about {self.resulting_error_rate:.3g}",
                self._how(),
                *self._sizing_hint(),
            ]
        )

    def _sizing_hint(self) -> list[str]:
        """A filter far larger than the set (the default 10,000,000 for a crawl of a few
        thousand pages): what a capacity sized from the set would take instead."""
        held = self.items_already + self.new_members
        if self.layers or self.target_exists or not held or self.capacity < 100 * held:
            return []
        suggested = max(10_000, int(10 * held))
        smaller = BloomParams.from_capacity(suggested, self.error_rate).memory_bytes
        return [
            f"sizing  the filter is {self.capacity / held:,.0f}x what the set holds: "
            f"DEDUP_BLOOM_CAPACITY = {suggested} (10x the set, room to grow; or --capacity "
            f"{suggested}) would take {_mb(smaller)} instead of {_mb(self.target_memory)}. "
            "A filter's capacity is fixed when it is created."
        ]

    def _how(self) -> str:
        if self.layers:
            return (
                f"writes  through the filter's own script, pipelined: layers are counted and "
                f"added as for a crawler (up to {self.layers}; the capacity above is theirs "
                "together, the first layer's figures are shown)"
            )
        return (
            f"merges  one BITOP OR over {_mb(self.target_memory / self.blocks)} per block "
            "and round: Redis pauses that long (about 1.3 ms per MiB on a 2-core host)"
        )


@dataclass
class Report:
    plan: Plan
    migrated: int = 0
    skipped: list[str] = field(default_factory=list)
    rounds: int = 0
    resumed: bool = False
    seconds: float = 0.0
    verified: int = 0
    verify_mode: str = "sample"
    source_deleted: bool = False
    source_removed: int = 0
    source_kept: int = 0
    memory_freed: int = 0
    #: Fingerprints an interrupted run had moved before this one resumed it.
    moved_before: int = 0
    #: The target's memory after the run (MEMORY USAGE of its keys); None before.
    target_memory: int | None = None

    @property
    def rate(self) -> float:
        """Fingerprints a second that this run moved (not those moved before a resume)."""
        moved = self.migrated - self.moved_before
        return moved / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rate"] = self.rate
        return out

    def _source_fate(self) -> str:
        if self.source_deleted:
            return f"deleted, {_mb(self.memory_freed)} freed"
        if self.source_removed:
            return (
                f"{self.source_removed:,} migrated members removed, {_mb(self.memory_freed)} "
                f"freed; {self.source_kept:,} kept (not migrated: skipped, or added by "
                "crawlers during the migration; run it again to move them)"
            )
        return f"kept ({_mb(self.plan.source_memory)}); --delete-source removes it"

    def _target_memory(self) -> str:
        if self.target_memory is None:
            return f"about {_mb(self.plan.target_memory)} (estimated)"
        return f"{_mb(self.target_memory)} (MEMORY USAGE of its keys)"

    def summary(self) -> str:
        lines = [
            f"migrated {self.migrated:,} fingerprints from {self.plan.source!r} to "
            f"{self.plan.target!r} in {self.seconds:.1f} s ({self.rate:,.0f}/s, "
            f"{self.rounds} round(s)"
            + (f", resumed after {self.moved_before:,} moved before" if self.resumed else "")
            + ")",
            f"verified {self.verified:,} source members ({self.verify_mode}): all found",
            f"target memory {self._target_memory()}; source " + self._source_fate(),
        ]
        if self.skipped:
            lines.append(
                f"skipped {len(self.skipped)} member(s) that are not hex fingerprints the Bloom "
                f"backends can hash, e.g. {self.skipped[:3]!r}"
            )
        return "\n".join(lines)


def _mb(n: float) -> str:
    return human_bytes(n)


class Progress:
    """A progress bar on a terminal, a line every few seconds elsewhere (a file, a pipe)."""

    def __init__(
        self, stream: Any = None, every: float = 5.0, name: str = "migrate-set-to-bloom"
    ) -> None:
        self.name = name
        self.total = 1
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int, final: bool = False) -> None:
        self.total = max(total, 1)
        now = time.monotonic()
        if not final and now - self.last < (0.2 if self.tty else self.every):
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else 0
        pct = min(done / self.total, 1.0)
        text = (
            f"{done:,}/{self.total:,} ({pct:.1%}) {rate:,.0f} fingerprints/s, "
            f"ETA {time.strftime('%H:%M:%S', time.gmtime(max(eta, 0)))}"
        )
        if self.tty:
            bar = "#" * int(pct * 30)
            self.stream.write(f"\r[{bar:<30}] {text}" + ("\n" if final else ""))
            self.stream.flush()
        else:  # a file or a pipe: a line each time (the command configures no logging)
            self.stream.write(f"{self.name}: {text}\n")
            self.stream.flush()
