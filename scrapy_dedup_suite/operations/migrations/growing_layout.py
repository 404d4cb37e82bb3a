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
from dataclasses import dataclass
from typing import Any

from ...backends.compact import CompactBackend
from ...backends.compact_growing import GrowingCompactBackend
from ...backends.groups import StoredShape, stored_shape
from ...backends.growing import field_name
from ...backends.keys import as_str, chunks, memory_usage
from ...backends.layout import FIELD_BYTES
from ...backends.listpack import BYTES_PER_FINGERPRINT
from ...exceptions import WrongKeyTypeError
from ...server.connection import server_time_ms
from ...settings.table import GROUPS
from .errors import SourceError, VerificationError
from .growing_plan import GrowingPlan, GrowingReport
from .in_place import InPlaceConversion

logger = logging.getLogger(__name__)

#: What ``K:migration`` says while a conversion of ``K`` is under way.
MODE = "convert-to-growing"
#: Buckets whose first HSCAN one pipeline sends.
READ_AHEAD = 100
#: Seconds: a field that expires sooner is not verified (it may have expired when asked).
VERIFY_AHEAD = 60.0


@dataclass
class Entries:
    """What the copy makes of one sized bucket's fields."""

    #: The copy's name of each fingerprint's field (:func:`field_name`).
    names: list[str]
    #: The seconds from now each stays seen (hash: what its value says), else None.
    expires: list[float | None]
    #: (hash) Fields whose expiry has passed: not copied, deleted with the source.
    expired: list[bytes]
    #: Fields that are not a fingerprint's: left where they are.
    others: int


