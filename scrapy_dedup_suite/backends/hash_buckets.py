"""``hash`` in the bucket layout: exact dedup with an expiry per fingerprint, about 18
bytes a fingerprint (the shards layout, hash.py, takes about 105).

The layout is the ``compact`` backend's (compact.py: SHA1 of the fingerprint, 4 bytes
choose the bucket, 8 bytes are the field, buckets sized from DEDUP_COMPACT_CAPACITY and
the server's ``hash-max-listpack-entries``); the value is the fingerprint's expiry:

- **the janitor's expiry**: the value is the expiry in Unix seconds by the server's
  clock, rounded up (a 4-byte integer in the listpack until 2038), so a fingerprint
  stays seen for DEDUP_EXPIRE and at most a second more; the janitor reads buckets
  whole and deletes their expired fields (lua/bucket_purge.lua);
- **the server's hash-field expiry** (HPEXPIRE), where the server keeps a hash with
  field TTLs in a listpack (Redis >= 7.4: ``listpackex``, about 24 bytes a
  fingerprint). Valkey 9 turns such a hash into a hashtable (about 60 bytes), so there
  a new filter takes the janitor's way, which a probe at creation decides
  (:meth:`HashBucketsBackend.server_expiry_unsuited`). DEDUP_HASH_FIELD_EXPIRY chooses.

Each check-and-add is one script call (hash_add.lua or hash_field_add.lua, as for the
shards); a batch is one call per slot.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from ..server.cluster import node_of
from ..settings.options import HashOptions
from ..settings.table import GROUPS, default
from .compact import CompactBackend
from .expiry import (
    BUCKETS_LAYOUT,
    BY_JANITOR,
    BY_SERVER,
    FIELD_TTL_HASHTABLE_BYTES,
    HASH,
    HASH_CAPABILITIES,
    JANITOR_BUCKET_BYTES,
    Expiring,
    ExpiringHash,
    expiry_sample,
)
from .groups import groups_for, stored_shape
from .hash_growing import GrowingHashBackend
from .keys import BATCH, TTL_PROBE, as_str, keys_held, prefix_pattern, shard_key, slot_sibling
from .layout import Buckets
from .meta import MetaSpec
from .purge import OnScan, PurgeStep, purge_buckets
from .reports import CompactBuckets, Contents, FilterInfo, HashFields

logger = logging.getLogger(__name__)

#: Redis memory a fingerprint takes, by who expires it (measured: docs/backends.md, the hash
#: backend's figures), for estimates made before any is written.
BUCKET_BYTES_BY_EXPIRY = {"janitor": 18.0, "server": 25.0}
#: Buckets whose expiries ``dedup-info`` samples.
EXPIRY_SAMPLE = 32


class ExpiringBuckets(Expiring, Buckets):
    """compact's buckets, each field's value its expiry (Unix seconds, rounded up) or
    nothing (the server's field TTL)."""

    unit_ms = 1000

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        bucket, field = self.locate(fingerprint)
        return bucket, [field, self.ttl_ms(expire)]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        bucket, field = self.locate(fingerprint)
        return [self.bucket_key(bucket)], [field, self.unit_ms]


class HashBucketsBackend(ExpiringHash, CompactBackend):
    layout_name = BUCKETS_LAYOUT
    layout: ExpiringBuckets
    capabilities = HASH_CAPABILITIES

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        expire: float = default("DEDUP_EXPIRE"),
        shards: int = GROUPS,
        capacity: int = default("DEDUP_COMPACT_CAPACITY"),
        field_expiry: bool | None = None,
        buckets: int | None = None,
    ) -> None:
        """``field_expiry``: see :meth:`ExpiringHash._init_expiry`; ``buckets``: see
        :class:`CompactBackend`."""
        CompactBackend.__init__(
            self, server, key, capacity=capacity, shards=shards, buckets=buckets
        )
        self._init_expiry(expire, field_expiry)

    @classmethod
    def from_options(cls, server: Any, key: str, options: HashOptions) -> ExpiringHash:
        """Sized buckets, or (DEDUP_COMPACT_CAPACITY 0) buckets that split as the filter
        grows; a stored filter keeps its layout and (DEDUP_HASH_SHARDS unset) its groups,
        as compact's does (:meth:`~.compact.CompactBackend.from_settings`)."""
        capacity = options.capacity
        stored = stored_shape(server, key, options.shards, HASH) if server is not None else None
        if stored is not None and (stored.capacity == 0 or capacity == 0):
            capacity = stored.capacity
        shards = groups_for(server, options.shards, stored, capacity == 0)
        if capacity == 0:
            return GrowingHashBackend.from_options(server, key, replace(options, shards=shards))
        return cls(
            server,
            key,
            expire=options.expire,
            shards=shards,
            capacity=capacity,
            field_expiry=options.field_expiry,
        )

    def options(self) -> HashOptions:
        return HashOptions(self.expire, self.shards, self.field_expiry, self.capacity)

    def make_layout(self) -> ExpiringBuckets:
        return ExpiringBuckets(self.key, self.shards, self.resolve_buckets)

    def meta_spec(self) -> MetaSpec:
        spec = super().meta_spec()
        way = self.expiry.meta
        return MetaSpec(
            spec.key, {**spec.fields, "layout": BUCKETS_LAYOUT, **way}, (*spec.compare, *way)
        )

    def server_expiry_unsuited(self) -> str | None:
        """A probe hash with one field TTL in each group's slot: where the server keeps it
        as a hashtable (Valkey 9), field TTLs would take 3-4x the janitor's memory."""
        probes = [slot_sibling(shard_key(self.key, g), TTL_PROBE) for g in range(self.shards)]
        pipe = self.server.pipeline(transaction=False)
        for probe in probes:
            pipe.hset(probe, "f", "")
            pipe.execute_command("HPEXPIRE", probe, 60_000, "FIELDS", 1, "f")
            pipe.execute_command("OBJECT", "ENCODING", probe)
            pipe.delete(probe)
        answers = pipe.execute(raise_on_error=False)
        encodings = {as_str(e) for e in answers[2::4] if isinstance(e, (bytes, str))}
        if encodings <= {"listpackex"} and encodings:
            return None
        found = ", ".join(sorted(encodings)) or "unknown"
        return (
            f"the server keeps a hash whose fields have their own TTL as {found}, not a "
            "listpack (DEDUP_HASH_FIELD_EXPIRY = True chooses the server's expiry anyway)"
        )

    def outgrown_warning(self, sample: CompactBuckets) -> str | None:
        """Buckets whose fields the server expires, kept as hashtables while they hold
        fewer fields than the listpack limit: the field TTLs did it, not the capacity."""
        if self.expiry is BY_SERVER and sample.hashtables and not sample.past_capacity:
            return (
                f"the hash filter at {self.key!r} lets the server expire its fields, and "
                f"{sample.hashtables} of {sample.sampled} sampled buckets are hashtables "
                "although they hold fewer fields than the server's listpack limit: this server "
                "keeps hashes with field TTLs as hashtables (about "
                f"{FIELD_TTL_HASHTABLE_BYTES} B a fingerprint against {JANITOR_BUCKET_BYTES} B "
                "with the janitor's expiry). A larger DEDUP_COMPACT_CAPACITY does not help: "
                "a filter keeps its way. To use less, create a new one at another "
                "SCHEDULER_DUPEFILTER_KEY without DEDUP_HASH_FIELD_EXPIRY (its pages are new to "
                "it), or keep this one and budget the memory"
            )
        return super().outgrown_warning(sample)

    # -- the janitor's purge -------------------------------------------------------------------

    def purge_units(self) -> list[str]:
        return self.bucket_groups()

    def purge_step(
        self, unit: int, cursor: int, batch: int, on_scan: OnScan | None = None
    ) -> PurgeStep:
        """Group ``unit``'s buckets from its ``cursor``-th on (``unit + i * shards``);
        for a filter sized for more buckets than its server holds keys, the buckets SCAN
        finds (``cursor``: SCAN's), so that a pass costs what exists."""
        if self.buckets > keys_held(self.server):
            return self._purge_found(unit, cursor, batch, on_scan)
        first = unit + cursor * self.shards
        count = min(batch, BATCH, len(range(first, self.buckets, self.shards)))
        keys = [self.bucket_key(first + i * self.shards) for i in range(count)]
        if not keys:
            return PurgeStep(0)
        done, step = purge_buckets(self.server, keys, batch, self.expiry_unit_ms, on_scan)
        cursor += done
        step.cursor = cursor if unit + cursor * self.shards < self.buckets else 0
        return step

    def _purge_found(self, unit: int, cursor: int, batch: int, on_scan: OnScan | None) -> PurgeStep:
        """One SCAN of group ``unit``'s slot for its buckets, each of them purged."""
        client = node_of(self.server, self.stamp_keys[unit])
        pattern = prefix_pattern(self._prefixes[unit])
        after, found = client.scan(cursor, match=pattern, count=min(batch, BATCH))
        keys = [key for key in map(as_str, found) if self.bucket_of(key) is not None]
        step = PurgeStep(int(after))
        while keys:
            done, part = purge_buckets(self.server, keys, batch, self.expiry_unit_ms, on_scan)
            step.scanned += part.scanned
            step.removed += part.removed
            step.invalid += part.invalid
            step.call_ms += part.call_ms
            keys = keys[max(done, 1) :]
        return step

    def purge_remaining(self) -> int:
        return self.count()

    # -- reports ---------------------------------------------------------------------------

    def expected_bytes_per_fingerprint(self) -> float:
        """Measured (docs/backends.md): an expiry in seconds is a 4-byte integer beside the field;
        a field TTL (listpackex) costs more, about 24 B a fingerprint."""
        return BUCKET_BYTES_BY_EXPIRY[self.expiry.name]

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        info = self.info() if info is None else info
        buckets = CompactBuckets(**{f.name: info[f.name] for f in fields(CompactBuckets)})
        sample = None
        if self.expiry is BY_JANITOR:  # (the server's own expiry leaves no expiries to read)
            picked = random.sample(range(self.buckets), min(EXPIRY_SAMPLE, self.buckets))
            keys = [self.bucket_key(b) for b in picked]
            sample = expiry_sample(self.server, keys, self.expiry_unit_ms)
        fields_ = HashFields(
            info["fields"], self.shards, self.expiry.name, self.expire, sample, in_buckets=True
        )
        return [buckets, fields_]

    def info(self) -> FilterInfo:
        info = super().info()
        info.details.update(expire=self.expire, expired_by=self.expiry.name, layout=BUCKETS_LAYOUT)
        return info
