"""``native-bloom`` and ``windowed-native-bloom``: the server's own Bloom filters (BF.*).

Redis 8 has Bloom filters built in, Redis Stack and Redis 6.2/7.x load them as the
RedisBloom module, Valkey as the valkey-bloom module; all answer the same BF.*
commands. These backends keep fingerprints there instead of in Lua-managed bitmaps:
the server sizes, hashes and grows the filter.

Layout for base key K: blocks ``{K:0}`` ... ``{K:B-1}`` (one Bloom filter each; for
the windowed variant one per time bucket, ``{K:b}:<label>``, expiring when the
bucket leaves the window), a stamp ``{K:b}:meta`` per block (lua/stamp.lua) and the
parameter record ``K:meta``. A fingerprint's block is CRC32(fingerprint) mod B.
B is as many as ``DEDUP_BLOOM_BLOCKS`` asks, and at least as many as keep each
filter under what a server allows one (RedisBloom's capacity cap of 2^30 items,
valkey-bloom's 128 MB per filter), so a filter of billions spans keys and, on a
cluster, slots and masters.

A check-and-add is one Lua call (lua/native_add.lua) that runs BF.EXISTS on the
older buckets and BF.INSERT with the filter's CAPACITY, ERROR and EXPANSION (or
NONSCALING): after FLUSHALL, eviction or a clear() by another worker the filter is
created again with its own parameters, never the server's defaults.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scrapy.settings import BaseSettings

from ..core.native_math import NativeParams, native_error_rate
from ..core.windows import WindowSpec
from ..exceptions import DedupConfigError, FilterMismatchError
from ..server import scripts
from ..server.cluster import masters
from ..server.connection import address, has_command
from ..settings.options import NativeBloomOptions, WindowOptions
from ..settings.table import default
from . import admission
from .base import LAYOUT_VERSION, DedupBackend
from .buckets import Windowed
from .capabilities import Capabilities
from .keys import (
    NATIVE_BLOOM_TYPE,
    as_str,
    block_prefix,
    block_re,
    meta_key,
    migration_state_key,
    read_hash,
    spread,
)
from .layout import Blocks
from .meta import MetaSpec
from .reports import BloomSizing, Contents, FilterFill, FilterInfo, Holding, ServerFilters

logger = logging.getLogger(__name__)

#: Which servers answer BF.* commands, for the error when one does not.
WHERE_BLOOM = (
    "Bloom filters are built into Redis 8 and Redis Stack; Redis 6.2/7.x load RedisBloom "
    "(--loadmodule redisbloom.so) and Valkey 8+ loads valkey-bloom (--loadmodule "
    "libvalkey_bloom.so; built into the valkey-bundle image)"
)


class NoBloomModuleError(DedupConfigError):
    """The server has no Bloom filter commands (BF.*)."""


def default_native_params() -> NativeParams:
    return NativeParams.create(
        default("DEDUP_BLOOM_CAPACITY"), default("DEDUP_BLOOM_ERROR_RATE"), 0, 0
    )


class NativeBlocks(Blocks):
    """Blocks of the server's own Bloom filters (BF.*): a block by the fingerprint's
    CRC32, the filters' parameters in every call's header (BF.INSERT creates them)."""

    add_script = scripts.NATIVE_ADD
    contains_script = scripts.NATIVE_CONTAINS

    def __init__(self, stamp_keys: list[str], filters: list[list[str]], params: NativeParams):
        super().__init__(stamp_keys, filters)
        self.params = params

    def block(self, fingerprint: str) -> int:
        return spread(fingerprint, self.params.blocks)

    def keys(self, group: int, context: Any) -> list[str]:
        return [self.stamp_keys[group], *self.filters(context)[group]]

    def header(self, context: Any, stamp: str) -> list[Any]:
        p = self.params
        filters = len(self.filters(context)[0])
        ttl_ms = self.ttl_ms(context)
        return [stamp, p.block_capacity, repr(p.error_rate), p.expansion, filters, ttl_ms]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        return self.filters(context)[self.block(fingerprint)], [fingerprint]


class NativeBloomBackend(DedupBackend):
    """Fingerprints in the server's own Bloom filters, one per block."""

    name = "native-bloom"
    default_key = "%(spider)s:native-bloom"
    capabilities = Capabilities(probabilistic=True, report_fill=True, stable_answers=True)
    spread_setting = "DEDUP_BLOOM_BLOCKS"
    layout: NativeBlocks

    def __init__(self, server: Any, key: str, params: NativeParams | None = None) -> None:
        super().__init__(server, key)
        self.params = params or default_native_params()
        self.meta_key = meta_key(key)
        self.prefixes = [block_prefix(key, b) for b in range(self.params.blocks)]
        self.stamp_keys = [meta_key(prefix) for prefix in self.prefixes]
        self._block_re = block_re(key)
        self.layout = NativeBlocks(self.stamp_keys, [[p] for p in self.prefixes], self.params)

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> NativeBloomBackend:
        return cls(server, key, NativeBloomOptions.from_settings(settings).params)

    def with_key(self, key: str) -> NativeBloomBackend:
        return NativeBloomBackend(self.server, key, self.params)

    @property
    def error_rate(self) -> float:
        return self.params.error_rate

    # -- open ------------------------------------------------------------------------

    def check_server(self) -> None:
        super().check_server()
        for client in masters(self.server):
            if not has_command(client, "BF.INSERT"):
                raise NoBloomModuleError(
                    f"The {self.name} backend keeps fingerprints in the server's own Bloom "
                    f"filters, and the Redis server at {address(client)} has no BF.* commands. "
                    f"{WHERE_BLOOM}. Or use DEDUP_BACKEND = 'bloom', which needs no module."
                )

    def meta_spec(self) -> MetaSpec:
        p = self.params
        fields = {
            "backend": self.name,
            "layout": LAYOUT_VERSION,
            "capacity": str(p.capacity),
            "error_rate": repr(p.error_rate),
            "blocks": str(p.blocks),
            "scaling": str(bool(p.expansion)),
            "created": str(int(time.time())),
        }
        if p.expansion:
            fields["expansion"] = str(p.expansion)
        fields.update(self.extra_meta())
        compare = ("layout", "capacity", "error_rate", "blocks", "scaling", "expansion")
        return MetaSpec(self.meta_key, fields, (*compare, *self.extra_meta()))

    def extra_meta(self) -> dict[str, str]:
        return {}

    def _before_writing(self, found: dict[str, str]) -> None:
        if found.get(self.meta_key) == "hash":
            # The record first: it names the setting that differs and its stored value.
            stored = read_hash(self.server, self.meta_key)
            if stored:
                self.compare_meta(self.meta_spec(), stored)
        self.check_filters([k for k, kind in found.items() if kind != "none" and self.is_filter(k)])
        current = [keys[0] for keys in self.layout.filters(self.layout.context(self.server))]
        missing = sum(found.get(key, "none") == "none" for key in current)
        if missing:
            admission.check_room(self, missing * self.params.block_bytes, "DEDUP_BLOOM_CAPACITY")

    def is_filter(self, key: str) -> bool:
        return key in self.prefixes

    def check_filters(self, keys: Sequence[str]) -> None:
        """Refuse filters whose own parameters (BF.INFO) are not this filter's: one
        made by hand or by another program, or with other settings."""
        p = self.params
        for key, info in zip(keys, self.filter_infos(keys)):
            if info is None:  # gone since its type was read
                continue
            filters = int(info.get("Number of filters") or 1)
            expansion = int(info.get("Expansion rate") or 0)
            grown = sum(p.block_capacity * p.expansion**j for j in range(filters))
            capacity = int(info.get("Capacity") or 0)
            wanted = p.block_capacity if not p.expansion or filters == 1 else grown
            if expansion != p.expansion:
                was = f"expansion {expansion}" if expansion else "NONSCALING"
                now = f"expansion {p.expansion}" if p.expansion else "NONSCALING"
                raise FilterMismatchError(
                    f"The Bloom filter {key!r} of the {self.name} filter at {self.key!r} was "
                    f"created {was}, and these settings ask for {now} (DEDUP_BLOOM_SCALING / "
                    "DEDUP_BLOOM_EXPANSION). Set them as when it was created, or point the "
                    "dupefilter at another key with SCHEDULER_DUPEFILTER_KEY."
                )
            if capacity != wanted:
                raise FilterMismatchError(
                    f"The Bloom filter {key!r} of the {self.name} filter at {self.key!r} holds "
                    f"{capacity:,} items in {filters} sub-filter(s), where these settings make "
                    f"blocks of {p.block_capacity:,} (DEDUP_BLOOM_CAPACITY={p.capacity:,} over "
                    f"{p.blocks} block(s)). Set DEDUP_BLOOM_CAPACITY and DEDUP_BLOOM_BLOCKS as "
                    "when it was created, or point the dupefilter at another key with "
                    "SCHEDULER_DUPEFILTER_KEY."
                )

    # -- where the filters live ---------------------------------------------------------

    def block(self, fingerprint: str) -> int:
        return self.layout.block(fingerprint)

    def stamp_of(self, data_key: str) -> str | None:
        match = self._block_re.match(data_key)
        if match is None or int(match.group(1)) >= len(self.stamp_keys):
            return None
        return self.stamp_keys[int(match.group(1))]

    # -- what is stored -----------------------------------------------------------------

    def side_keys(self) -> dict[str, str]:
        return {**super().side_keys(), migration_state_key(self.key): "hash"}

    def expected_types(self) -> dict[str, str]:
        types = dict.fromkeys(self.prefixes, NATIVE_BLOOM_TYPE)
        types.update(dict.fromkeys(self.stamp_keys, "string"))
        types[self.meta_key] = "hash"
        return types

    def owned_keys(self) -> list[str]:
        return list(self.expected_types())

    def filter_infos(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        """BF.INFO of each key (None for a missing one: BF.INFO fails on it, which is
        told from any other failure by the key's absence, not by the error's words)."""
        if not keys:
            return []
        pipe = self.server.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("BF.INFO", key)
        out: list[dict[str, Any] | None] = []
        for key, answer in zip(keys, pipe.execute(raise_on_error=False)):
            if isinstance(answer, Exception):
                if self.server.exists(key):  # (a time bucket may expire meanwhile)
                    raise answer
                out.append(None)
            else:
                out.append({as_str(k): v for k, v in answer.items()})
        return out

    def filter_report(self, keys: Sequence[str]) -> dict[str, Any]:
        """Items, fill and estimated error rate of the filter made of the blocks at ``keys``."""
        p = self.params
        infos = [i for i in self.filter_infos(keys) if i is not None]
        items = [int(i["Number of items inserted"]) for i in infos]
        total = sum(items)
        capacity_now = sum(int(i["Capacity"]) for i in infos)
        worst = max(
            (native_error_rate(p.block_capacity, p.error_rate, p.expansion, n) for n in items),
            default=0.0,
        )
        return {
            "estimated_items": float(total),
            "fill_ratio": total / capacity_now if capacity_now else 0.0,
            "estimated_error_rate": worst,
            "over_capacity": not p.expansion and any(n >= p.block_capacity for n in items),
            "sub_filters": max((int(i["Number of filters"]) for i in infos), default=0),
            "capacity_now": capacity_now,
        }

    def filter_reports(self, info: Mapping[str, Any] | None = None) -> list[FilterFill]:
        info = self.info() if info is None else info
        return [FilterFill.of(info, info["capacity"], info["error_rate"])]

    def info(self) -> FilterInfo:
        info = super().info()
        info.details.update(self.describe())
        return info

    def holding(self) -> Holding:
        """Estimated items (a windowed filter's buckets: none counted here), and the
        capacity of a NONSCALING filter (a scalable one grows: 0)."""
        p = self.params
        held = float(self.describe().get("estimated_items", 0.0))
        return Holding(
            held,
            p.blocks,
            0 if p.expansion else p.block_capacity * p.blocks,
            error_rate=p.error_rate,
            memory_bytes=p.block_bytes * p.blocks,
            growth=f"expansion {p.expansion}" if p.expansion else "NONSCALING",
            rate_at=p.designed_rate,
        )

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        p = self.params
        found = self.describe() if info is None else info
        return [
            BloomSizing(p.capacity, p.error_rate, p.blocks),
            ServerFilters(p.expansion, found["sub_filters"], found["capacity_now"]),
        ]

    def describe(self) -> dict[str, Any]:
        """What :meth:`info` says of the filter beyond its keys and memory."""
        p = self.params
        return {
            "capacity": p.capacity,
            "error_rate": p.error_rate,
            "blocks": p.blocks,
            "expansion": p.expansion,
            "scaling": bool(p.expansion),
            **self.filter_report(self.prefixes),
        }


class WindowedNativeBloomBackend(Windowed, NativeBloomBackend):
    """One server-side Bloom filter per block and time bucket; buckets expire by
    themselves when they leave the window (see windowed-bloom for the semantics)."""

    name = "windowed-native-bloom"
    default_key = "%(spider)s:windowed-native-bloom"
    capabilities = Capabilities(
        probabilistic=True, expiring_keys=True, report_fill=True, restore_expiry=True
    )

    def __init__(
        self,
        server: Any,
        key: str,
        params: NativeParams | None = None,
        window: WindowSpec | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(server, key, params)
        self.init_window(window, clock)
        self.layout.live = self.buckets  # the filters a call checks: the live buckets

    @classmethod
    def from_settings(
        cls, server: Any, key: str, settings: BaseSettings
    ) -> WindowedNativeBloomBackend:
        params = NativeBloomOptions.from_settings(settings).params
        return cls(server, key, params, WindowOptions.from_settings(settings).window)

    def with_key(self, key: str) -> WindowedNativeBloomBackend:
        return WindowedNativeBloomBackend(
            self.server, key, self.params, self.window, clock=self.buckets.clock
        )

    def extra_meta(self) -> dict[str, str]:
        return self.window.as_meta()

    def is_filter(self, key: str) -> bool:
        return self.label_of(key) is not None

    def expected_types(self) -> dict[str, str]:
        live = [k for keys in self.live_keys() for k in keys]
        types = dict.fromkeys(sorted({*live, *self.bucket_keys_in_redis()}), NATIVE_BLOOM_TYPE)
        types.update(dict.fromkeys(self.stamp_keys, "string"))
        types[self.meta_key] = "hash"
        return types

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        p = self.params
        return [BloomSizing(p.capacity, p.error_rate, p.blocks, True), self.window_contents()]

    def describe(self) -> dict[str, Any]:
        p = self.params
        return {
            "capacity_per_bucket": p.capacity,
            "error_rate": p.error_rate,
            "blocks": p.blocks,
            "expansion": p.expansion,
            "scaling": bool(p.expansion),
            **self.window_info(),
        }