class GrowingConversion(InPlaceConversion):
    """Convert the sized compact filter at ``key`` (opened with ``options``' groups)
    into the growing layout. A subclass converts another backend's sized buckets
    (:meth:`sized`, :meth:`growing`, :meth:`entries`)."""

    mode = MODE
    backend = "compact"
    #: What a fingerprint takes in the growing filter (the plan's estimate).
    bytes_per_fingerprint = BYTES_PER_FINGERPRINT
    #: Set by :meth:`convert`: the growing filter fed fields, and the sized buckets.
    fed: GrowingCompactBackend
    keys: list[str]

    def __init__(
        self, server: Any, key: str, options: Any, found: StoredShape | None = None, **how: Any
    ) -> None:
        """``options``: the backend's (CompactOptions, HashOptions): its groups (None:
        the stored filter's); ``found``: what the caller just read of the stored filter
        (:func:`.groups.stored_shape`), for the first :meth:`plan` (None: read there);
        ``how``: see :class:`InPlaceConversion` (batch, verify, sample, progress)."""
        super().__init__(server, key, **how)
        self.asked: int | None = options.shards
        self.shards: int = options.shards or GROUPS
        self._found = found
        self.source: CompactBackend | None = None
        self.target: GrowingCompactBackend | None = None
        #: Whether plan() found it switched and done with (sized buckets left behind).
        self._switched = False

    def sized(self, capacity: int, buckets: int | None) -> CompactBackend:
        """The sized filter (``capacity`` 0: not known, the record says growing now)."""
        return CompactBackend(
            self.server, self.key, capacity=capacity or 1_000, shards=self.shards, buckets=buckets
        )

    def growing(self, grouped_by: int | None = None) -> GrowingCompactBackend:
        """The growing filter at the key."""
        return GrowingCompactBackend(
            self.server, self.key, shards=self.shards, grouped_by=grouped_by
        )

    # -- checks ----------------------------------------------------------------------------

    def plan(self) -> GrowingPlan:
        stored, self._found = self._found, None  # (the first plan's only: it may be stale)
        state = self.read_state()
        if self._under_way:
            self.shards = self.asked or int(state["shards"])
            self.same_settings({"DEDUP_HASH_SHARDS": (int(state["shards"]), self.shards)})
            source = self.sized(int(state["capacity"]), int(state["buckets"]))
            target = self.growing()
            target.asked_grouping = source.buckets
            plan = self._plan(source, target, "resume")
            plan.position = int(state.get("position", 0))
            return plan
        if stored is None:
            stored = stored_shape(self.server, self.key, self.asked, self.backend)
        if stored is None:
            raise SourceError(self.no_source())
        self.shards = self.asked or stored.groups or GROUPS
        if stored.capacity == 0:
            target = self.growing()
            self.check_opens(target)
            if target.grouped_by == self.shards:  # (created growing: nothing sized)
                return self._plan(None, target, "done")
            plan = self._plan(self.sized(0, target.grouped_by), target, "resume")
            plan.state = "resume" if plan.fields else "done"  # (sized buckets left: again)
            self._switched = True  # (its level records are its own: a lost one stays lost)
            return plan
        source = self.sized(stored.capacity, None)
        self.check_opens(source)
        return self._plan(source, self.growing(source.buckets), "start")

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
            backend=self.backend,
            shards=self.shards,
            capacity=source.capacity if source is not None else 0,
            buckets=source.buckets if source is not None else 0,
            fields=fields,
            source_memory=memory,
            target_memory=round(fields * self.bytes_per_fingerprint),
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

    def _buckets(self, keys: list[str], start: int = 0, warn: bool = False) -> Iterator[Entries]:
        """What :meth:`entries` makes of each of the buckets ``keys`` from ``start`` on,
        in order: the server's clock, then the first HSCAN of READ_AHEAD buckets in one
        pipeline (a bucket in the compact encoding answers whole), the rest of a larger
        one ``batch`` a call. ``warn``: a line for each bucket with fields set aside."""
        for first in range(start, len(keys), READ_AHEAD):
            part = keys[first : first + READ_AHEAD]
            now_ms = server_time_ms(self.server)
            pipe = self.server.pipeline(transaction=False)
            for key in part:
                pipe.hscan(key, 0, count=self.batch)
            for key, (cursor, found) in zip(part, pipe.execute()):
                fields = self._as_bytes(found)
                cursor = int(cursor)
                while cursor:
                    cursor, more = self.server.hscan(key, cursor, count=self.batch)
                    cursor = int(cursor)
                    fields.update(self._as_bytes(more))
                yield self._entries(key, fields, now_ms, warn)

    @staticmethod
    def _as_bytes(found: dict[Any, Any]) -> dict[bytes, bytes]:
        """Fields and values as the server gave them (with decode_responses: as text)."""
        return {
            (f if isinstance(f, bytes) else as_str(f).encode("utf-8")): (
                v if isinstance(v, bytes) else as_str(v).encode("utf-8")
            )
            for f, v in found.items()
        }

    def _entries(self, key: str, fields: dict[bytes, bytes], now_ms: int, warn: bool) -> Entries:
        """:meth:`entries` of bucket ``key``, with a line (``warn``) for what it sets aside."""
        assert self.source is not None
        number = self.source.bucket_of(key)
        assert number is not None
        entries = self.entries(number % self.shards, fields, now_ms)
        if entries.others and warn:
            logger.warning(
                "convert-to-growing: %d field(s) of %r are not a fingerprint's (%d bytes%s): "
                "left where they are",
                entries.others,
                key,
                FIELD_BYTES,
                ", an expiry as its value" if self.backend == "hash" else "",
            )
        return entries

    def entries(self, group: int, fields: dict[bytes, bytes], now_ms: int) -> Entries:
        """The copy's names of the 8-byte ``fields`` of a bucket of ``group`` (their
        values empty; ``now_ms``: the server's clock); how many others it holds."""
        names = [field_name(group, f) for f in fields if len(f) == FIELD_BYTES]
        return Entries(names, [None] * len(names), [], len(fields) - len(names))

    def _copy(self, plan: GrowingPlan, report: GrowingReport) -> None:
        """The buckets from ``plan.position`` on, their fields sent ``batch`` a call
        (a sparse filter's few fields a bucket gathered from many); the position saved
        after each call: every bucket before it sent whole."""
        pending: list[str] = []
        expires: list[float | None] = []
        done = 0

        def send(position: int) -> None:
            nonlocal done
            for at in range(0, len(pending), self.batch):
                part = pending[at : at + self.batch]
                seen = self.fed.check_and_add_many(part, expires[at : at + self.batch])
                report.present += sum(seen)
                report.copied += len(seen) - sum(seen)
            done += len(pending)
            pending.clear()
            expires.clear()
            self.server.hset(self.state_key, "position", position)
            if self.progress is not None:
                self.progress(done, plan.fields)

        for position, entries in enumerate(self._buckets(self.keys, plan.position, True)):
            report.invalid += entries.others
            report.expired += len(entries.expired)
            pending += entries.names
            expires += entries.expires
            if len(pending) >= self.batch:
                send(plan.position + position + 1)
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
        for entries in self._buckets(keys):
            names = [  # (hash: not those that may expire before they are asked for)
                name
                for name, expire in zip(entries.names, entries.expires)
                if expire is None or expire > VERIFY_AHEAD
            ]
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
        """HDEL every field of the sized buckets that the growing filter holds, and those
        expired (hash: the janitor no longer walks the sized buckets)."""
        before = memory_usage(self.server, self.keys)
        for key, entries in zip(self.keys, self._buckets(self.keys)):
            names = entries.names
            held = [name for name, ok in zip(names, self.fed.contains_many(names)) if ok]
            gone = [bytes.fromhex(name.partition(":")[2]) for name in held] + entries.expired
            for part in chunks(gone, self.batch):
                report.removed += int(self.server.hdel(key, *part))
        report.kept = self._held(self.keys)
        report.memory_freed = before - memory_usage(self.server, self.keys)
