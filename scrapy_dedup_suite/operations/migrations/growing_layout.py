"""Convert a sized ``compact`` filter (buckets counted from DEDUP_COMPACT_CAPACITY when it
was created) into the growing layout (buckets that split as it grows) at the same key,
in place: ``scrapy convert-to-growing``.

Both layouts keep their stamps in the same keys (``{K:<g>}:meta``, one per group, in the
group's slot) and their record in ``K:meta``; their buckets differ (``{K:<g>}:<b>``
against ``{K:<g>}:grow:<b>``). Sized bucket ``b`` is in group ``b mod G``, and its
fields are 8 bytes of a fingerprint's SHA1 without the 4 that chose the bucket: the
growing filter goes on choosing a fingerprint's group as the sized one did (modulo the
sized bucket count B, then the groups: its record's ``grouped_by``), so each field moves
as it is into its group. A conversion:

1. **Checks** (:meth:`GrowingConversion.plan`), writing nothing: the key holds a sized
   compact filter these settings open (DEDUP_HASH_SHARDS), and its buckets are hashes.
2. **Switches** the filter: the conversion's parameters go to ``K:migration`` first
   (what a rerun goes on with), then every stamp is rewritten for the growing layout
   (lua/stamp_switch.lua: a worker still running the sized layout is refused from then
   on, opens the filter again as growing and goes on: ``dedup/reopened``), then the
   record (lua/record_switch.lua).
3. **Copies** each sized bucket, ``HSCAN`` a batch at a time, through the growing
   filter's own check-and-add (one call per slot group; its buckets split as it
   fills); a field a crawler recorded since the switch is kept as it is. The number of
   buckets done is saved after each: a rerun goes on there.
4. **Verifies** a sample (or all) of the sized buckets' fields: each must be seen.
5. Only then, if asked, **deletes** from the sized buckets every field the growing
   filter holds (a bucket emptied is gone).

A crawler that opens the growing filter before the copy has passed a fingerprint does
not see it and fetches its page once more; stop the crawlers first where that matters.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ...backends.compact import CompactBackend
from ...backends.compact_growing import GrowingCompactBackend, stored_capacity
from ...backends.growing import field_name
from ...backends.keys import as_str, chunks, memory_usage
from ...backends.layout import FIELD_BYTES
from ...backends.listpack import BYTES_PER_FINGERPRINT
from ...core.config import human_bytes
from ...exceptions import WrongKeyTypeError
from ...settings.options import CompactOptions
from .errors import SourceError, VerificationError
from .in_place import InPlaceConversion

logger = logging.getLogger(__name__)

#: What ``K:migration`` says while a conversion of ``K`` is under way.
MODE = "convert-to-growing"
#: Buckets whose first HSCAN one pipeline sends.
READ_AHEAD = 100


@dataclass
class GrowingPlan:
    key: str
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
            return f"{self.key!r}: a compact filter that grows already, with no sized buckets left"
        source = (
            f"source  {self.key!r}: compact filter sized for {self.capacity:,} fingerprints, "
            f"{self.fields:,} fields in {self.buckets:,} buckets of {self.shards} group(s), "
            f"about {human_bytes(self.source_memory)}"
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
    invalid: int = 0  # fields not copied: not 8 bytes
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
        if self.invalid:
            lines.append(f"left {self.invalid:,} field(s) not of {FIELD_BYTES} bytes in them")
        return "\n".join(lines)


class GrowingConversion(InPlaceConversion):
    """Convert the sized compact filter at ``key`` (opened with ``options``' groups)
    into the growing layout."""

    mode = MODE
    backend = "compact"
    #: Set by :meth:`convert`: the growing filter fed fields, and the sized buckets.
    fed: GrowingCompactBackend
    keys: list[str]

    def __init__(self, server: Any, key: str, options: CompactOptions, **how: Any) -> None:
        """``how``: see :class:`InPlaceConversion` (batch, verify, sample, progress)."""
        super().__init__(server, key, **how)
        self.shards = options.shards
        self.source: CompactBackend | None = None
        self.target: GrowingCompactBackend | None = None
        #: Whether plan() found it switched and done with (sized buckets left behind).
        self._switched = False

    # -- checks ----------------------------------------------------------------------------

    def plan(self) -> GrowingPlan:
        state = self.read_state()
        if self._under_way:
            self.same_settings({"DEDUP_HASH_SHARDS": (int(state["shards"]), self.shards)})
            source = self._source(int(state["capacity"]), int(state["buckets"]))
            target = GrowingCompactBackend(self.server, self.key, shards=self.shards)
            target.asked_grouping = source.buckets
            plan = self._plan(source, target, "resume")
            plan.position = int(state.get("position", 0))
            return plan
        stored = stored_capacity(self.server, self.key, self.shards)
        if stored is None:
            raise SourceError(self.no_source())
        if stored == 0:
            target = GrowingCompactBackend(self.server, self.key, shards=self.shards)
            self.check_opens(target)
            if target.grouped_by == self.shards:  # (created growing: nothing sized)
                return self._plan(None, target, "done")
            plan = self._plan(self._source(0, target.grouped_by), target, "resume")
            plan.state = "resume" if plan.fields else "done"  # (sized buckets left: again)
            self._switched = True  # (its level records are its own: a lost one stays lost)
            return plan
        source = self._source(stored, None)
        self.check_opens(source)
        target = GrowingCompactBackend(
            self.server, self.key, shards=self.shards, grouped_by=source.buckets
        )
        return self._plan(source, target, "start")

    def _source(self, capacity: int, buckets: int | None) -> CompactBackend:
        """The sized filter (``capacity`` 0: not known, the record says growing now)."""
        return CompactBackend(
            self.server, self.key, capacity=capacity or 1_000, shards=self.shards, buckets=buckets
        )

    def _plan(
        self, source: CompactBackend | None, target: GrowingCompactBackend, state: str
    ) -> GrowingPlan:
        self.source, self.target = source, target
        keys = self._bucket_keys() if source is not None else []
        fields = memory = 0
        if source is not None and keys:
            try:
                source.check_types(dict.fromkeys(keys, "hash"))
            except WrongKeyTypeError as exc:
                raise SourceError(f"{exc} Nothing was written.") from exc
            fields = self._held(keys)
            memory = memory_usage(self.server, keys)
        return GrowingPlan(
            key=self.key,
            shards=self.shards,
            capacity=source.capacity if source is not None else 0,
            buckets=source.buckets if source is not None else 0,
            fields=fields,
            source_memory=memory,
            target_memory=round(fields * BYTES_PER_FINGERPRINT),
            state=state,
        )

    def _bucket_keys(self) -> list[str]:
        """The sized buckets that may exist, in one order every run lists them in (none
        is written once the stamps say growing)."""
        assert self.source is not None
        return [key for keys in self.source.bucket_keys() for key in keys]

    def _held(self, keys: list[str]) -> int:
        """The fields the buckets ``keys`` hold (HLEN, pipelined)."""
        pipe = self.server.pipeline(transaction=False)
        for key in keys:
            pipe.hlen(key)
        return sum(int(n) for n in pipe.execute())

    # -- the run -------------------------------------------------------------------------

    def report(self, plan: GrowingPlan) -> GrowingReport:
        return GrowingReport(plan, verify_mode=self.verify_mode)

    def state(self, plan: GrowingPlan) -> dict[str, Any]:
        assert self.source is not None
        return {
            "shards": self.shards,
            "capacity": self.source.capacity,
            "buckets": self.source.buckets,
            "position": plan.position,
        }

    def convert(self, plan: GrowingPlan, report: GrowingReport) -> None:
        """Each group's level record is created first (level 0: a group whose stamp
        exists and record does not is refused, as one that lost how far it split),
        then the stamps and the record are switched; then the copy and the check."""
        source, target = self.source, self.target
        assert source is not None and target is not None
        if not self._switched:
            for record in target.layout.level_keys:
                self.server.set(record, "0 0 0", nx=True)
            self.switch(source, target, "sized_for", str(source.capacity), "0")
        target.open()
        self.fed = target.fed_fields()
        self.fed.open()
        self.keys = self._bucket_keys()
        self._copy(plan, report)
        self._check(report)

    def _buckets(self, keys: list[str], start: int = 0) -> Iterator[tuple[int, list[bytes]]]:
        """Each of the buckets ``keys`` from ``start`` on, by its position, with its
        fields: the first HSCAN of READ_AHEAD buckets in one pipeline (a bucket in the
        compact encoding answers whole), the rest of a larger one ``batch`` a call."""
        for first in range(start, len(keys), READ_AHEAD):
            part = keys[first : first + READ_AHEAD]
            pipe = self.server.pipeline(transaction=False)
            for key in part:
                pipe.hscan(key, 0, count=self.batch)
            for offset, (key, (cursor, found)) in enumerate(zip(part, pipe.execute())):
                fields = self._as_bytes(list(found))
                cursor = int(cursor)
                while cursor:
                    cursor, more = self.server.hscan(key, cursor, count=self.batch)
                    cursor = int(cursor)
                    fields += self._as_bytes(list(more))
                yield first + offset, fields

    @staticmethod
    def _as_bytes(found: list[Any]) -> list[bytes]:
        """Fields as the server gave them (a client with decode_responses: as text)."""
        return [f if isinstance(f, bytes) else as_str(f).encode("utf-8") for f in found]

    def _named(self, key: str, fields: list[bytes]) -> tuple[list[str], int]:
        """The copy's names of the 8-byte ``fields`` of bucket ``key``, and how many
        others it holds (set aside, with a line)."""
        assert self.source is not None
        number = self.source.bucket_of(key)
        assert number is not None
        group = number % self.shards
        names = [field_name(group, f) for f in fields if len(f) == FIELD_BYTES]
        others = len(fields) - len(names)
        if others:
            logger.warning(
                "convert-to-growing: %d field(s) of %r are not %d bytes: not a fingerprint's, "
                "left where they are",
                others,
                key,
                FIELD_BYTES,
            )
        return names, others

    def _copy(self, plan: GrowingPlan, report: GrowingReport) -> None:
        """The buckets from ``plan.position`` on, their fields sent ``batch`` a call
        (a sparse filter's few fields a bucket gathered from many); the position saved
        after each call: every bucket before it sent whole."""
        pending: list[str] = []
        done = 0

        def send(position: int) -> None:
            nonlocal done
            for part in chunks(pending, self.batch):
                seen = self.fed.check_and_add_many(part)
                report.present += sum(seen)
                report.copied += len(seen) - sum(seen)
            done += len(pending)
            pending.clear()
            self.server.hset(self.state_key, "position", position)
            if self.progress is not None:
                self.progress(done, plan.fields)

        for position, fields in self._buckets(self.keys, plan.position):
            names, others = self._named(self.keys[position], fields)
            report.invalid += others
            pending += names
            if len(pending) >= self.batch:
                send(position + 1)
        send(len(self.keys))

    # -- verification and the source's removal ----------------------------------------------

    def _check(self, report: GrowingReport) -> None:
        """Every field of the sized buckets (``--verify all``), or (a sample) the fields
        of buckets in a random order until ``sample`` are read, must be seen."""
        order = list(range(len(self.keys)))
        if self.verify_mode == "sample":
            random.shuffle(order)
        keys = [self.keys[i] for i in order]
        missing: list[str] = []
        for position, fields in self._buckets(keys):
            names, _ = self._named(keys[position], fields)
            found = self.fed.contains_many(names)
            missing += [name for name, ok in zip(names, found) if not ok]
            report.verified += len(names)
            if self.verify_mode == "sample" and report.verified >= self.sample:
                break
        if missing:
            raise VerificationError(
                f"Verification failed: {len(missing):,} of {report.verified:,} fields of the "
                f"sized buckets are not in the growing ones, e.g. {missing[:3]!r} (group:field). "
                "The sized buckets were left as they are; run the conversion again."
            )

    def delete_copied(self, report: GrowingReport) -> None:
        """HDEL every field of the sized buckets that the growing filter holds."""
        before = memory_usage(self.server, self.keys)
        for position, fields in self._buckets(self.keys):
            key = self.keys[position]
            names, _ = self._named(key, fields)
            held = [name for name, ok in zip(names, self.fed.contains_many(names)) if ok]
            gone = [bytes.fromhex(name.partition(":")[2]) for name in held]
            for part in chunks(gone, self.batch):
                report.removed += int(self.server.hdel(key, *part))
        report.kept = self._held(self.keys)
        report.memory_freed = before - memory_usage(self.server, self.keys)
