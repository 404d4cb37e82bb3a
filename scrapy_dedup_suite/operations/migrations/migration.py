"""Convert a scrapy-redis fingerprint set into the bits of a Bloom filter (or into
the hash backend, through its own check-and-add).

How it runs (:meth:`SetMigration.run`), reading the set through
:class:`.source.SetSource` and writing through one of the writers of ``writers.py``:

1. Checks, before anything is written: the source exists and is a set; the
   target holds no key of another type and, if it exists, was built with the
   same parameters; the source fits the target's capacity (else refused, unless
   ``force``, with the false-positive rate it would reach).
2. Rounds, written by one of the writers of ``writers.py`` (the mode, recorded
   for --resume): SSCAN reads up to ``round_size`` members (a reader thread keeps
   the socket busy while the main thread computes); in bulk, numpy computes their bit
   offsets exactly as the Lua scripts do (scheme ``dh48-v1``, checked by the
   tests on many fingerprints) and sets them in a local bitmap per block. The
   bitmap is uploaded to a temporary key in the block's cluster slot and merged
   with one Lua call (``BITOP OR``): bits are only ever added, bits a live
   crawler set meanwhile are kept, a bucket keeps its expiry. After each round
   the SSCAN cursor is saved in ``<target>:migration``: a run killed at any
   point continues from there with ``resume``, and a rerun from scratch only
   sets bits that are set already.
3. Verification: a sample of source members (or all) is checked against the
   target; the sample through the backend's own Lua membership test.
4. Only then, if asked, the source set is deleted.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from ...backends import DedupBackend
from ...backends.keys import as_str, migration_state_key, read_hash
from ...core.bloom_math import BloomParams, is_hex_fingerprint
from ...exceptions import DedupError
from .errors import MigrationError, TargetError, VerificationError
from .migration_report import Plan, Report
from .source import SetSource
from .writers import WRITERS, BitsWriter, LayeredBitsWriter, ScriptWriter, Writer

logger = logging.getLogger(__name__)


class SetMigration:
    """Migrate the set at ``source`` into ``target`` (a backend of
    ``MIGRATION_TARGETS``, not opened yet)."""

    def __init__(
        self,
        target: DedupBackend,
        source: str,
        *,
        batch: int = 10_000,
        round_size: int = 10_000_000,
        force: bool = False,
        verify: str = "sample",
        sample: int = 10_000,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        if verify not in ("sample", "all"):
            raise MigrationError(f"verify must be 'sample' or 'all', got {verify!r}")
        if target.name == "set":
            raise TargetError(
                "The target is a set: the source already is what the set backend reads. "
                "Choose bloom, windowed-bloom, hash or compact (--to)."
            )
        # A Bloom target's own members (params, scaling, layers...) are used only where
        # it declares bulk_bits.
        self.target: Any = target
        self.server = target.server
        self.source = source
        self.set = SetSource(target.server, source, batch)
        self.round_size = max(round_size, batch)
        self.force = force
        self.verify_mode = verify
        self.sample = sample
        #: The source members the sample verification checks (drawn before the scan).
        self._sample: list[str] = []
        self.progress = progress
        self.state_key = migration_state_key(target.key)
        # How the members are written (writers.py): a Bloom target (bulk_bits) takes a
        # fixed filter's bits in bulk; a scalable one through its script, unless this
        # migration creates it (then in bulk into a first layer sized for the set: see
        # _size_first_layer). Any other target (hash, the server's Bloom filters) is
        # written through its own check-and-add.
        self.bulk = target.capabilities.bulk_bits
        self.writer_class: type[Writer] = self._default_writer()
        self.writer: Writer | None = None
        #: The members the target can hold (Bloom backends hash hex digests only).
        self.accepts: Callable[[str], bool] = (
            is_hex_fingerprint if target.capabilities.hex_fingerprints else (lambda member: True)
        )

    def _default_writer(self) -> type[Writer]:
        return BitsWriter if self.bulk and self.target.scaling is None else ScriptWriter

    @property
    def params(self) -> BloomParams:
        params: BloomParams = self.target.params
        return params

    # -- checks -------------------------------------------------------------------------

    def plan(self) -> Plan:
        """Check everything and describe the migration; writes nothing."""
        members = self.set.check()
        source_memory = self.set.memory()
        try:
            exists = self.target.verify()
            if not exists and self.bulk:
                self._size_first_layer(members)
        except DedupError as exc:
            raise TargetError(f"Target refused: {exc}") from exc
        if not self.bulk:
            return self._written_plan(members, source_memory, exists)
        # Where the bits go (a time bucket's label, or "") and what is there already.
        bucket, already = self.target.bulk_fill()
        # Members already in the target (a resumed or repeated run) add nothing:
        # estimate their share from a sample so that they are not counted twice.
        new_members = self._new_members(members) if exists and members else members
        p = self.params
        resulting = p.designed_rate(already + new_members)
        capacity = p.capacity
        if self.target.scaling is not None:
            # A scalable target grows: its capacity is that of every layer it may add.
            capacity = sum(layer.capacity for layer in self.target.layers)
            resulting = self.target.error_rate if already + new_members <= capacity else 1.0
        return self._plan(
            members,
            source_memory,
            exists,
            capacity=capacity,
            error_rate=self.target.error_rate,
            bits=p.total_bits,
            hashes=p.hashes,
            blocks=p.blocks,
            target_memory=p.memory_bytes,
            items_already=already,
            resulting_error_rate=resulting,
            new_members=new_members,
            bucket=bucket,
            # Written through the script (an existing scalable target): layers may grow.
            layers=len(self.target.layers) if self.writer_class is ScriptWriter else 0,
        )

    def _plan(self, members: int, source_memory: int, exists: bool, **target: Any) -> Plan:
        return Plan(
            source=self.source,
            target=self.target.key,
            backend=self.target.name,
            members=members,
            source_memory=source_memory,
            target_exists=exists,
            **target,
        )

    def _written_plan(self, members: int, source_memory: int, exists: bool) -> Plan:
        """The plan for a target written through its own check-and-add, from what it says
        it holds (``holding()``): an exact one (hash, compact: no false positives; each
        fingerprint stays seen for the target's expiry from the migration on), or the
        server's own Bloom filters (BF.INSERT: a NONSCALING filter has a capacity to
        check, a scalable one grows; what an existing one lacks is estimated)."""
        held = self.target.holding()
        already = held.fingerprints if exists else 0.0
        rate_at = held.rate_at
        new_members = self._new_members(members) if exists else members
        per = held.bytes_per_fingerprint
        # Allocated (the server's Bloom filters), or what the target was measured to take a
        # fingerprint (buckets: docs/backends.md), or, where neither is known, the set's.
        after = already + new_members  # (a rerun's members are in ``already``: not twice)
        memory = held.memory_bytes or (round(per * after) if per else source_memory)
        caps = self.target.capabilities
        return self._plan(
            members,
            source_memory,
            exists,
            capacity=held.capacity,
            error_rate=held.error_rate,
            bits=0,
            hashes=0,
            blocks=held.keys,
            target_memory=memory,
            items_already=already,
            resulting_error_rate=rate_at(already + new_members) if rate_at is not None else 0.0,
            new_members=new_members,
            expire=self.target.expire if caps.expiring_fingerprints else 0.0,
            server_filter=held.growth,
        )

    def _new_members(self, members: int) -> int:
        """About how many of the source's members the existing target lacks (from a
        sample), so that what a resumed or repeated run finds is not counted twice."""
        sample = [m for m in self.set.sample(2000) if self.accepts(m)]
        if not sample:
            return members
        found: list[bool] = self.target.contains_many(sample)
        present = sum(found) / len(sample)
        return round(members * (1 - present))

    def _size_first_layer(self, members: int) -> None:
        """A scalable target created by the migration gets a first layer that holds
        the whole set at the designed rate (or the configured one, if larger), with
        room for the deviation of the members per block: then the bulk path can put
        every member into the first layer, as the script would have."""
        scaling = self.target.scaling
        if scaling is None:
            return
        self.writer_class = LayeredBitsWriter
        blocks = self.params.blocks
        per_block = members / blocks
        needed = math.ceil(members + blocks * (6 * math.sqrt(per_block) + 1)) if members else 0
        if needed <= self.params.capacity:
            return
        first = scaling.first_layer(needed, self.target.error_rate, blocks)
        logger.info(
            "migrate-set-to-bloom: the scalable target's first layer is sized for the "
            "source's %s fingerprints: %s (configured: %s)",
            f"{members:,}",
            f"{needed:,}",
            f"{self.params.capacity:,}",
        )
        self.target.resize_first_layer(first)

    def check_capacity(self, plan: Plan) -> None:
        if not plan.capacity:  # the shards of layout 1 have no capacity to exceed
            return
        needed = plan.items_already + plan.new_members
        if needed <= plan.capacity or self.force:
            return
        already = (
            f" plus about {plan.items_already:,.0f} already in it" if plan.items_already else ""
        )
        what = f"The target is too small: {plan.new_members:,} new fingerprints{already}"
        if not plan.error_rate:  # buckets (compact, hash): exact, but out of their encoding
            new_key = " and a new --target key (a filter keeps its buckets)"
            raise TargetError(
                f"{what} exceed the {plan.capacity:,} its buckets are sized for "
                "(DEDUP_COMPACT_CAPACITY): answers stay exact, but the buckets would leave the "
                "server's compact encoding, up to 5x the memory. Set --capacity (or "
                f"DEDUP_COMPACT_CAPACITY) to at least {math.ceil(needed):,} plus the growth you "
                f"expect{new_key if plan.target_exists else ''}, or pass --force to migrate "
                "anyway."
            )
        raise TargetError(
            f"{what} exceed its capacity of {plan.capacity:,}; its false-positive rate would "
            f"reach about {plan.resulting_error_rate:.3g} instead of {plan.error_rate}. Raise "
            "DEDUP_BLOOM_CAPACITY (or --capacity) to at least the set's size plus the growth "
            "you expect, or pass --force to migrate anyway."
        )

    # -- the run ------------------------------------------------------------------------

    def run(self, *, resume: bool = False, delete_source: bool = False) -> Report:
        started = time.monotonic()
        plan = self.plan()
        self.check_capacity(plan)
        report = Report(plan, verify_mode=self.verify_mode)
        cursor = 0
        planned_first = 0
        scanned = False  # a resumed run whose scan had finished: verification is left
        # Names this run in the round tokens (see _merge); a resumed run keeps it.
        run_id = uuid.uuid4().hex[:12]
        if resume:
            state = read_hash(self.server, self.state_key)
            if state and state.get("source") == self.source:
                cursor = int(state.get("cursor", 0))
                run_id = state.get("run", run_id)
                planned_first = int(state.get("capacity", 0) or 0)
                resumed = WRITERS.get(state.get("mode", ""))
                if resumed is not LayeredBitsWriter:
                    resumed = self._default_writer()
                self.writer_class = resumed
                report.migrated = report.moved_before = int(state.get("migrated", 0))
                scanned = state.get("scanned") == "1"
                report.resumed = cursor != 0 or scanned
            elif state:
                raise MigrationError(
                    f"{self.state_key!r} records a migration from {state.get('source')!r}, not "
                    f"{self.source!r}; run without --resume to start this one from the beginning"
                )
        planned = planned_first or (self.params.capacity if self.bulk else 0)
        self.target.open()  # creates the parameter record and allocates bitmaps
        if self.writer_class is LayeredBitsWriter and self.target.params.capacity != planned:
            # A crawler created the scalable filter between the plan and now (or
            # recreated it before --resume): its first layer cannot take the whole
            # set. Write through the filter's script instead, which adds layers.
            logger.warning(
                "migrate-set-to-bloom: the scalable filter at %r was created meanwhile with "
                "a first layer for %s fingerprints (planned: %s); writing through its "
                "script, which adds layers as needed",
                self.target.key,
                f"{self.target.params.capacity:,}",
                f"{planned:,}",
            )
            self.writer_class = ScriptWriter
        if self.bulk:  # leftovers of an interrupted bulk run: a round is uploaded whole
            BitsWriter.delete_temporaries(self.target)
        writer = self.writer = self.writer_class(
            self.target,
            self.set,
            round_size=self.round_size,
            accepts=self.accepts,
            progress=self.progress,
        )
        self.server.hset(
            self.state_key,
            mapping={
                "source": self.source,
                "cursor": cursor,
                "mode": writer.mode,
                "run": run_id,
                "capacity": planned,
            },
        )
        if not resume:
            self.server.hset(self.state_key, "migrated", 0)
            self.server.hdel(self.state_key, "scanned")
        # The sample is drawn before the scan: members that were in the set when it began
        # are read by it (SSCAN's guarantee), members crawlers add meanwhile may not be.
        self._sample = self.set.sample(self.sample) if self.verify_mode == "sample" else []
        first = not scanned
        while first or cursor != 0:
            first = False
            cursor, read = writer.round(cursor, report, f"{run_id}:{cursor}")
            report.rounds += 1
            report.migrated += read
            self.server.hset(
                self.state_key, mapping={"cursor": cursor, "migrated": report.migrated}
            )
        self.server.hset(self.state_key, "scanned", 1)  # a --resume after this verifies only
        report.seconds = time.monotonic() - started
        self._verify(report)
        report.target_memory = self.target.info().memory_bytes  # (MEMORY USAGE: measured)
        self.server.unlink(self.state_key)
        if delete_source:
            self._delete_migrated(report)
        return report

    def _delete_migrated(self, report: Report) -> None:
        """Remove from the source only members the target is checked to hold now.

        Members skipped (not hex digests) and members crawlers added to the set
        while the migration ran, which it did not read, stay in the set; when none
        is left the set is gone (Redis deletes an empty set)."""
        before = self.set.memory()
        for _, batch in self.set.scan(0):
            members = [as_str(m) for m in batch]
            good = [m for m in members if self.accepts(m)]
            found = self.target.contains_many(good)
            report.source_removed += self.set.remove([m for m, ok in zip(good, found) if ok])
        report.source_kept = self.set.size()
        report.source_deleted = report.source_kept == 0
        report.memory_freed = before - self.set.memory()

    # -- verification -------------------------------------------------------------------

    def _verify(self, report: Report) -> None:
        if self.verify_mode == "all":
            assert self.writer is not None
            missing, checked = self.writer.verify_all(report)
        else:
            skipped = set(report.skipped)
            sample = [m for m in self._sample if m not in skipped and self.accepts(m)]
            found = self.target.contains_many(sample)
            missing = [fp for fp, ok in zip(sample, found) if not ok]
            checked = len(sample)
        report.verified = checked
        if missing:
            raise VerificationError(
                f"Verification failed: {len(missing):,} of {checked:,} source fingerprints are not "
                f"in the target, e.g. {missing[:3]!r}. The source was left as it is."
            )
