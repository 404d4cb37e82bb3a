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

import time
from collections.abc import Callable, Mapping
from typing import Any

from scrapy.settings import BaseSettings

from ..core.bloom_math import BloomParams, Scaling
from ..core.windows import WindowSpec
from ..settings.options import BloomOptions, WindowOptions
from .bloom import BlockedBloom, default_params
from .buckets import Windowed
from .capabilities import Capabilities
from .keys import LAYERS
from .meta import MetaSpec
from .reports import BloomSizing, Contents, FilterInfo


class WindowedBloomBackend(Windowed, BlockedBloom):
    name = "windowed-bloom"
    default_key = "%(spider)s:windowed-bloom"
    capabilities = Capabilities(
        probabilistic=True,
        hex_fingerprints=True,
        expiring_keys=True,
        report_fill=True,
        restore_expiry=True,
        bulk_bits=True,
    )
    # A scalable bucket's :L<j> layers and :layers record.
    bucket_suffix = r":L[0-9]+|" + LAYERS

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
        self.init_window(window, clock)
        self.layout.live = self.buckets  # the filters a call checks: the live buckets

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

    # -- the interface -------------------------------------------------------------------

    def meta_spec(self) -> MetaSpec:
        fields, compared = self.shape_meta()
        fields.update(self.window.as_meta())
        compare = (*compared, "window", "window_count", "window_tz")
        return MetaSpec(self.meta_key, {**fields, "created": str(int(time.time()))}, compare)

    def owned_keys(self) -> list[str]:
        """The live buckets (with their layers), any other key of this filter still in
        Redis, the record."""
        return list(self.expected_types())

    def expected_types(self) -> dict[str, str]:
        live = []
        for keys in self.live_keys():
            for bucket in keys:
                # With a scalable shape its layer record too; layers that exist are
                # found by bucket_keys_in_redis.
                live += [k for k in self.shape.filter_types(bucket) if k.endswith(LAYERS)]
                live.append(bucket)
        keys = sorted({*live, *self.bucket_keys_in_redis(), *self.stamp_keys})
        types = {k: "hash" if k.endswith(LAYERS) else "string" for k in keys}
        types[self.meta_key] = "hash"
        return types

    def filter_keys(self, bucket_key: str) -> list[str]:
        return list(self.shape.filter_types(bucket_key))

    def bulk_target(self, block: int) -> tuple[str, int]:
        """The current bucket of ``block``, with the expiry it must carry."""
        context = self.layout.context(self.server)
        return self.layout.filters(context)[block][0], self.layout.ttl_ms(context)

    def bulk_fill(self) -> tuple[str, float]:
        current = self.info()["buckets"][0]
        return current["label"], current["estimated_items"] if current["exists"] else 0.0

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        sizing = BloomSizing(self.params.capacity, self.error_rate, self.params.blocks, True)
        return [sizing, self.window_contents()]

    def info(self) -> FilterInfo:
        info = super().info()
        info.details.update(
            capacity_per_bucket=self.params.capacity,
            error_rate=self.error_rate,
            bits_per_bucket=self.params.total_bits,
            hashes=self.params.hashes,
            blocks=self.params.blocks,
            **self.window_info(),
        )
        return info
