"""``bloom``: a Bloom filter in Redis bitmaps, sized from capacity and error rate.

Layout for base key K: blocks ``{K:0}`` ... ``{K:B-1}`` (Redis strings of m
bits each; the hash tag keeps whatever one call touches in one cluster slot
while different blocks land in different slots) and the parameter record
``K:meta`` (a hash: capacity, error rate, m, k, blocks, hashing scheme),
checked every time the filter is opened. All k bits of a fingerprint are in
one block, chosen from the fingerprint; a check-and-add is one Lua call
(GETBIT x k, then SETBIT of the missing bits).
"""

from __future__ import annotations

import math
import time
from typing import Any

from scrapy.settings import BaseSettings

from .. import config, scripts
from ..bloom_math import BloomParams, check_fingerprint
from ..exceptions import DedupConfigError
from .base import LAYOUT_VERSION, DedupBackend, MetaSpec

#: Bytes one BITCOUNT call counts when measuring fill (keeps each call short).
_BITCOUNT_CHUNK = 1 << 20

#: Meta fields that must match for the stored bits to mean the same thing.
COMPARED = ("layout", "scheme", "block_bits", "hashes", "blocks")


def bloom_params_from_settings(settings: BaseSettings) -> BloomParams:
    """Filter shape from ``DEDUP_BLOOM_*``, or from scrapy-redis-bloomfilter's
    ``BLOOMFILTER_BIT`` / ``BLOOMFILTER_HASH_NUMBER`` for people moving over."""
    error_rate = settings.get("DEDUP_BLOOM_ERROR_RATE", config.default("DEDUP_BLOOM_ERROR_RATE"))
    legacy = config.has(settings, "BLOOMFILTER_BIT") or config.has(
        settings, "BLOOMFILTER_HASH_NUMBER"
    )
    if legacy:
        if config.has(settings, "DEDUP_BLOOM_CAPACITY"):
            raise DedupConfigError(
                "Both DEDUP_BLOOM_CAPACITY and BLOOMFILTER_BIT/BLOOMFILTER_HASH_NUMBER are set; "
                "they size the same filter in two ways. Keep DEDUP_BLOOM_CAPACITY (and "
                "DEDUP_BLOOM_ERROR_RATE) and remove the BLOOMFILTER_* settings."
            )
        return BloomParams.from_bit_exponent(
            settings.get("BLOOMFILTER_BIT", 30),
            settings.get("BLOOMFILTER_HASH_NUMBER", 6),
            config.check_error_rate("DEDUP_BLOOM_ERROR_RATE", error_rate),
        )
    return BloomParams.from_capacity(
        settings.get("DEDUP_BLOOM_CAPACITY", config.default("DEDUP_BLOOM_CAPACITY")),
        error_rate,
        settings.get("DEDUP_BLOOM_BLOCKS", config.default("DEDUP_BLOOM_BLOCKS")),
    )


def block_prefix(key: str, block: int) -> str:
    """Hash-tagged name shared by everything stored for one block."""
    return f"{{{key}:{block}}}"


def bitmap_fill(server: Any, key: str, bits: int) -> int:
    """Number of set bits in ``key``, counted in short BITCOUNT calls."""
    size = math.ceil(bits / 8)
    total = 0
    for start in range(0, size, _BITCOUNT_CHUNK * 8):
        pipe = server.pipeline(transaction=False)
        for chunk in range(start, min(size, start + _BITCOUNT_CHUNK * 8), _BITCOUNT_CHUNK):
            pipe.bitcount(key, chunk, min(size, chunk + _BITCOUNT_CHUNK) - 1)
        total += sum(int(v) for v in pipe.execute())
    return total


def fill_report(params: BloomParams, set_bits: int) -> dict[str, Any]:
    """Fill ratio, estimated items and the false-positive rate that fill implies."""
    m = params.total_bits
    ratio = set_bits / m if m else 0.0
    k = params.hashes
    estimated = -m / k * math.log(1 - ratio) if ratio < 1 else float("inf")
    return {
        "set_bits": set_bits,
        "fill_ratio": ratio,
        "estimated_items": estimated,
        "estimated_error_rate": ratio**k,
        "over_capacity": estimated > params.capacity,
    }


class BloomBackend(DedupBackend):
    name = "bloom"
    is_bloom = True
    spread_setting = "DEDUP_BLOOM_BLOCKS"
    add_script = scripts.BLOOM_ADD
    contains_script = scripts.BLOOM_CONTAINS

    def __init__(self, server: Any, key: str, params: BloomParams | None = None) -> None:
        super().__init__(server, key)
        if params is None:
            params = BloomParams.from_capacity(
                config.default("DEDUP_BLOOM_CAPACITY"), config.default("DEDUP_BLOOM_ERROR_RATE")
            )
        self.params = params
        self.meta_key = f"{key}:meta"
        self.block_keys = [block_prefix(key, b) for b in range(params.blocks)]
        self._m = str(params.block_bits)
        self._k = str(params.hashes)

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> BloomBackend:
        return cls(server, key, bloom_params_from_settings(settings))

    def meta_spec(self) -> MetaSpec:
        fields = {"backend": self.name, "layout": LAYOUT_VERSION, **self.params.as_meta()}
        return MetaSpec(self.meta_key, {**fields, "created": str(int(time.time()))}, COMPARED)

    def _prepare(self) -> None:
        for block in self.block_keys:
            scripts.BITMAP_ALLOC(self.server, [block], [self._m])

    def block_key(self, fingerprint: str) -> str:
        if self.params.blocks == 1:
            return self.block_keys[0]
        try:
            return self.block_keys[int(fingerprint[24:32], 16) % self.params.blocks]
        except (ValueError, TypeError):
            check_fingerprint(fingerprint)
            raise

    def add_call(self, fingerprint: str, expire: float | None) -> tuple[list[str], list[Any]]:
        return self.contains_call(fingerprint)

    def contains_call(self, fingerprint: str) -> tuple[list[str], list[Any]]:
        return [self.block_key(fingerprint)], [fingerprint, self._m, self._k]

    def owned_keys(self) -> list[str]:
        return [*self.block_keys, self.meta_key]

    def expected_types(self) -> dict[str, str]:
        return {**dict.fromkeys(self.block_keys, "string"), self.meta_key: "hash"}

    def info(self) -> dict[str, Any]:
        info = super().info()
        set_bits = sum(bitmap_fill(self.server, k, self.params.block_bits) for k in self.block_keys)
        info.update(
            capacity=self.params.capacity,
            error_rate=self.params.error_rate,
            bits=self.params.total_bits,
            hashes=self.params.hashes,
            blocks=self.params.blocks,
            **fill_report(self.params, set_bits),
        )
        return info
