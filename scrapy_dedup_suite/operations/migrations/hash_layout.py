"""Convert a ``hash`` filter of layout 1 (whole fingerprints in shards, about 105 bytes
a fingerprint) into the bucket layout (about 18) at the same key, in place:
``scrapy convert-hash-layout``.

Both layouts keep their stamps in the same keys (``{K:<i>}:meta``, one per shard or
group of buckets, in the same slot) and their record in ``K:meta``; their data keys
differ (``K:<i>`` against ``{K:<i>}:<bucket>``). A conversion:

1. **Checks** (:meth:`HashLayoutConversion.plan`), writing nothing: the key holds a hash
   filter of layout 1 that these settings open (shards, who expires the fields), and
   the buckets, sized from ``DEDUP_COMPACT_CAPACITY``, can hold what the shards hold.
2. **Switches** the filter: the target's parameters go to ``K:migration`` first (what a
   rerun finishes with), then every stamp is rewritten for the buckets (lua/
   stamp_switch.lua: a worker still running layout 1 is refused from then on, with
   the mismatch error, instead of writing shards nobody reads), then the record
   (lua/record_switch.lua). A crawler started from then on opens the buckets.
3. **Copies** each shard, ``HSCAN`` a batch at a time, through the buckets' own
   check-and-add, each fingerprint with what is left of its expiry (never less: the
   remainder is taken before the call, which measures from its own later clock);
   expired fields are not copied; a fingerprint a crawler recorded since the switch is
   kept as it is. (shard, cursor) is saved after each batch: a rerun goes on there.
4. **Verifies** a sample (or all) of the shards' fields that do not expire within
   :data:`VERIFY_MARGIN_MS`: each must be seen by the buckets.
5. Only then, if asked, **deletes** from the shards every field the buckets hold or that
   has expired; a field that holds no expiry stays (and is reported).

Stop the filter's crawlers (and its janitor) before converting: from the switch until
the copy has passed a fingerprint, a crawler that opens the buckets does not see it
and fetches its page again (a page is never taken as seen that was not).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ...backends.expiry import (
    BUCKETS_LAYOUT,
    BY_SERVER,
    SHARDS_LAYOUT,
    build_hash,
    stored_hash,
)
from ...backends.hash import HashBackend
from ...backends.hash_buckets import HashBucketsBackend
from ...backends.keys import as_str, chunks, memory_usage
from ...exceptions import WrongKeyTypeError
from ...server.connection import server_time_ms
from ...settings.options import HashOptions
from ...settings.table import GROUPS
from .conversion_report import ConversionPlan, ConversionReport
from .errors import SourceError, TargetError, VerificationError
from .in_place import InPlaceConversion

logger = logging.getLogger(__name__)

#: What ``K:migration`` says while a conversion of ``K`` is under way.
MODE = "convert-hash-layout"
#: Fields expiring sooner than this are not verified (they may expire before the check).
VERIFY_MARGIN_MS = 5000


class HashLayoutConversion(InPlaceConversion):
    """Convert the hash filter at ``key`` (built from ``options``) into buckets."""

    mode = MODE
    backend = "hash"

    def __init__(
        self,
        server: Any,
        key: str,
        options: HashOptions,
        *,
        force: bool = False,
        **how: Any,
    ) -> None:
        """``how``: see :class:`InPlaceConversion` (batch, verify, sample, progress)."""
        super().__init__(server, key, **how)
        self.options = options
        #: The groups (DEDUP_HASH_SHARDS; unset: the filter's, found by :meth:`plan`).
        self.shards: int = options.shards or GROUPS
        self.force = force
        self.source: HashBackend | None = None
        self.target: HashBucketsBackend | None = None

    # -- checks ----------------------------------------------------------------------------

    def plan(self) -> ConversionPlan:
        """Check everything and say what a run would do; writes nothing."""
        state = self.read_state()
        unset = self.options.shards is None  # (DEDUP_HASH_SHARDS unset: the filter's)
        if self._under_way:
            if unset:
                self.shards = int(state["shards"])
            return self._resume_plan(state)
        o = self.options
        layout, groups = stored_hash(self.server, self.key, o.shards)
        if unset:
            self.shards = groups or GROUPS
        if layout is None:
            raise SourceError(self.no_source())
        if layout == BUCKETS_LAYOUT:
            built = build_hash(self.server, self.key, replace(o, shards=self.shards))
            assert isinstance(built, HashBucketsBackend)
            self.check_opens(built)
            source = self._source(built.expiry is BY_SERVER)
            fields = self._fields_of(source)  # leftover shards are finished as a rerun
            return self._plan(source, built, "resume" if fields else "done", fields)
        if layout != SHARDS_LAYOUT:
            raise SourceError(
                f"The hash filter at {self.key!r} is of layout {layout!r}, which this "
                "version does not know; nothing was written. Upgrade scrapy-dedup-suite."
            )
        source = self._source(o.field_expiry)
        self.check_opens(source)
        target = self._target(source.expiry is BY_SERVER)
        return self._plan(source, target, "start", self._fields_of(source))

    def _source(self, field_expiry: bool | None) -> HashBackend:
        o = self.options
        return HashBackend(
            self.server, self.key, expire=o.expire, shards=self.shards, field_expiry=field_expiry
        )

    def _target(self, server_expiry: bool, buckets: int | None = None) -> HashBucketsBackend:
        """The buckets, expired the source's way; ``buckets``: the count a conversion
        under way recorded (else sized from the capacity)."""
        o = self.options
        return HashBucketsBackend(
            self.server,
            self.key,
            expire=o.expire,
            shards=self.shards,
            capacity=o.capacity,
            field_expiry=server_expiry,
            buckets=buckets,
        )

    def _resume_plan(self, state: dict[str, str]) -> ConversionPlan:
        """A conversion under way: its target's parameters are the state's, and the
        settings must still say them (the crawl that follows uses the settings)."""
        o = self.options
        self.same_settings(
            {
                "DEDUP_HASH_SHARDS": (int(state["shards"]), self.shards),
                "DEDUP_COMPACT_CAPACITY": (int(state["capacity"]), o.capacity),
            }
        )
        way = state["expiry"] == BY_SERVER.name
        source = self._source(way)
        target = self._target(way, int(state["buckets"]))
        plan = self._plan(source, target, "resume", self._fields_of(source))
        plan.shard, plan.cursor = int(state.get("shard", 0)), int(state.get("cursor", 0))
        return plan

    def _fields_of(self, source: HashBackend) -> int:
        """The fields in the shards; refused (nothing written) where a shard is no hash."""
        try:
            source.check_types(dict.fromkeys(source.shard_keys, "hash"))
        except WrongKeyTypeError as exc:
            raise SourceError(f"{exc} Nothing was written.") from exc
        return source._fields()

    def _plan(
        self, source: HashBackend, target: HashBucketsBackend, state: str, fields: int
    ) -> ConversionPlan:
        """``fields``: what the shards hold (:meth:`_fields_of`)."""
        self.source, self.target = source, target
        memory = memory_usage(source.server, source.shard_keys) if fields else 0
        plan = ConversionPlan(
            key=self.key,
            shards=source.shards,
            fields=fields,
            source_memory=memory,
            expiry=source.expiry.name,
            capacity=target.capacity,
            buckets=target.buckets,
            target_memory=round(fields * target.expected_bytes_per_fingerprint()),
            state=state,
        )
        if state == "start" and fields > target.capacity and not self.force:
            wanted = max(2 * fields, 1_000_000)
            raise TargetError(
                f"The hash filter at {self.key!r} holds {fields:,} fingerprints, more than the "
                f"{target.capacity:,} DEDUP_COMPACT_CAPACITY sizes the buckets for: they would "
                "leave the listpack encoding (several times the memory). Set "
                f"DEDUP_COMPACT_CAPACITY = {wanted} (room to grow) in the project's settings, "
                "which the crawl then uses too, or pass --force."
            )
        return plan

    # -- the run -------------------------------------------------------------------------

    def report(self, plan: ConversionPlan) -> ConversionReport:
        return ConversionReport(plan, verify_mode=self.verify_mode)

    def state(self, plan: ConversionPlan) -> dict[str, Any]:
        assert self.source is not None and self.target is not None
        return {
            "shards": self.source.shards,
            "capacity": self.target.capacity,
            "buckets": self.target.buckets,
            "expiry": self.source.expiry.name,
            "shard": plan.shard,
            "cursor": plan.cursor,
        }

    def convert(self, plan: ConversionPlan, report: ConversionReport) -> None:
        source, target = self.source, self.target
        assert source is not None and target is not None
        self.switch(source, target, "layout", SHARDS_LAYOUT, BUCKETS_LAYOUT)
        target.open()
        self._copy(plan, report)
        self._check(report)

    def _copy(self, plan: ConversionPlan, report: ConversionReport) -> None:
        target = self.target
        assert target is not None
        done = 0
        for shard, cursor, expiries, invalid in self._walk(plan.shard, plan.cursor):
            report.invalid += invalid
            now_ms = server_time_ms(self.server)
            live = {fp: ms - now_ms for fp, ms in expiries.items() if ms > now_ms}
            report.expired += len(expiries) - len(live)
            if live:
                seen = target.check_and_add_many(
                    list(live), [left / 1000 for left in live.values()]
                )
                report.present += sum(seen)
                report.copied += len(seen) - sum(seen)
            done += len(expiries) + invalid
            # Where a rerun goes on: this shard at the cursor, or (done with it) the next.
            resume = {"shard": shard, "cursor": cursor} if cursor else {"shard": shard + 1}
            self.server.hset(self.state_key, mapping={"cursor": 0, **resume})
            if self.progress is not None:
                self.progress(done, plan.fields)

    def _walk(
        self, shard: int = 0, cursor: int = 0
    ) -> Iterator[tuple[int, int, dict[str, int], int]]:
        """HSCAN the shards from ``shard`` (at ``cursor``) to the last, ``batch`` fields a
        call: per call, the shard's index, the next cursor (0: the shard is done), each
        field's expiry (Unix ms), and how many fields hold none."""
        assert self.source is not None
        for index in range(shard, self.source.shards):
            key = self.source.shard_keys[index]
            while True:
                cursor, flat = self.server.hscan(key, cursor, count=self.batch)
                cursor = int(cursor)
                values = {as_str(k): as_str(v) for k, v in flat.items()}
                yield index, cursor, *self._expiries(key, values)
                if cursor == 0:
                    break

    def _expiries(self, shard: str, values: dict[str, str]) -> tuple[dict[str, int], int]:
        """The expiry (Unix ms) of each of ``values``' fields, and how many have none.
        By the janitor: the field's value; by the server: the field's own (HPEXPIRETIME)."""
        if not values:
            return {}, 0
        assert self.source is not None
        if self.source.expiry is BY_SERVER:
            names = list(values)
            times = self.server.execute_command("HPEXPIRETIME", shard, "FIELDS", len(names), *names)
            # -1: no expiry (a damaged field); -2: gone meanwhile (expired: 0).
            out = {fp: max(0, int(ms)) for fp, ms in zip(names, times) if int(ms) != -1}
            return out, len(names) - len(out)
        out = {fp: int(v) for fp, v in values.items() if v.isdigit()}
        return out, len(values) - len(out)

    # -- verification and the source's removal ----------------------------------------------

    def _sampled(self) -> Iterator[dict[str, int]]:
        """Up to ``sample`` random fields, spread over the shards: their expiries."""
        assert self.source is not None
        each = math.ceil(self.sample / self.source.shards)
        for shard in self.source.shard_keys:
            flat = self.server.hrandfield(shard, each, withvalues=True) or []
            values = {as_str(k): as_str(v) for k, v in zip(flat[0::2], flat[1::2])}
            yield self._expiries(shard, values)[0]

    def _check(self, report: ConversionReport) -> None:
        assert self.target is not None
        if self.verify_mode == "all":
            batches: Iterator[dict[str, int]] = (e for _, _, e, _ in self._walk())
        else:
            batches = self._sampled()
        missing: list[str] = []
        for expiries in batches:
            now_ms = server_time_ms(self.server)
            lasting = [fp for fp, ms in expiries.items() if ms > now_ms + VERIFY_MARGIN_MS]
            found = self.target.contains_many(lasting)
            missing += [fp for fp, ok in zip(lasting, found) if not ok]
            report.verified += len(lasting)
        if missing:
            raise VerificationError(
                f"Verification failed: {len(missing):,} of {report.verified:,} unexpired "
                f"fingerprints of the shards are not in the buckets, e.g. {missing[:3]!r}. "
                "The shards were left as they are; run the conversion again."
            )

    def delete_copied(self, report: ConversionReport) -> None:
        """HDEL every shard field the buckets hold, or that has expired; a field that
        holds no expiry stays."""
        source, target = self.source, self.target
        assert source is not None and target is not None
        before = memory_usage(source.server, source.shard_keys)
        for index, _, expiries, _ in self._walk():
            shard = source.shard_keys[index]
            now_ms = server_time_ms(self.server)
            names = list(expiries)
            found = target.contains_many(names)
            gone = [fp for fp, ok in zip(names, found) if ok or expiries[fp] <= now_ms]
            report.removed += sum(int(self.server.hdel(shard, *part)) for part in chunks(gone))
        report.kept = source._fields()
        report.source_deleted = report.kept == 0
        report.memory_freed = before - memory_usage(source.server, source.shard_keys)
