"""``hash``: fingerprint -> expiry timestamp, in Redis hashes.

A request is seen iff its field exists and its expiry (Unix milliseconds, by
the Redis server's clock) is in the future; otherwise the expiry is (re)written
as now + ``DEDUP_EXPIRE`` seconds, or ``request.meta["dedup_expire"]``. The
check and the write are one Lua call. Fingerprints are spread over
``DEDUP_HASH_SHARDS`` hashes (``<key>:0`` ... ``<key>:<shards-1>``, by CRC32 of
the fingerprint) so that a janitor can purge expired fields in small batches
and a Redis Cluster spreads them over its masters. The parameter record lives
in ``<key>:meta``, and each shard has a stamp in its own slot (lua/stamp.lua).
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from scrapy.settings import BaseSettings

from .. import config, scripts
from ..exceptions import DedupConfigError
from ..options import HashOptions
from .base import LAYOUT_VERSION, PURGE_EXPIRED, DedupBackend, MetaSpec, slot_sibling

#: The most shards a hash filter may have (a few times a large cluster's masters).
MAX_SHARDS = 4096


class HashBackend(DedupBackend):
    name = "hash"
    uses_expire = True
    capabilities = frozenset({PURGE_EXPIRED})
    spread_setting = "DEDUP_HASH_SHARDS"
    add_script = scripts.HASH_ADD
    contains_script = scripts.HASH_CONTAINS

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        expire: float = config.default("DEDUP_EXPIRE"),
        shards: int = config.default("DEDUP_HASH_SHARDS"),
    ) -> None:
        super().__init__(server, key)
        self.expire = config.check_expire("DEDUP_EXPIRE", expire)
        self.shards = config.check_int(
            "DEDUP_HASH_SHARDS",
            shards,
            minimum=1,
            allowed=f"a whole number of hashes from 1 to {MAX_SHARDS:,}",
        )
        if self.shards > MAX_SHARDS:
            raise DedupConfigError(
                f"DEDUP_HASH_SHARDS must be a whole number of hashes from 1 to {MAX_SHARDS:,} "
                f"(each is checked at open and scanned by the janitor), got {self.shards:,}"
            )
        self.meta_key = f"{key}:meta"
        self.shard_keys = [f"{key}:{i}" for i in range(self.shards)]
        # Each shard's stamp (lua/stamp.lua), in the shard's cluster slot.
        self.stamp_keys = [slot_sibling(shard, ":meta") for shard in self.shard_keys]
        self._stamp_of = dict(zip(self.shard_keys, self.stamp_keys))
        self._stamp_of.update((k, k) for k in self.stamp_keys)
        self._ttl_ms = max(1, round(self.expire * 1000))

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> HashBackend:
        options = HashOptions.from_settings(settings)
        return cls(server, key, expire=options.expire, shards=options.shards)

    def purge_keys(self) -> list[str]:
        return list(self.shard_keys)

    def with_key(self, key: str) -> HashBackend:
        return HashBackend(self.server, key, expire=self.expire, shards=self.shards)

    @staticmethod
    def _to_ms(expire: float) -> int:
        return max(1, round(config.check_expire("request.meta['dedup_expire']", expire) * 1000))

    def shard(self, fingerprint: str) -> int:
        if self.shards == 1:
            return 0
        return zlib.crc32(fingerprint.encode("utf-8")) % self.shards

    def shard_of(self, fingerprint: str) -> str:
        return self.shard_keys[self.shard(fingerprint)]

    def stamp_of(self, data_key: str) -> str | None:
        return self._stamp_of.get(data_key)

    def meta_spec(self) -> MetaSpec:
        return MetaSpec(
            self.meta_key,
            {
                "backend": self.name,
                "layout": LAYOUT_VERSION,
                "shards": str(self.shards),
                "created": str(int(time.time())),
            },
            ("layout", "shards"),
        )

    def add_group(self, fingerprint: str) -> int:
        return self.shard(fingerprint)

    def group_keys(self, group: int, context: Any) -> list[str]:
        return [self.stamp_keys[group], self.shard_keys[group]]

    def add_header(self, context: Any) -> list[Any]:
        return [self.stamp]

    def fp_args(self, fingerprint: str, expire: float | None) -> list[Any]:
        return [fingerprint, self._ttl_ms if expire is None else self._to_ms(expire)]

    def contains_call(self, fingerprint: str) -> tuple[list[str], list[Any]]:
        return [self.shard_of(fingerprint)], [fingerprint]

    def owned_keys(self) -> list[str]:
        return [*self.shard_keys, *self.stamp_keys, self.meta_key]

    def expected_types(self) -> dict[str, str]:
        return {
            **dict.fromkeys(self.shard_keys, "hash"),
            **dict.fromkeys(self.stamp_keys, "string"),
            self.meta_key: "hash",
        }

    def info(self) -> dict[str, Any]:
        info = super().info()
        pipe = self.server.pipeline(transaction=False)
        for key in self.shard_keys:
            pipe.hlen(key)
        # Expired fields count until the janitor purges them.
        info["fields"] = sum(int(n) for n in pipe.execute())
        info["shards"] = self.shards
        info["expire"] = self.expire
        return info
