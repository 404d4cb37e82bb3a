"""Convert a scrapy-redis fingerprint set into the bits of a Bloom filter.

How it runs (:meth:`SetToBloom.run`):

1. Checks, before anything is written: the source exists and is a set; the
   target holds no key of another type and, if it exists, was built with the
   same parameters; the source fits the target's capacity (else refused, unless
   ``force``, with the false-positive rate it would reach).
2. Rounds: SSCAN reads up to ``round_size`` members (a reader thread keeps the
   socket busy while the main thread computes), numpy computes their bit
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
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Union

from scrapy_dedup_suite import scripts
from scrapy_dedup_suite.backends import BloomBackend, WindowedBloomBackend
from scrapy_dedup_suite.backends.base import BULK_TARGET, as_str, chunks, migration_state_key
from scrapy_dedup_suite.backends.bloom import block_prefix
from scrapy_dedup_suite.bloom_math import SCHEME_PRIME, BloomParams, is_hex_fingerprint
from scrapy_dedup_suite.exceptions import DedupError

logger = logging.getLogger(__name__)

#: Bytes per SETRANGE when uploading a round's bitmap (each call stays short).
UPLOAD_CHUNK = 4 << 20


class MigrationError(DedupError):
    """The migration was refused or failed; ``exit_code`` says which way."""

    exit_code = 1


class SourceError(MigrationError):
    exit_code = 3


class TargetError(MigrationError):
    exit_code = 4


class VerificationError(MigrationError):
    exit_code = 5


Target = Union[BloomBackend, WindowedBloomBackend]


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

    def describe(self) -> str:
        where = f" (current bucket {self.bucket})" if self.bucket else ""
        existing = (
            f"exists, holds about {self.items_already:,.0f} fingerprints"
            if self.target_exists
            else "will be created"
        )
        return "\n".join(
            [
                f"source  {self.source!r}: a set of {self.members:,} fingerprints, "
                f"about {_mb(self.source_memory)} of Redis memory",
                f"target  {self.target!r}{where}: {self.backend} filter, {existing}",
                f"        capacity {self.capacity:,} at error rate {self.error_rate}: "
                f"m = {self.bits:,} bits in {self.blocks} block(s), k = {self.hashes}, "
                f"{_mb(self.target_memory)}",
                f"after   about {self.items_already + self.new_members:,.0f} fingerprints, "
                f"false-positive rate about {self.resulting_error_rate:.3g}",
                self._how(),
            ]
        )

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

    @property
    def rate(self) -> float:
        return self.migrated / self.seconds if self.seconds else 0.0

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

    def summary(self) -> str:
        lines = [
            f"migrated {self.migrated:,} fingerprints from {self.plan.source!r} to "
            f"{self.plan.target!r} in {self.seconds:.1f} s ({self.rate:,.0f}/s, "
            f"{self.rounds} round(s){', resumed' if self.resumed else ''})",
            f"verified {self.verified:,} source members ({self.verify_mode}): all found",
            f"target memory {_mb(self.plan.target_memory)}; source " + self._source_fate(),
        ]
        if self.skipped:
            lines.append(
                f"skipped {len(self.skipped)} member(s) that are not hex fingerprints the Bloom "
                f"backends can hash, e.g. {self.skipped[:3]!r}"
            )
        return "\n".join(lines)


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


class Progress:
    """A progress bar on a terminal, a log line every few seconds elsewhere."""

    def __init__(self, stream: Any = None, every: float = 5.0) -> None:
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
        else:
            logger.info("migrate-set-to-bloom: %s", text)


class SetToBloom:
    """Migrate the set at ``source`` into ``target`` (a Bloom backend, not opened yet)."""

    def __init__(
        self,
        target: Target,
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
        if BULK_TARGET not in target.capabilities:
            raise TargetError(
                f"The {target.name} backend cannot take a set's fingerprints as Bloom bits; "
                "choose a Bloom target (--backend bloom or windowed-bloom)"
            )
        self.target = target
        self.server = target.server
        self.source = source
        self.batch = batch
        self.round_size = max(round_size, batch)
        self.force = force
        self.verify_mode = verify
        self.sample = sample
        self.progress = progress
        self.state_key = migration_state_key(target.key)
        # A scalable target that this migration creates is written by the bulk path
        # into its first layer (sized for the set); an existing one through its script.
        self.bulk_layered = False

    @property
    def params(self) -> BloomParams:
        return self.target.params

    # -- checks -------------------------------------------------------------------------

    def plan(self) -> Plan:
        """Check everything and describe the migration; writes nothing."""
        kind = as_str(self.server.type(self.source))
        if kind == "none":
            raise SourceError(
                f"Source {self.source!r} does not exist. Give the set scrapy-redis wrote "
                "(--source KEY, or --spider NAME for %(spider)s:dupefilter)."
            )
        if kind != "set":
            raise SourceError(
                f"Source {self.source!r} holds a {kind}, not a set of fingerprints; nothing was "
                "written. Name the scrapy-redis fingerprint set with --source."
            )
        members = int(self.server.scard(self.source))
        source_memory = int(self.server.memory_usage(self.source) or 0)
        try:
            exists = self.target.verify()
            if not exists:
                self._size_first_layer(members)
        except DedupError as exc:
            raise TargetError(f"Target refused: {exc}") from exc
        # Where the bits go (a time bucket's label, or "") and what is there already.
        bucket, already = self.target.bulk_fill()
        # Members already in the target (a resumed or repeated run) add nothing:
        # estimate their share from a sample so that they are not counted twice.
        new_members = members
        if exists and members:
            sample = [as_str(m) for m in self.server.srandmember(self.source, 2000)]
            sample = [m for m in sample if is_hex_fingerprint(m)]
            if sample:
                present = sum(self.target.contains_many(sample)) / len(sample)
                new_members = round(members * (1 - present))
        p = self.params
        resulting = p.designed_rate(already + new_members)
        capacity = p.capacity
        if self.target.scaling is not None:
            # A scalable target grows: its capacity is that of every layer it may add.
            capacity = sum(layer.capacity for layer in self.target.layers)
            resulting = self.target.error_rate if already + new_members <= capacity else 1.0
        plan = Plan(
            source=self.source,
            target=self.target.key,
            backend=self.target.name,
            members=members,
            source_memory=source_memory,
            capacity=capacity,
            error_rate=self.target.error_rate,
            bits=p.total_bits,
            hashes=p.hashes,
            blocks=p.blocks,
            target_memory=p.memory_bytes,
            target_exists=exists,
            items_already=already,
            resulting_error_rate=resulting,
            new_members=new_members,
            bucket=bucket,
            # Written through the script (an existing scalable target): layers may grow.
            layers=0 if self.bulk_layered else len(self.target.layers),
        )
        return plan

    def _size_first_layer(self, members: int) -> None:
        """A scalable target created by the migration gets a first layer that holds
        the whole set at the designed rate (or the configured one, if larger), with
        room for the deviation of the members per block: then the bulk path can put
        every member into the first layer, as the script would have."""
        scaling = self.target.scaling
        if scaling is None:
            return
        self.bulk_layered = True
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
        if plan.items_already + plan.new_members > plan.capacity and not self.force:
            raise TargetError(
                f"The target is too small: {plan.new_members:,} new fingerprints"
                + (
                    f" plus about {plan.items_already:,.0f} already in it"
                    if plan.items_already
                    else ""
                )
                + f" exceed its capacity of {plan.capacity:,}; its false-positive rate would reach "
                f"about {plan.resulting_error_rate:.3g} instead of {plan.error_rate}. Raise "
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
        # Names this run in the round tokens (see _merge); a resumed run keeps it.
        run_id = uuid.uuid4().hex[:12]
        if resume:
            state = {as_str(k): as_str(v) for k, v in self.server.hgetall(self.state_key).items()}
            if state and state.get("source") == self.source:
                cursor = int(state.get("cursor", 0))
                run_id = state.get("run", run_id)
                planned_first = int(state.get("capacity", 0) or 0)
                self.bulk_layered = state.get("mode") == "bulk-layered"
                report.migrated = int(state.get("migrated", 0))
                report.resumed = cursor != 0
            elif state:
                raise MigrationError(
                    f"{self.state_key!r} records a migration from {state.get('source')!r}, not "
                    f"{self.source!r}; run without --resume to start this one from the beginning"
                )
        planned = planned_first or self.target.params.capacity
        self.target.open()  # creates the parameter record and allocates bitmaps
        if self.bulk_layered and self.target.params.capacity != planned:
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
            self.bulk_layered = False
        self._delete_temporaries()
        mode = "bulk-layered" if self.bulk_layered else "bulk"
        if self.target.scaling is not None and not self.bulk_layered:
            mode = "script"
        self.server.hset(
            self.state_key,
            mapping={
                "source": self.source,
                "cursor": cursor,
                "mode": mode,
                "run": run_id,
                "capacity": planned,
            },
        )
        if not resume:
            self.server.hset(self.state_key, "migrated", 0)
        first = True
        while first or cursor != 0:
            first = False
            if mode == "script":
                # Through the backend's own script: layers count and grow exactly as
                # they do for a crawler.
                cursor, read = self._round_layered(cursor, report)
            else:
                token = f"{run_id}:{cursor}"
                cursor, read, maps, counts = self._round(cursor, report)
                self._merge(maps, counts if mode == "bulk-layered" else None, token)
            report.rounds += 1
            report.migrated += read
            self.server.hset(
                self.state_key, mapping={"cursor": cursor, "migrated": report.migrated}
            )
        report.seconds = time.monotonic() - started
        self._verify(report)
        self.server.unlink(self.state_key)
        if delete_source:
            self._delete_migrated(report)
        return report

    def _delete_migrated(self, report: Report) -> None:
        """Remove from the source only members the target is checked to hold now.

        Members skipped (not hex digests) and members crawlers added to the set
        while the migration ran, which it did not read, stay in the set; when none
        is left the set is gone (Redis deletes an empty set)."""
        before = int(self.server.memory_usage(self.source) or 0)
        for _, batch in self._scan(0):
            members = [as_str(m) for m in batch]
            good = [m for m in members if is_hex_fingerprint(m)]
            found = self.target.contains_many(good)
            held = [m for m, ok in zip(good, found) if ok]
            for part in chunks(held, self.batch):
                report.source_removed += int(self.server.srem(self.source, *part))
        report.source_kept = int(self.server.scard(self.source))
        report.source_deleted = report.source_kept == 0
        report.memory_freed = before - int(self.server.memory_usage(self.source) or 0)

    def _scan(self, cursor: int, limit: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
        """SSCAN batches from ``cursor`` until the end or ``limit`` members, read
        ahead by a thread (the socket waits release the GIL) while we compute."""
        batches: queue.Queue[Any] = queue.Queue(maxsize=8)
        stop = threading.Event()

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    batches.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def reader() -> None:
            c, read = cursor, 0
            try:
                while True:
                    c, members = self.server.sscan(self.source, c, count=self.batch)
                    c = int(c)
                    read += len(members)
                    if not put((c, members)) or c == 0 or (limit and read >= limit):
                        break
            except Exception as exc:  # handed to the consumer
                put(exc)
            put(None)

        thread = threading.Thread(target=reader, name="migrate-sscan", daemon=True)
        thread.start()
        try:
            while True:
                item = batches.get()
                if item is None:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()

    def _round(
        self, cursor: int, report: Report
    ) -> tuple[int, int, dict[int, Any], dict[int, int]]:
        """Read up to ``round_size`` members from ``cursor`` into local bitmaps.

        Each SSCAN batch is hashed as it arrives while the reader thread
        fetches the next one. Returns (next cursor, members read, bitmaps).
        """
        import numpy as np

        p = self.params
        maps: dict[int, Any] = {}
        counts: dict[int, int] = {}
        read = 0
        for next_cursor, batch in self._scan(cursor, self.round_size):
            cursor = next_cursor
            read += len(batch)
            for block, offsets in positions(batch, p, report.skipped):
                counts[block] = counts.get(block, 0) + offsets.shape[0]
                bitmap = maps.get(block)
                if bitmap is None:
                    bitmap = maps[block] = np.zeros((p.block_bits + 7) // 8, np.uint8)
                flat = offsets.ravel()
                masks = np.uint8(0x80) >> (flat & np.uint64(7)).astype(np.uint8)
                np.bitwise_or.at(bitmap, flat >> np.uint64(3), masks)
            if self.progress is not None:
                self.progress(report.migrated + read, report.plan.members)
        return cursor, read, maps, counts

    def _round_layered(self, cursor: int, report: Report) -> tuple[int, int]:
        """Read up to ``round_size`` members from ``cursor`` and add them with the
        scalable filter's script, pipelined. Returns (next cursor, members read)."""
        read = 0
        for next_cursor, batch in self._scan(cursor, self.round_size):
            cursor = next_cursor
            read += len(batch)
            members = [as_str(m) for m in batch]
            good = [m for m in members if is_hex_fingerprint(m)]
            report.skipped += [m for m in members if not is_hex_fingerprint(m)]
            self.target.add_many(good)
            if self.progress is not None:
                self.progress(report.migrated + read, report.plan.members)
        return cursor, read

    def _tmp_key(self, block: int) -> str:
        # In the block's hash tag: the merge is one call on one cluster slot.
        return f"{block_prefix(self.target.key, block)}:migrating"

    def _delete_temporaries(self) -> None:
        for block in range(self.params.blocks):
            scripts.DELETE_IF_TYPE(self.server, [self._tmp_key(block)], ["string"])

    def _merge(
        self, maps: dict[int, Any], counts: dict[int, int] | None = None, token: str = ""
    ) -> None:
        """OR each block's bitmap into the target; ``counts``: members per block to add
        to the count of a scalable target's first layer, in the same call, once per
        ``token`` (the round): a round merged again after a resume adds no count."""
        for block, bitmap in maps.items():
            key, ttl = self.target.bulk_target(block)
            tmp = self._tmp_key(block)
            data = bitmap.tobytes()
            # Allocate the temporary string at full size first: no piecemeal growth.
            pipe = self.server.pipeline(transaction=False)
            pipe.setrange(tmp, len(data) - 1, b"\0")
            for offset in range(0, len(data), UPLOAD_CHUNK):
                chunk = data[offset : offset + UPLOAD_CHUNK]
                if chunk.count(0) != len(chunk):
                    pipe.setrange(tmp, offset, chunk)
            pipe.execute()
            keys = [self.target.block_stamp(block), key, tmp]
            args = [self.target.stamp, self.params.block_bits, ttl]
            if counts is not None:
                keys.append(f"{key}:layers")
                args += [counts.get(block, 0), token]
            scripts.MERGE_OR(self.server, keys, args)

    # -- verification -------------------------------------------------------------------

    def _verify(self, report: Report) -> None:
        if self.verify_mode == "all" and self.target.scaling is not None and not self.bulk_layered:
            missing, checked = self._verify_all_by_script(report)
        elif self.verify_mode == "all":
            missing, checked = self._verify_all(report)
        else:
            sample = [
                as_str(m)
                for m in self.server.srandmember(self.source, self.sample)
                if as_str(m) not in report.skipped
            ]
            sample = [m for m in sample if is_hex_fingerprint(m)]
            found = self.target.contains_many(sample)
            missing = [fp for fp, ok in zip(sample, found) if not ok]
            checked = len(sample)
        report.verified = checked
        if missing:
            raise VerificationError(
                f"Verification failed: {len(missing):,} of {checked:,} source fingerprints are not "
                f"in the target, e.g. {missing[:3]!r}. The source was left as it is."
            )

    def _verify_all_by_script(self, report: Report) -> tuple[list[str], int]:
        """Every member checked with the target's own membership script."""
        missing: list[str] = []
        checked = 0
        for _, batch in self._scan(0):
            members = [m for m in (as_str(x) for x in batch) if is_hex_fingerprint(m)]
            found = self.target.contains_many(members)
            missing += [m for m, ok in zip(members, found) if not ok]
            checked += len(members)
        return missing, checked

    def _verify_all(self, report: Report) -> tuple[list[str], int]:
        """Every member checked against the target's bits, read back from Redis."""
        import numpy as np

        p = self.params
        stored = {}
        for block in range(p.blocks):
            key, _ = self.target.bulk_target(block)
            size = (p.block_bits + 7) // 8
            data = bytearray()
            for offset in range(0, size, UPLOAD_CHUNK):
                data += self.server.getrange(key, offset, min(size, offset + UPLOAD_CHUNK) - 1)
            stored[block] = np.frombuffer(bytes(data.ljust(size, b"\0")), np.uint8)
        missing: list[str] = []
        checked = 0
        for _, members in self._scan(0):
            skipped: list[str] = []
            for block, offsets, chosen in positions(members, p, skipped, with_members=True):
                bits = stored[block][offsets >> np.uint64(3)] & (
                    np.uint8(0x80) >> (offsets & np.uint64(7)).astype(np.uint8)
                )
                bad = ~(bits != 0).all(axis=1)
                missing += [as_str(m) for m, b in zip(chosen, bad) if b]
                checked += len(chosen)
        return missing, checked


