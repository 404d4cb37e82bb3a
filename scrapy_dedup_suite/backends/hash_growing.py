"""``hash`` with nothing to size: compact's buckets that split as the filter grows
(:mod:`.growing`), each field's value its expiry; chosen by DEDUP_COMPACT_CAPACITY = 0.

A fingerprint's field and bucket are the growing compact filter's; its value is its
expiry in Unix seconds by the server's clock, rounded up (as in the sized buckets,
:mod:`.hash_buckets`), so a split moves each field with its expiry, and a fingerprint
whose expiry has passed is new (lua/grow_hash_add.lua).

A group splits by the fields it holds, not by all it was ever given: its level record
counts a field when it is created (a field written again once expired is not a new
one), and counts off the expired fields that a split leaves out and that the janitor
purges (lua/grow_hash_purge.lua, in the same call as it deletes them). So a crawl that
revisits its pages every DEDUP_EXPIRE keeps the buckets it had, where a count of
writes would split them without end. This is why the growing layout takes the
janitor's expiry only: the server's own field expiry (HPEXPIRE) removes fields without
a word to any script, and costs 24-25 B a fingerprint against 18 B.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import DedupConfigError, FilterMismatchError
from ..server import scripts
from ..settings.options import HashOptions
from ..settings.table import GROUPS, default
from .compact_growing import GrowingCompactBackend
from .expiry import (
    BUCKETS_LAYOUT,
    BY_SERVER,
    HASH_CAPABILITIES,
    Expiring,
    ExpiringHash,
    Expiry,
    expiry_sample,
)
from .groups import groups_for
from .growing import FieldNames, Growing, bucket_of, h_of
from .growing_report import GrowingBuckets
from .meta import MetaSpec
from .purge import OnScan, PurgeStep, purge_buckets
from .reports import Contents, FilterInfo, HashFields, Holding

logger = logging.getLogger(__name__)

#: Redis memory a fingerprint takes in full buckets (an expiry is a 4-byte integer beside
#: its field: measured, docs/backends.md), for estimates made before any is written.
BYTES_PER_FINGERPRINT = 18.0
#: Buckets whose expiries ``dedup-info`` samples.
EXPIRY_SAMPLE = 32
#: Why a growing filter takes the janitor's expiry (said where a new one is made).
JANITOR_ONLY = (
    "buckets that split keep each fingerprint's expiry as its value, for the janitor to purge"
)


class ExpiringGrowing(Expiring, Growing):
    """The growing layout with each field's expiry as its value (Unix seconds, rounded
    up): lua/grow_hash_add.lua's header adds the unit, and a fingerprint's arguments
    its TTL."""

    add_script = scripts.GROW_HASH_ADD
    contains_script = scripts.GROW_HASH_CONTAINS
    unit_ms = 1000

    def header(self, context: Any, stamp: str) -> list[Any]:
        return [stamp, self.load, self.unit_ms]

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        group, field = self.locate(fingerprint)
        bucket = bucket_of(h_of(field), *self.known[group])
        return group + self.shards * bucket, [field, self.ttl_ms(expire)]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        keys, args = Growing.contains_call(self, fingerprint, context)
        return keys, [*args, self.unit_ms]


class GrowingHashBackend(ExpiringHash, GrowingCompactBackend):
    """hash's growing layout (see the module). Built by ``from_settings`` (the sized
    buckets' :meth:`~.hash_buckets.HashBucketsBackend.from_options`) when
    DEDUP_COMPACT_CAPACITY is 0, or the filter stored at the key grows."""

    capabilities = HASH_CAPABILITIES
    layout_class: type[Growing] = ExpiringGrowing
    layout: ExpiringGrowing

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        expire: float = default("DEDUP_EXPIRE"),
        shards: int = GROUPS,
        field_expiry: bool | None = None,
        load: int | None = None,
        grouped_by: int | None = None,
    ) -> None:
        """``field_expiry``: None or False (True is refused: see the module); ``load``
        and ``grouped_by``: see :class:`~.compact_growing.GrowingCompactBackend`."""
        if field_expiry:
            raise DedupConfigError(
                "DEDUP_HASH_FIELD_EXPIRY = True asks the server to expire the fields, and the "
                f"hash filter at {key!r} has buckets that split as it grows "
                "(DEDUP_COMPACT_CAPACITY = 0), whose fields keep their expiry as their value "
                "for the janitor to purge: remove DEDUP_HASH_FIELD_EXPIRY (or set it to False); "
                "for the server's expiry, a new filter with sized buckets: "
                "DEDUP_COMPACT_CAPACITY = 10000000 (the crawl's size) at a key that holds none"
            )
        GrowingCompactBackend.__init__(
            self, server, key, shards=shards, load=load, grouped_by=grouped_by
        )
        self._init_expiry(expire, field_expiry)

    @classmethod
    def from_options(cls, server: Any, key: str, options: HashOptions) -> GrowingHashBackend:
        return cls(
            server,
            key,
            expire=options.expire,
            shards=groups_for(server, options.shards, None, growing=True),
            field_expiry=options.field_expiry,
        )

    def options(self) -> HashOptions:
        return HashOptions(self.expire, self.shards, self.field_expiry, 0)

    def fed_fields(self) -> GrowingCompactBackend:
        """This filter fed fields named by :func:`.growing.field_name`, each with its own
        expiry (a conversion's copy)."""
        return GrowingHashFields(
            self.server,
            self.key,
            expire=self.expire,
            shards=self.shards,
            load=self.load,
            grouped_by=self.grouped_by,
        )

    def server_expiry_unsuited(self) -> str | None:
        return JANITOR_ONLY

    def resolve_expiry(self) -> Expiry:
        """The janitor's; a record that says the server's (not written by this
        package) is refused."""
        chosen = super().resolve_expiry()
        if chosen is BY_SERVER:
            raise FilterMismatchError(
                f"The hash filter at {self.key!r} grows (no capacity) and its record says the "
                "server expires its fields, which that layout never does: restore its record "
                f"({self.meta_key}), or start a new filter at another SCHEDULER_DUPEFILTER_KEY"
            )
        return chosen

    def meta_spec(self) -> MetaSpec:
        spec = super().meta_spec()
        way = self.expiry.meta
        return MetaSpec(
            spec.key, {**spec.fields, "layout": BUCKETS_LAYOUT, **way}, (*spec.compare, *way)
        )

    # -- the janitor's purge -------------------------------------------------------------

    def purge_units(self) -> list[str]:
        return self.bucket_groups()

    def purge_step(
        self, unit: int, cursor: int, batch: int, on_scan: OnScan | None = None
    ) -> PurgeStep:
        """Group ``unit``'s buckets from its ``cursor``-th on, as many as its level record
        says it has now (a split meanwhile moves fields within the group: a pass reads
        the buckets it names)."""
        buckets = self.levels()[unit].buckets
        count = min(batch, len(range(cursor, buckets)))
        keys = [self.layout.bucket_key(unit, b) for b in range(cursor, cursor + count)]
        if not keys:
            return PurgeStep(0)
        record = self.layout.level_keys[unit]
        done, step = purge_buckets(self.server, keys, batch, self.expiry_unit_ms, on_scan, record)
        cursor += done
        step.cursor = cursor if cursor < buckets else 0
        return step

    def purge_remaining(self) -> int:
        return self.count()

    # -- reports -----------------------------------------------------------------------

    def holding(self) -> Holding:
        return Holding(float(self.count()), self.shards, 0, BYTES_PER_FINGERPRINT)

    def expiry_keys(self, levels: Sequence[tuple[int, int, int]]) -> list[str]:
        """Up to EXPIRY_SAMPLE buckets, at random, of those ``levels`` say exist."""
        every = [(g, b) for g, (_, _, n) in enumerate(levels) for b in range(n)]
        picked = random.sample(every, min(EXPIRY_SAMPLE, len(every)))
        return [self.layout.bucket_key(g, b) for g, b in picked]

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        info = self.info() if info is None else info
        (buckets,) = GrowingCompactBackend.contents(self, info)
        assert isinstance(buckets, GrowingBuckets)
        keys = self.expiry_keys(buckets.levels)
        sample = expiry_sample(self.server, keys, self.expiry_unit_ms)
        held = HashFields(
            info["fields"], self.shards, self.expiry.name, self.expire, sample, counted=True
        )
        return [buckets, held]

    def info(self) -> FilterInfo:
        info = GrowingCompactBackend.info(self)
        info.details.update(expire=self.expire, expired_by=self.expiry.name)
        return info


class ExpiringFieldNames(FieldNames, ExpiringGrowing):
    """:class:`ExpiringGrowing` fed fields by name (:class:`.growing.FieldNames`)."""


class GrowingHashFields(GrowingHashBackend):
    """A growing hash filter fed fields named by :func:`.growing.field_name`: what a
    conversion copies from sized buckets."""

    layout_class = ExpiringFieldNames
