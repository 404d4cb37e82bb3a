"""What a windowed backend adds to the filter it keeps per time bucket, shared by
windowed-bloom (Lua bitmaps) and windowed-native-bloom (the server's Bloom filters).

Layout for base key K: bucket ``{K:b}:<label>`` for block b (the buckets of a block
share a hash tag, hence a cluster slot, so that one call checks every live bucket
and adds to the current one atomically). Each bucket key carries an expiry at the
moment it leaves the window, so Redis frees old buckets by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ..core.windows import Bucket, LiveBuckets, WindowSpec
from ..server import scripts
from ..settings.table import default
from .keys import block_re, time_bucket_key
from .reports import FilterFill, TimeWindow


def default_window() -> WindowSpec:
    return WindowSpec.parse(
        default("DEDUP_WINDOW"),
        default("DEDUP_WINDOW_COUNT"),
        default("DEDUP_WINDOW_TZ"),
    )


class Windowed:
    """A mixin before the backend class: the backend has ``server``, ``key``,
    ``prefixes`` (one per block), ``info()`` and ``filter_report(keys)``; this adds the
    live buckets (its :class:`~.layout.Blocks` layout's filters: ``layout.live``),
    their keys in Redis, their expiry and their reports."""

    #: What may follow a bucket's label in one of its keys (a Lua scalable filter's
    #: layers and layer record), as a regular expression.
    bucket_suffix: ClassVar[str] = ""

    server: Any
    key: str
    prefixes: list[str]

    def init_window(self, window: WindowSpec | None, clock: Callable[[], float] | None) -> None:
        self.window = window or default_window()
        self.buckets = LiveBuckets(self.window, self.prefixes, clock, name=time_bucket_key)
        self._bucket_re = block_re(self.key, r"\}:([0-9]+)(" + self.bucket_suffix + r")?$")

    # -- time --------------------------------------------------------------------------

    def now(self) -> float:
        """Current time by the injected clock, else by the Redis server's clock."""
        return self.buckets.now(self.server)

    def bucket_key(self, block: int, bucket: Bucket) -> str:
        return self.buckets.key(block, bucket)

    def live_keys(self, now: float | None = None) -> list[list[str]]:
        """For each block, the keys of the live buckets, the current one first."""
        return self.buckets.at(self.now() if now is None else now).keys

    # -- the buckets in Redis ------------------------------------------------------------

    def label_of(self, key: str) -> str | None:
        """The bucket label in a key of this filter, else None."""
        match = self._bucket_re.match(key)
        return match.group(2) if match else None

    def filter_keys(self, bucket_key: str) -> list[str]:
        """Every key the filter of one block of one bucket may have."""
        return [bucket_key]

    def bucket_keys_in_redis(self) -> list[str]:
        """The keys of this filter's recent buckets (the live ones and as many before
        them) that exist now. Found from the clock, not by SCAN over the keyspace: a
        bucket leaves Redis by its expiry as it leaves the window, so an older one
        exists only if it lost its expiry while live and no janitor pass gave it back
        for a whole window (the janitor restores it from here)."""
        now = self.now()
        candidates = [
            key
            for j in range(2 * self.window.count)
            for block in range(len(self.prefixes))
            for key in self.filter_keys(self.bucket_key(block, self.window.bucket(now, -j)))
        ]
        pipe = self.server.pipeline(transaction=False)
        for key in candidates:
            pipe.exists(key)
        return sorted(key for key, n in zip(candidates, pipe.execute()) if n)

    def restore_expiry(self) -> list[str]:
        """restore_expiry: each bucket key that lost its expiry gets it back."""
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

    # -- reports ---------------------------------------------------------------------------

    def filter_reports(self, info: Mapping[str, Any] | None = None) -> list[FilterFill]:
        """report_fill: one report per live bucket in Redis, the current one first."""
        info = self.info() if info is None else info  # type: ignore[attr-defined]
        return [
            FilterFill.of(
                bucket,
                info["capacity_per_bucket"],
                info["error_rate"],
                label=bucket["label"],
                ttl_ms=bucket["ttl_ms"],
            )
            for bucket in info["buckets"]
            if bucket["exists"]
        ]

    def bucket_infos(self) -> list[dict[str, Any]]:
        """Each live bucket: label, whether it is current and exists, its expiry, and
        the backend's ``filter_report`` of its blocks."""
        out = []
        for j, bucket in enumerate(self.window.live(self.now())):
            keys = [self.bucket_key(b, bucket) for b in range(len(self.prefixes))]
            ttls = [int(self.server.pttl(k)) for k in keys]
            out.append(
                {
                    "label": bucket.label,
                    "current": j == 0,
                    "exists": any(t != -2 for t in ttls),
                    "ttl_ms": max(ttls),
                    **self.filter_report(keys),  # type: ignore[attr-defined]
                }
            )
        return out

    def window_contents(self) -> TimeWindow:
        return TimeWindow(self.window.count, self.window.name, self.window.tz)

    def window_info(self) -> dict[str, Any]:
        return {
            "window": self.window.name,
            "window_count": self.window.count,
            "window_tz": self.window.tz,
            "buckets": self.bucket_infos(),
        }