def positions(
    members: list[bytes], params: BloomParams, skipped: list[str], with_members: bool = False
) -> Iterator[Any]:
    """Vectorised ``BloomParams.positions``: yields (block, offsets[n, k]) per block.

    Members that are not hex digests of >= 16 bytes are appended to ``skipped``.
    The arithmetic is the scheme's, in uint64 (all values < 2^53).
    """
    import numpy as np

    if members and not isinstance(members[0], bytes):  # a client with decode_responses
        members = [m.encode() for m in members]
    lengths = set(map(len, members))
    by_length: dict[int, list[bytes]] = {}
    if len(lengths) == 1:
        by_length[lengths.pop()] = members
    else:
        for m in members:
            by_length.setdefault(len(m), []).append(m)
    m_bits = np.uint64(params.block_bits)
    steps = np.arange(params.hashes, dtype=np.uint64)
    prime = params.scheme == SCHEME_PRIME  # layers of scalable filters
    for length, group in by_length.items():
        try:
            if length < 32 or length % 2:
                raise ValueError("not an even number of hex digits")
            # bytes.fromhex checks every character of every member at once.
            digest = np.frombuffer(bytes.fromhex(b"".join(group).decode("ascii")), np.uint8)
            digest = digest.reshape(len(group), length // 2)[:, :16]
        except (ValueError, UnicodeDecodeError):
            # Slow path: an odd length, or some member is not hex. The offsets
            # depend on the first 32 digits only.
            good = [g for g in group if is_hex_fingerprint(as_str(g))]
            skipped += [as_str(g) for g in group if not is_hex_fingerprint(as_str(g))]
            group = good
            if not group:
                continue
            digest = np.frombuffer(
                bytes.fromhex(b"".join(g[:32] for g in group).decode()), np.uint8
            )
            digest = digest.reshape(len(group), 16)
        h1 = _big_endian(digest, 0, 6)
        h2 = _big_endian(digest, 6, 12)
        step = np.uint64(1) + h2 % (m_bits - np.uint64(1)) if prime else h2 % m_bits
        offsets = (h1 % m_bits)[:, None] + step[:, None] * steps
        offsets %= m_bits
        if params.blocks == 1:
            yield (0, offsets, group) if with_members else (0, offsets)
            continue
        block = _big_endian(digest, 12, 16) % np.uint64(params.blocks)
        for b in np.unique(block):
            sel = block == b
            if with_members:
                yield int(b), offsets[sel], [g for g, s in zip(group, sel) if s]
            else:
                yield int(b), offsets[sel]


def _big_endian(digest: Any, start: int, stop: int) -> Any:
    import numpy as np

    out = np.zeros(digest.shape[0], np.uint64)
    for col in range(start, stop):
        out = (out << np.uint64(8)) | digest[:, col].astype(np.uint64)
    return out
