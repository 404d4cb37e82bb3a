"""``hash``: fingerprint -> expiry, exact; each fingerprint expires.

A request is seen iff its field exists and has not expired (by the Redis server's
clock); otherwise it is (re)written to expire in ``DEDUP_EXPIRE`` seconds, or
``request.meta["dedup_expire"]``. The check and the write are one Lua call. Who
expires the fields (the janitor, or the server's hash-field expiry) is expiry.py's.

The backend has two layouts, and a filter keeps the one its parameter record names:

- **buckets** (every filter created since the bucket layout exists, hash_buckets.py):
  8 bytes of the fingerprint's SHA1 in small listpack buckets, about 18 bytes a
  fingerprint;
- **shards** (layout 1, this module's :class:`HashBackend`): the whole fingerprint ->
  its expiry in Unix ms, in ``DEDUP_HASH_SHARDS`` hashes (``<key>:0`` ...
  ``<key>:<shards-1>``, by CRC32 of the fingerprint), about 105 bytes a fingerprint.

``from_settings`` of either class (what ``DEDUP_BACKEND = "hash"`` builds) reads which
layout is stored at the key and builds that one; a new filter gets buckets. The
parameter record lives in ``<key>:meta``, and each shard or group of buckets has a stamp
in its own slot (lua/stamp.lua).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..settings.options import HashOptions
from ..settings.table import GROUPS, check, default
from .expiry import (
    BY_JANITOR,
    HASH_CAPABILITIES,
    SHARDS_LAYOUT,
    Expiring,
    ExpiringHash,
    expiry_sample,
)
from .forget import remove
from .groups import groups_for
from .keys import META, meta_key, shard_key, slot_sibling, spread
from .meta import MetaSpec
from .purge import OnScan, PurgeStep, scan_fields
from .reports import Contents, FilterInfo, HashFields, Holding

logger = logging.getLogger(__name__)


class Shards(Expiring):
    """Layout 1: each fingerprint whole, a field of one of ``shards`` hashes chosen by
    its CRC32 (its value: its expiry in Unix ms); each shard with its stamp in its
    slot. A call's group is a shard."""

    unit_ms = 1

    def __init__(self, key: str, shards: int) -> None:
        self.shard_keys = [shard_key(key, i) for i in range(shards)]
        # Each shard's stamp (lua/stamp.lua), in the shard's cluster slot.
        self.stamp_keys = [slot_sibling(shard, META) for shard in self.shard_keys]
        self.shards = shards

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        return spread(fingerprint, self.shards), [fingerprint, self.ttl_ms(expire)]

    def keys(self, group: int, context: Any) -> list[str]:
        return [self.stamp_keys[group], self.shard_keys[group]]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        shard = self.shard_keys[spread(fingerprint, self.shards)]
        return [shard], [fingerprint, self.unit_ms]


class HashBackend(ExpiringHash):
    """The shards layout (layout 1); ``from_settings`` (ExpiringHash's) builds the
    layout the key holds."""

    layout_name = SHARDS_LAYOUT
    layout: Shards
    capabilities = HASH_CAPABILITIES
    spread_setting = "DEDUP_HASH_SHARDS"

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        expire: float = default("DEDUP_EXPIRE"),
        shards: int = GROUPS,
        field_expiry: bool | None = None,
    ) -> None:
        """``field_expiry``: see :meth:`ExpiringHash._init_expiry`."""
        super().__init__(server, key)
        self.shards = check("DEDUP_HASH_SHARDS", shards)
        self.meta_key = meta_key(key)
        self.layout = Shards(key, self.shards)
        self._init_expiry(expire, field_expiry)
        self.shard_keys = self.layout.shard_keys
        self.stamp_keys = self.layout.stamp_keys
        self._stamp_of = dict(zip(self.shard_keys, self.stamp_keys))
        self._stamp_of.update((k, k) for k in self.stamp_keys)

    @classmethod
    def from_options(cls, server: Any, key: str, options: HashOptions) -> HashBackend:
        return cls(
            server,
            key,
            expire=options.expire,
            shards=groups_for(server, options.shards, None, growing=False),
            field_expiry=options.field_expiry,
        )

    def options(self) -> HashOptions:
        capacity = default("DEDUP_COMPACT_CAPACITY")  # (a new filter at another key: buckets)
        return HashOptions(self.expire, self.shards, self.field_expiry, capacity)

    # -- the layout ------------------------------------------------------------------------

    def shard(self, fingerprint: str) -> int:
        return spread(fingerprint, self.shards)

    def shard_of(self, fingerprint: str) -> str:
        return self.shard_keys[self.shard(fingerprint)]

    def stamp_of(self, data_key: str) -> str | None:
        return self._stamp_of.get(data_key)

    def _prepare(self) -> None:
        if self.held_data:
            logger.info(
                "The hash filter at %r keeps layout 1 (whole fingerprints in shards, about "
                "105 bytes each); `scrapy convert-hash-layout --key %s`, with the crawl "
                "stopped, converts it into buckets (about 18)",
                self.key,
                self.key,
            )

    def meta_spec(self) -> MetaSpec:
        way = self.expiry.meta
        return MetaSpec(
            self.meta_key,
            {
                "backend": self.name,
                "layout": SHARDS_LAYOUT,
                "shards": str(self.shards),
                **way,
                "created": str(int(time.time())),
            },
            ("layout", "shards", *way),
        )

    def forget_many(self, fingerprints: Iterable[str]) -> int:
        return remove(self.server, "HDEL", ((self.shard_of(fp), fp) for fp in fingerprints))

    def owned_keys(self) -> list[str]:
        return [*self.shard_keys, *self.stamp_keys, self.meta_key]

    def expected_types(self) -> dict[str, str]:
        return {
            **dict.fromkeys(self.shard_keys, "hash"),
            **dict.fromkeys(self.stamp_keys, "string"),
            self.meta_key: "hash",
        }

    # -- the janitor's purge -----------------------------------------------------------------

    def purge_units(self) -> list[str]:
        return list(self.shard_keys) if self.expiry is BY_JANITOR else []

    def purge_step(
        self, unit: int, cursor: int, batch: int, on_scan: OnScan | None = None
    ) -> PurgeStep:
        return scan_fields(self.server, self.shard_keys[unit], cursor, batch, on_scan)

    def purge_remaining(self) -> int:
        return self._fields()

    # -- reports -----------------------------------------------------------------------------

    def _fields(self) -> int:
        """Fields stored; expired ones count until the janitor (or the server) frees them."""
        pipe = self.server.pipeline(transaction=False)
        for key in self.shard_keys:
            pipe.hlen(key)
        return sum(int(n) for n in pipe.execute())

    def holding(self) -> Holding:
        return Holding(float(self._fields()), self.shards)

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        info = self.info() if info is None else info
        purged = self.purge_units()  # (none where the server expires the fields)
        sample = expiry_sample(self.server, purged, self.expiry_unit_ms) if purged else None
        return [HashFields(info["fields"], self.shards, self.expiry.name, self.expire, sample)]

    def info(self) -> FilterInfo:
        info = super().info()
        info.details.update(
            fields=self._fields(),
            shards=self.shards,
            expire=self.expire,
            expired_by=self.expiry.name,
            layout="shards",
        )
        return info
