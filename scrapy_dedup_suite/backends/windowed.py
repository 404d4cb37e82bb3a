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
from ..bloom_math import BloomParams, check_fingerprint
from ..windows import Bucket, WindowSpec
from .base import LAYOUT_VERSION, DedupBackend, MetaSpec, as_str
from .bloom import COMPARED, bitmap_fill, block_prefix, bloom_params_from_settings, fill_report

#: How often the offset between this host's clock and the server's is re-read.
CLOCK_REFRESH = 60.0


class WindowedBloomBackend(DedupBackend):
    name = "windowed-bloom"
    is_bloom = True
    spread_setting = "DEDUP_BLOOM_BLOCKS"
    add_script = scripts.WINDOWED_ADD
    contains_script = scripts.BLOOM_CONTAINS

    def __init__(
        self,
        server: Any,
        key: str,
        params: BloomParams | None = None,
        window: WindowSpec | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(server, key)
        if params is None:
            params = BloomParams.from_capacity(
                config.default("DEDUP_BLOOM_CAPACITY"), config.default("DEDUP_BLOOM_ERROR_RATE")
            )
        if window is None:
            window = WindowSpec.parse(
                config.default("DEDUP_WINDOW"),
                config.default("DEDUP_WINDOW_COUNT"),
                config.default("DEDUP_WINDOW_TZ"),
            )
        self.params = params
        self.window = window
        self.meta_key = f"{key}:meta"
        self.prefixes = [block_prefix(key, b) for b in range(params.blocks)]
        self._m = str(params.block_bits)
        self._k = str(params.hashes)
        self._clock = clock
        self._offset = 0.0
        self._offset_until = -1.0
        # Cached for the current bucket: the live keys of each block.
        self._valid_from = self._valid_until = 0.0
        self._expire_at = 0.0
        self._keys: list[list[str]] = []
        label = r"[0-9]+"
        self._bucket_re = re.compile(
            "^" + re.escape("{" + key + ":") + r"([0-9]+)" + re.escape("}:") + f"({label})$"
        )

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> WindowedBloomBackend:
        window = WindowSpec.parse(
            settings.get("DEDUP_WINDOW", config.default("DEDUP_WINDOW")),
            settings.get("DEDUP_WINDOW_COUNT", config.default("DEDUP_WINDOW_COUNT")),
            settings.get("DEDUP_WINDOW_TZ", config.default("DEDUP_WINDOW_TZ")),
        )
        return cls(server, key, bloom_params_from_settings(settings), window)

    # -- time --------------------------------------------------------------------------

    def now(self) -> float:
        """Current time by the injected clock, else by the Redis server's clock."""
        if self._clock is not None:
            return self._clock()
        local = time.time()
        if local >= self._offset_until:
            seconds, micros = self.server.time()
            self._offset = int(seconds) + int(micros) / 1e6 - time.time()
            self._offset_until = local + CLOCK_REFRESH
        return local + self._offset

    def bucket_key(self, block: int, bucket: Bucket) -> str:
        return f"{self.prefixes[block]}:{bucket.label}"

    def live_keys(self, now: float | None = None) -> list[list[str]]:
        """For each block, the keys of the live buckets, the current one first."""
        now = self.now() if now is None else now
        if not self._valid_from <= now < self._valid_until:
            live = self.window.live(now)
            self._keys = [
                [self.bucket_key(b, bucket) for bucket in live] for b in range(self.params.blocks)
            ]
            self._valid_from, self._valid_until = live[0].start, live[0].end
            self._expire_at = self.window.expire_at(now)
        return self._keys

    # -- the interface -------------------------------------------------------------------

    def meta_spec(self) -> MetaSpec:
        fields = {
            "backend": self.name,
            "layout": LAYOUT_VERSION,
            **self.params.as_meta(),
            **self.window.as_meta(),
        }
        compare = (*COMPARED, "window", "window_count", "window_tz")
        return MetaSpec(self.meta_key, {**fields, "created": str(int(time.time()))}, compare)

    def _block(self, fingerprint: str) -> int:
        if self.params.blocks == 1:
            return 0
        try:
            return int(fingerprint[24:32], 16) % self.params.blocks
        except (ValueError, TypeError):
            check_fingerprint(fingerprint)
            raise

    def _ttl_ms(self, now: float) -> int:
        return max(1, int((self._expire_at - now) * 1000))

    def add_call(self, fingerprint: str, expire: float | None) -> tuple[list[str], list[Any]]:
        now = self.now()
        keys = self.live_keys(now)[self._block(fingerprint)]
        return keys, [fingerprint, self._m, self._k, self._ttl_ms(now)]

    def contains_call(self, fingerprint: str) -> tuple[list[str], list[Any]]:
        return self.live_keys()[self._block(fingerprint)], [fingerprint, self._m, self._k]

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
        """The live buckets, any other bucket of this filter still in Redis, the record."""
        live = [key for keys in self.live_keys() for key in keys]
        return [*sorted({*live, *self.bucket_keys_in_redis()}), self.meta_key]

    def expected_types(self) -> dict[str, str]:
        keys = self.owned_keys()
        return {**dict.fromkeys(keys[:-1], "string"), self.meta_key: "hash"}

    def info(self) -> dict[str, Any]:
        info = super().info()
        now = self.now()
        buckets = []
        for j, bucket in enumerate(self.window.live(now)):
            keys = [self.bucket_key(b, bucket) for b in range(self.params.blocks)]
            ttls = [int(self.server.pttl(k)) for k in keys]
            set_bits = sum(bitmap_fill(self.server, k, self.params.block_bits) for k in keys)
            buckets.append(
                {
                    "label": bucket.label,
                    "current": j == 0,
                    "exists": any(t != -2 for t in ttls),
                    "ttl_ms": max(ttls),
                    **fill_report(self.params, set_bits),
                }
            )
        info.update(
            capacity_per_bucket=self.params.capacity,
            error_rate=self.params.error_rate,
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
