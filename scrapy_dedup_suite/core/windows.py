"""Time buckets of the windowed Bloom filter.

A window is ``count`` consecutive buckets of one length: ``"hour"``, ``"day"``,
``"month"`` (calendar units in a time zone) or a number of seconds (aligned on
the Unix epoch). Bucket j = 0 is the current one, j = -1 the one before, and so
on. A bucket is live while it is one of the ``count`` newest, and its Redis key
expires at the start of bucket j + count, the moment it leaves the window.

So a fingerprint recorded at time t is filtered until at least
t + (count - 1) x window and forgotten by t + count x window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Any, NamedTuple

from ..exceptions import DedupConfigError
from .config import check_int

UNITS = ("hour", "day", "month")


def _zone(name: str) -> tzinfo:
    if name.upper() in ("UTC", "Z", "ETC/UTC"):
        return timezone.utc
    try:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError:  # pragma: no cover - Python < 3.9
        raise DedupConfigError("DEDUP_WINDOW_TZ other than UTC needs Python >= 3.9") from None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DedupConfigError(
            f"DEDUP_WINDOW_TZ must be an IANA time zone name such as 'UTC' or 'Europe/Paris', "
            f"got {name!r} (install the tzdata package if this system has no zone database)"
        ) from None


#: Buckets a window may have: each live one is checked for every request.
MAX_WINDOW_COUNT = 1000
#: The longest window in seconds (100 years): dates beyond would not exist.
MAX_WINDOW_SECONDS = 100 * 365 * 86400


@dataclass(frozen=True)
class Bucket:
    label: str
    start: float  # Unix seconds
    end: float  # start of the next bucket


@dataclass(frozen=True)
class WindowSpec:
    unit: str  # "hour", "day", "month" or "seconds"
    seconds: int  # bucket length for unit "seconds", else 0
    count: int
    tz: str

    @classmethod
    def parse(cls, window: object, count: object, tz: object = "UTC") -> WindowSpec:
        count = check_int(
            "DEDUP_WINDOW_COUNT",
            count,
            minimum=1,
            maximum=MAX_WINDOW_COUNT,
            allowed=f"a whole number of buckets from 1 to {MAX_WINDOW_COUNT:,} (every live bucket "
            "is checked for each request: for a longer memory use a longer DEDUP_WINDOW)",
        )
        if not isinstance(tz, str) or not tz:
            raise DedupConfigError(f"DEDUP_WINDOW_TZ must be a time zone name, got {tz!r}")
        _zone(tz)
        allowed = "'hour', 'day', 'month' or a whole number of seconds >= 1"
        if isinstance(window, str) and window.strip().lower() in UNITS:
            return cls(window.strip().lower(), 0, count, tz)
        try:
            seconds = check_int("DEDUP_WINDOW", window, minimum=1, allowed=allowed)
        except DedupConfigError:
            raise DedupConfigError(f"DEDUP_WINDOW must be {allowed}, got {window!r}") from None
        if seconds * count > MAX_WINDOW_SECONDS:
            raise DedupConfigError(
                f"DEDUP_WINDOW={seconds:,} s x DEDUP_WINDOW_COUNT={count:,} spans "
                f"{seconds * count / 86400 / 365:,.0f} years; the window may span at most 100 "
                "years (use 'month' buckets for long windows)"
            )
        return cls("seconds", seconds, count, tz)

    @property
    def name(self) -> str:
        return self.unit if self.unit != "seconds" else f"{self.seconds}s"

    @property
    def zone(self) -> tzinfo:
        return _zone(self.tz)

    def as_meta(self) -> dict[str, str]:
        return {"window": self.name, "window_count": str(self.count), "window_tz": self.tz}

    # -- bucket arithmetic --------------------------------------------------------------

    def bucket(self, now: float, j: int = 0) -> Bucket:
        """Bucket j relative to the one holding ``now`` (0 = current)."""
        return Bucket(self._label(now, j), self._start(now, j), self._start(now, j + 1))

    def live(self, now: float) -> list[Bucket]:
        """The ``count`` live buckets at ``now``, the current one first."""
        return [self.bucket(now, -j) for j in range(self.count)]

    def expire_at(self, now: float) -> float:
        """When the current bucket leaves the window (its key's expiry)."""
        return self._start(now, self.count)

    def label_start(self, label: str) -> float:
        """Start of the bucket a key label names (the inverse of the labels above)."""
        if self.unit == "seconds":
            return float(int(label))
        if self.unit == "hour":
            fmt = "%Y%m%d%H%M" if len(label) == 12 else "%Y%m%d%H"
            return datetime.strptime(label, fmt).replace(tzinfo=timezone.utc).timestamp()
        fmt = "%Y%m%d" if self.unit == "day" else "%Y%m"
        return datetime.strptime(label, fmt).replace(tzinfo=self.zone).timestamp()

    def label_expiry(self, label: str) -> float:
        """When the bucket named ``label`` leaves the window."""
        return self._start(self.label_start(label), self.count)

    def _local_floor(self, now: float) -> datetime:
        local = datetime.fromtimestamp(now, self.zone)
        if self.unit == "hour":
            return local.replace(minute=0, second=0, microsecond=0)
        if self.unit == "day":
            return local.replace(hour=0, minute=0, second=0, microsecond=0)
        return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)

    def _start(self, now: float, j: int) -> float:
        if self.unit == "seconds":
            return (math.floor(now / self.seconds) + j) * self.seconds
        base = self._local_floor(now)
        if self.unit == "hour":
            # Hours are 3600 s everywhere, including across DST changes.
            return base.timestamp() + 3600 * j
        if self.unit == "day":
            day = base.date() + timedelta(days=j)
            return _midnight(day, self.zone)
        months = base.year * 12 + (base.month - 1) + j
        return _midnight(date(months // 12, months % 12 + 1, 1), self.zone)

    def _label(self, now: float, j: int) -> str:
        start = self._start(now, j)
        if self.unit == "seconds":
            return str(int(start))
        if self.unit == "hour":
            # Labelled in UTC: unique even where a local hour repeats (DST end).
            utc = datetime.fromtimestamp(start, timezone.utc)
            return utc.strftime("%Y%m%d%H") + (utc.strftime("%M") if utc.minute else "")
        local = datetime.fromtimestamp(start, self.zone)
        return local.strftime("%Y%m%d" if self.unit == "day" else "%Y%m")


def _midnight(day: date, zone: tzinfo) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=zone).timestamp()


#: How often (seconds of this host's monotonic clock) the server's clock is re-read.
CLOCK_REFRESH = 60.0


class Live(NamedTuple):
    """The live buckets of every block at one moment, and how long that holds."""

    valid_from: float
    valid_until: float
    expire_at: float  # when the current bucket leaves the window
    keys: list[list[str]]  # per block, the live buckets' keys, the current one first


class LiveBuckets:
    """Which buckets of a windowed filter are live now: by an injected ``clock``, or
    by the Redis server's clock (read at first use and every CLOCK_REFRESH seconds
    after, advanced in between by this host's monotonic clock, so a step of the
    host's wall clock moves nothing). Shared by every windowed backend."""

    def __init__(
        self,
        window: WindowSpec,
        prefixes: Sequence[str],
        clock: Callable[[], float] | None = None,
        *,
        name: Callable[[str, str], str],
    ) -> None:
        """``name(prefix, label)``: the key of a block's bucket (keys.time_bucket_key)."""
        self.window = window
        self.prefixes = list(prefixes)
        self._name = name
        self.clock = clock
        self._server_then = 0.0
        self._mono_then = -math.inf
        self._live = Live(0.0, 0.0, 0.0, [])

    def now(self, server: Any) -> float:
        if self.clock is not None:
            return self.clock()
        mono = time.monotonic()
        if mono - self._mono_then >= CLOCK_REFRESH:
            seconds, micros = server.time()
            self._mono_then = mono = time.monotonic()
            self._server_then = int(seconds) + int(micros) / 1e6
        return self._server_then + (mono - self._mono_then)

    def key(self, block: int, bucket: Bucket) -> str:
        return self._name(self.prefixes[block], bucket.label)

    def at(self, now: float) -> Live:
        """The live buckets at ``now``, one snapshot (replaced whole when the bucket
        changes: a batch thread and the reactor may both read it)."""
        live = self._live
        if not live.valid_from <= now < live.valid_until:
            buckets = self.window.live(now)
            keys = [[self.key(b, bucket) for bucket in buckets] for b in range(len(self.prefixes))]
            live = self._live = Live(
                buckets[0].start, buckets[0].end, self.window.expire_at(now), keys
            )
        return live

    def context(self, server: Any) -> tuple[float, Live]:
        """What one add call shares: the time and the live buckets then."""
        now = self.now(server)
        return now, self.at(now)

    @staticmethod
    def ttl_ms(context: tuple[float, Live]) -> int:
        """The expiry (ms) the current bucket must carry at the context's time."""
        now, live = context
        return max(1, int((live.expire_at - now) * 1000))
