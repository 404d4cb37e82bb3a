"""``windowed-bloom``: one Bloom filter per time bucket; buckets expire by themselves.

Layout for base key K: bucket ``{K:b}:<label>`` for block b and the bucket's
start (``20261121`` for a day, ``202611`` for a month, ``2026112114`` for an
hour in UTC, Unix seconds for a window given in seconds), and the parameter
record ``K:meta``. The buckets of one block share a hash tag, hence a cluster
slot, so that checking every live bucket and adding to the current one is one
atomic Lua call. Each bucket key carries an expiry at the moment it leaves the
window, so Redis frees old buckets by itself; nothing ever has to delete them.

A request is seen iff a live bucket holds it; if none does, it goes into the
current bucket only. Seen at t, it is filtered until at least
t + (count - 1) x window and forgotten by t + count x window.

Bucket boundaries follow the Redis server's clock (read with TIME at open and
every minute after); a ``clock`` callable can be injected instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from scrapy.settings import BaseSettings

from .. import config, scripts
from ..bloom_math import BloomParams, Scaling
from ..options import BloomOptions, WindowOptions
from ..windows import Bucket, Live, LiveBuckets, WindowSpec
from .base import BULK_TARGET, REPORT_FILL, RESTORE_EXPIRY, MetaSpec, as_str
from .bloom import BlockedBloom, default_params
from .shape import layer_summary


class WindowedBloomBackend(BlockedBloom):
    name = "windowed-bloom"
    keys_expire = True
    capabilities = frozenset({REPORT_FILL, RESTORE_EXPIRY, BULK_TARGET})

    def __init__(
        self,
        server: Any,
        key: str,
        params: BloomParams | None = None,
        window: WindowSpec | None = None,
        *,
        scaling: Scaling | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``params``: each bucket's filter, or with ``scaling`` its first layer."""
        super().__init__(server, key, params or default_params(), scaling)
        if window is None:
            window = WindowSpec.parse(
                config.default("DEDUP_WINDOW"),
                config.default("DEDUP_WINDOW_COUNT"),
                config.default("DEDUP_WINDOW_TZ"),
            )
        self.window = window
        self.buckets = LiveBuckets(window, self.prefixes, clock)
        # {K:block}:label, and for a scalable filter its :L<j> layers and :layers record.
        self._bucket_re = re.compile(
            "^" + re.escape("{" + key + ":") + r"([0-9]+)" + re.escape("}:")
            + r"([0-9]+)(:L[0-9]+|:layers)?$"
        )  # fmt: skip

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> WindowedBloomBackend:
        bloom = BloomOptions.from_settings(settings)
        window = WindowOptions.from_settings(settings).window
        return cls(server, key, bloom.params, window, scaling=bloom.scaling)

    def with_key(self, key: str) -> WindowedBloomBackend:
        return WindowedBloomBackend(
            self.server,
            key,
            self.params,
            self.window,
            scaling=self.scaling,
            clock=self.buckets.clock,
        )

    # -- time --------------------------------------------------------------------------

    def now(self) -> float:
        """Current time by the injected clock, else by the Redis server's clock."""
        return self.buckets.now(self.server)

    def bucket_key(self, block: int, bucket: Bucket) -> str:
        return self.buckets.key(block, bucket)

    def live_keys(self, now: float | None = None) -> list[list[str]]:
        """For each block, the keys of the live buckets, the current one first."""
        return self.buckets.at(self.now() if now is None else now).keys

    # -- the interface -------------------------------------------------------------------

    def meta_spec(self) -> MetaSpec:
        fields, compared = self.shape_meta()
        fields.update(self.window.as_meta())
        compare = (*compared, "window", "window_count", "window_tz")
        return MetaSpec(self.meta_key, {**fields, "created": str(int(time.time()))}, compare)

    def add_context(self) -> tuple[float, Live]:
        return self.buckets.context(self.server)

    def filters(self, context: tuple[float, Live]) -> list[list[str]]:
        return context[1].keys

    def ttl_ms(self, context: tuple[float, Live]) -> int:
        return self.buckets.ttl_ms(context)

    def label_of(self, key: str) -> str | None:
        """The bucket label in a key of this filter (bucket, layer or layer record)."""
        match = self._bucket_re.match(key)
        return match.group(2) if match else None

    def bucket_keys_in_redis(self) -> list[str]:
        """Every bucket key of this filter that exists now, live or not (SCAN)."""
        pattern = _glob_escape("{" + self.key + ":") + "*"
        found = []
        for raw in self.server.scan_iter(match=pattern, count=1000):
            key = as_str(raw)
            match = self._bucket_re.match(key)
            if match and int(match.group(1)) < self.params.blocks:
                found.append(key)
        return sorted(found)

    def owned_keys(self) -> list[str]:
        """The live buckets (with their layers), any other key of this filter still in
        Redis, the record."""
        return list(self.expected_types())

    def expected_types(self) -> dict[str, str]:
        live = []
        for keys in self.live_keys():
            for bucket in keys:
                # With a scalable shape its layer record too; layers that exist are
                # found by the SCAN below.
                live += [k for k in self.shape.filter_types(bucket) if k.endswith(":layers")]
                live.append(bucket)
        keys = sorted({*live, *self.bucket_keys_in_redis(), *self.stamp_keys})
        types = {k: "hash" if k.endswith(":layers") else "string" for k in keys}
        types[self.meta_key] = "hash"
        return types

    def bulk_target(self, block: int) -> tuple[str, int]:
        """The current bucket of ``block``, with the expiry it must carry."""
        context = self.add_context()
        return self.filters(context)[block][0], self.ttl_ms(context)

    def bulk_fill(self) -> tuple[str, float]:
        current = self.info()["buckets"][0]
        return current["label"], current["estimated_items"] if current["exists"] else 0.0

    def restore_expiry(self) -> list[str]:
        now = self.now()
        restored = []
        for key in self.bucket_keys_in_redis():
            label = self.label_of(key)
            if label is None:
                continue
            ttl_ms = max(1, int((self.window.label_expiry(label) - now) * 1000))
            if scripts.EXPIRE_IF_MISSING(self.server, [key], [ttl_ms]) == 1:
                restored.append(key)
        return restored

    def filter_reports(self) -> list[dict[str, Any]]:
        info = self.info()
        keep = (
            "label",
            "fill_ratio",
            "estimated_items",
            "estimated_error_rate",
            "over_capacity",
            "ttl_ms",
        )
        return [
            {
                **{k: bucket[k] for k in keep},
                "capacity": info["capacity_per_bucket"],
                "error_rate": info["error_rate"],
                **layer_summary(bucket),
            }
            for bucket in info["buckets"]
            if bucket["exists"]
        ]

    def info(self) -> dict[str, Any]:
        info = super().info()
        now = self.now()
        buckets = []
        for j, bucket in enumerate(self.window.live(now)):
            keys = [self.bucket_key(b, bucket) for b in range(self.params.blocks)]
            ttls = [int(self.server.pttl(k)) for k in keys]
            entry = {
                "label": bucket.label,
                "current": j == 0,
                "exists": any(t != -2 for t in ttls),
                "ttl_ms": max(ttls),
                **self.filter_report(keys),
            }
            buckets.append(entry)
        info.update(
            capacity_per_bucket=self.params.capacity,
            error_rate=self.error_rate,
            bits_per_bucket=self.params.total_bits,
            hashes=self.params.hashes,
            blocks=self.params.blocks,
            window=self.window.name,
            window_count=self.window.count,
            window_tz=self.window.tz,
            buckets=buckets,
        )
        return info


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
