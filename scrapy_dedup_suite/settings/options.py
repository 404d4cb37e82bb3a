"""Settings, read and checked once per component into typed options.

Each component is built from its options object (``DupefilterOptions``,
``HashOptions``, ``BloomOptions``, ``WindowOptions``, ``JanitorOptions``...), so
every component can be built and tested without a crawler. Each setting's default
and the values it accepts are in :mod:`.table`; what is here is how
settings combine (scaling turned on by an expansion factor, the legacy sizing...).
The connection's options are in :mod:`..server.connection`, the frontier's in
:mod:`..frontier.frontier_options`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from scrapy.settings import BaseSettings

from ..core import config
from ..core.bloom_math import BloomParams, Scaling, SizingError
from ..core.native_math import NativeParams
from ..core.windows import WindowSpec
from ..exceptions import DedupConfigError
from .table import read


@dataclass(frozen=True)
class DupefilterOptions:
    """The dupefilter's own settings (the backend's are in the backends' options)."""

    fingerprinter: str
    on_error: str
    retries: int
    socket_timeout: float
    debug: bool
    local_cache: int

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> DupefilterOptions:
        return cls(
            fingerprinter=read(settings, "DEDUP_FINGERPRINTER"),
            on_error=read(settings, "DEDUP_ON_ERROR"),
            retries=read(settings, "DEDUP_ERROR_RETRIES"),
            socket_timeout=read(settings, "DEDUP_SOCKET_TIMEOUT"),
            debug=read(settings, "DUPEFILTER_DEBUG"),
            local_cache=read(settings, "DEDUP_LOCAL_CACHE"),
        )


@dataclass(frozen=True)
class HashOptions:
    expire: float
    shards: int | None  # None: the stored filter's, else a new one's (backends/groups.py)
    field_expiry: bool | None  # None: the server's where it suits (see backends/expiry.py)
    capacity: int  # a new filter's buckets are sized for it (backends/hash_buckets.py)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> HashOptions:
        return cls(
            read(settings, "DEDUP_EXPIRE"),
            read(settings, "DEDUP_HASH_SHARDS"),
            read(settings, "DEDUP_HASH_FIELD_EXPIRY"),
            read(settings, "DEDUP_COMPACT_CAPACITY"),
        )


@dataclass(frozen=True)
class CompactOptions:
    capacity: int
    shards: int | None  # None: the stored filter's, else a new one's (backends/groups.py)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> CompactOptions:
        return cls(read(settings, "DEDUP_COMPACT_CAPACITY"), read(settings, "DEDUP_HASH_SHARDS"))


#: The settings each sizing parameter comes from, for bloom_math's messages.
BLOOM_SETTINGS = {
    "capacity": "DEDUP_BLOOM_CAPACITY",
    "error_rate": "DEDUP_BLOOM_ERROR_RATE",
    "blocks": "DEDUP_BLOOM_BLOCKS",
    "bit": "BLOOMFILTER_BIT",
    "hashes": "BLOOMFILTER_HASH_NUMBER",
    "expansion": "DEDUP_BLOOM_EXPANSION",
    "tightening": "DEDUP_BLOOM_TIGHTENING",
    "max_layers": "DEDUP_BLOOM_MAX_LAYERS",
}


T = TypeVar("T")


def sized(make: Callable[..., T], *args: Any) -> T:
    """``make(*args)`` from bloom_math, its SizingError told in settings' names."""
    try:
        return make(*args)
    except SizingError as exc:
        raise DedupConfigError(exc.named(BLOOM_SETTINGS)) from None


@dataclass(frozen=True)
class BloomOptions:
    """The filter's shape (for a scalable filter: its first layer) and its growth."""

    params: BloomParams
    scaling: Scaling | None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BloomOptions:
        scaling = cls.scaling_from_settings(settings)
        return cls(cls.params_from_settings(settings, scaling), scaling)

    @staticmethod
    def scaling_from_settings(settings: BaseSettings) -> Scaling | None:
        """``DEDUP_BLOOM_SCALING`` / ``_EXPANSION`` / ``_TIGHTENING`` / ``_MAX_LAYERS``:
        None for a fixed filter. Setting an expansion factor alone turns scaling on."""
        expansion_set = config.has(settings, "DEDUP_BLOOM_EXPANSION")
        if config.has(settings, "DEDUP_BLOOM_SCALING"):
            scaling = read(settings, "DEDUP_BLOOM_SCALING")
            if not scaling and expansion_set:
                raise DedupConfigError(
                    "DEDUP_BLOOM_SCALING is False but DEDUP_BLOOM_EXPANSION is set; an expansion "
                    "factor only means something for a scalable filter. Remove one of them."
                )
        else:
            scaling = expansion_set or read(settings, "DEDUP_BLOOM_SCALING")
        if not scaling:
            return None
        return sized(
            Scaling,
            read(settings, "DEDUP_BLOOM_EXPANSION"),
            read(settings, "DEDUP_BLOOM_TIGHTENING"),
            read(settings, "DEDUP_BLOOM_MAX_LAYERS"),
        )

    @staticmethod
    def params_from_settings(settings: BaseSettings, scaling: Scaling | None) -> BloomParams:
        """Filter shape from ``DEDUP_BLOOM_*``, or from scrapy-redis-bloomfilter's
        ``BLOOMFILTER_BIT`` / ``BLOOMFILTER_HASH_NUMBER`` for people moving over.
        With ``scaling``: the shape of the first layer."""
        error_rate = read(settings, "DEDUP_BLOOM_ERROR_RATE")
        legacy = config.has(settings, "BLOOMFILTER_BIT") or config.has(
            settings, "BLOOMFILTER_HASH_NUMBER"
        )
        capacity = read(settings, "DEDUP_BLOOM_CAPACITY")
        blocks = read(settings, "DEDUP_BLOOM_BLOCKS")
        if scaling is not None:
            if legacy:
                raise DedupConfigError(
                    "A scalable filter (DEDUP_BLOOM_SCALING / DEDUP_BLOOM_EXPANSION) is sized by "
                    "DEDUP_BLOOM_CAPACITY and DEDUP_BLOOM_ERROR_RATE; remove BLOOMFILTER_BIT and "
                    "BLOOMFILTER_HASH_NUMBER."
                )
            return sized(scaling.first_layer, capacity, error_rate, blocks)
        if legacy:
            if config.has(settings, "DEDUP_BLOOM_CAPACITY"):
                raise DedupConfigError(
                    "Both DEDUP_BLOOM_CAPACITY and BLOOMFILTER_BIT/BLOOMFILTER_HASH_NUMBER are "
                    "set; they size the same filter in two ways. Keep DEDUP_BLOOM_CAPACITY (and "
                    "DEDUP_BLOOM_ERROR_RATE) and remove the BLOOMFILTER_* settings."
                )
            bit = read(settings, "BLOOMFILTER_BIT")
            hashes = read(settings, "BLOOMFILTER_HASH_NUMBER")
            return sized(BloomParams.from_bit_exponent, bit, hashes, error_rate)
        return sized(BloomParams.from_capacity, capacity, error_rate, blocks)


#: Settings of the Lua bloom backends that a server-side Bloom filter has no use for.
NOT_NATIVE = {
    "DEDUP_BLOOM_TIGHTENING": "the server halves each new sub-filter's error rate itself",
    "DEDUP_BLOOM_MAX_LAYERS": "the server adds sub-filters as long as memory allows",
    "BLOOMFILTER_BIT": "the server sizes its filters from DEDUP_BLOOM_CAPACITY",
    "BLOOMFILTER_HASH_NUMBER": "the server chooses its hashes from DEDUP_BLOOM_ERROR_RATE",
}


@dataclass(frozen=True)
class NativeBloomOptions:
    """A server-side Bloom filter (BF.*): capacity, error rate, blocks, and its growth
    (DEDUP_BLOOM_SCALING / DEDUP_BLOOM_EXPANSION: EXPANSION, else NONSCALING)."""

    params: NativeParams

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> NativeBloomOptions:
        for name, why in NOT_NATIVE.items():
            if config.has(settings, name):
                raise DedupConfigError(
                    f"{name} does not apply to the native-bloom backends ({why}); remove it, or "
                    "use DEDUP_BACKEND = 'bloom' for the Lua filter it configures"
                )
        scaling = BloomOptions.scaling_from_settings(settings)
        capacity = read(settings, "DEDUP_BLOOM_CAPACITY")
        error_rate = read(settings, "DEDUP_BLOOM_ERROR_RATE")
        blocks = read(settings, "DEDUP_BLOOM_BLOCKS")
        expansion = scaling.expansion if scaling is not None else 0
        return cls(sized(NativeParams.create, capacity, error_rate, blocks, expansion))


@dataclass(frozen=True)
class WaitOptions:
    """Replicas each write waits for (WAIT), and how long at most."""

    replicas: int
    timeout: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WaitOptions:
        return cls(read(settings, "DEDUP_WAIT_REPLICAS"), read(settings, "DEDUP_WAIT_TIMEOUT"))


@dataclass(frozen=True)
class WindowOptions:
    window: WindowSpec

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WindowOptions:
        return cls(
            WindowSpec.parse(
                read(settings, "DEDUP_WINDOW"),
                read(settings, "DEDUP_WINDOW_COUNT"),
                read(settings, "DEDUP_WINDOW_TZ"),
            )
        )


@dataclass(frozen=True)
class JanitorOptions:
    interval: float
    cron: str
    batch: int
    lock_timeout: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> JanitorOptions:
        return cls(
            interval=read(settings, "DEDUP_JANITOR_INTERVAL"),
            cron=read(settings, "DEDUP_JANITOR_CRON"),
            batch=read(settings, "DEDUP_JANITOR_BATCH"),
            lock_timeout=read(settings, "DEDUP_JANITOR_LOCK_TIMEOUT"),
        )


@dataclass(frozen=True)
class BatchOptions:
    """BatchDedupMiddleware's settings."""

    size: int
    threads: int
    outage_wait: float = 0.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BatchOptions:
        return cls(
            read(settings, "DEDUP_BATCH_SIZE"),
            read(settings, "DEDUP_BATCH_THREADS"),
            read(settings, "DEDUP_BATCH_OUTAGE_WAIT"),
        )
