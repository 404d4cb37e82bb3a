"""Settings, read and validated once per component into plain typed options.

Each component is built from its options object (``DupefilterOptions``,
``HashOptions``, ``BloomOptions``, ``WindowOptions``, ``JanitorOptions``), so
every component can be built and tested without a crawler, and every setting is
read in one place, with its default from :mod:`.defaults` and an error that
names it. (The connection's settings are scrapy-redis's, read by
:func:`.connection.get_redis`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from . import config
from .bloom_math import BloomParams, NativeParams, Scaling, SizingError
from .exceptions import DedupConfigError
from .windows import WindowSpec

#: The most immediate retries of one failed call (DEDUP_ON_ERROR='raise').
MAX_RETRIES = 10
#: What DEDUP_ON_ERROR may be.
ON_ERROR = ("allow", "raise")


def value(settings: BaseSettings, name: str) -> Any:
    """The setting ``name``, or its default (``defaults.py``) when the project has none."""
    found = settings.get(name)
    return config.default(name) if found is None else found


def check_retries(retries: Any) -> int:
    return config.check_int(
        "DEDUP_ERROR_RETRIES",
        retries,
        minimum=0,
        maximum=MAX_RETRIES,
        allowed=f"a whole number from 0 to {MAX_RETRIES} (each retry may wait "
        "DEDUP_SOCKET_TIMEOUT)",
    )


#: The largest local cache (DEDUP_LOCAL_CACHE), in fingerprints.
MAX_LOCAL_CACHE = 100_000_000


def check_local_cache(size: Any) -> int:
    allowed = f"a whole number of fingerprints from 0 (off) to {MAX_LOCAL_CACHE:,}"
    return config.check_int(
        "DEDUP_LOCAL_CACHE", size, minimum=0, maximum=MAX_LOCAL_CACHE, allowed=allowed
    )


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
        from .fingerprint import FINGERPRINTERS

        return cls(
            fingerprinter=config.check_choice(
                "DEDUP_FINGERPRINTER", value(settings, "DEDUP_FINGERPRINTER"), FINGERPRINTERS
            ),
            on_error=config.check_choice(
                "DEDUP_ON_ERROR", value(settings, "DEDUP_ON_ERROR"), ON_ERROR
            ),
            retries=check_retries(value(settings, "DEDUP_ERROR_RETRIES")),
            socket_timeout=config.check_float(
                "DEDUP_SOCKET_TIMEOUT",
                value(settings, "DEDUP_SOCKET_TIMEOUT"),
                low=0.0,
                high=3600.0,
                low_open=True,
                high_open=False,
                allowed="a number of seconds > 0 and <= 3600 (e.g. 5)",
            ),
            debug=settings.getbool("DUPEFILTER_DEBUG"),
            local_cache=check_local_cache(value(settings, "DEDUP_LOCAL_CACHE")),
        )


@dataclass(frozen=True)
class HashOptions:
    expire: float
    shards: int
    field_expiry: bool | None  # None: the server's where it has it (see defaults)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> HashOptions:
        # Checked by HashBackend, which hand-built backends go through too.
        field_expiry = value(settings, "DEDUP_HASH_FIELD_EXPIRY")
        if field_expiry is not None and not (
            isinstance(field_expiry, str) and field_expiry.strip().lower() in ("", "auto", "none")
        ):
            field_expiry = config.check_bool("DEDUP_HASH_FIELD_EXPIRY", field_expiry)
        else:
            field_expiry = None
        return cls(
            value(settings, "DEDUP_EXPIRE"), value(settings, "DEDUP_HASH_SHARDS"), field_expiry
        )


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


def sized(make: Any, *args: Any) -> Any:
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
            scaling = config.check_bool("DEDUP_BLOOM_SCALING", settings.get("DEDUP_BLOOM_SCALING"))
            if not scaling and expansion_set:
                raise DedupConfigError(
                    "DEDUP_BLOOM_SCALING is False but DEDUP_BLOOM_EXPANSION is set; an expansion "
                    "factor only means something for a scalable filter. Remove one of them."
                )
        else:
            scaling = expansion_set or config.default("DEDUP_BLOOM_SCALING")
        if not scaling:
            return None
        return sized(
            Scaling,
            config.check_int(
                "DEDUP_BLOOM_EXPANSION",
                value(settings, "DEDUP_BLOOM_EXPANSION"),
                minimum=1,
                allowed="a whole factor >= 1 (2 doubles each new layer)",
            ),
            config.check_float(
                "DEDUP_BLOOM_TIGHTENING",
                value(settings, "DEDUP_BLOOM_TIGHTENING"),
                low=0.0,
                high=1.0,
                low_open=True,
                high_open=True,
                allowed="a ratio strictly between 0 and 1 (e.g. 0.5)",
            ),
            config.check_int(
                "DEDUP_BLOOM_MAX_LAYERS", value(settings, "DEDUP_BLOOM_MAX_LAYERS"), minimum=1
            ),
        )

    @staticmethod
    def params_from_settings(settings: BaseSettings, scaling: Scaling | None) -> BloomParams:
        """Filter shape from ``DEDUP_BLOOM_*``, or from scrapy-redis-bloomfilter's
        ``BLOOMFILTER_BIT`` / ``BLOOMFILTER_HASH_NUMBER`` for people moving over.
        With ``scaling``: the shape of the first layer."""
        error_rate = config.check_error_rate(
            "DEDUP_BLOOM_ERROR_RATE", value(settings, "DEDUP_BLOOM_ERROR_RATE")
        )
        legacy = config.has(settings, "BLOOMFILTER_BIT") or config.has(
            settings, "BLOOMFILTER_HASH_NUMBER"
        )
        capacity = config.check_capacity(
            "DEDUP_BLOOM_CAPACITY", value(settings, "DEDUP_BLOOM_CAPACITY")
        )
        blocks = config.check_int(
            "DEDUP_BLOOM_BLOCKS",
            value(settings, "DEDUP_BLOOM_BLOCKS"),
            minimum=0,
            allowed="0 (automatic) or a number of blocks >= 1",
        )
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
            bit = config.check_int(
                "BLOOMFILTER_BIT",
                settings.get("BLOOMFILTER_BIT", 30),
                minimum=3,
                allowed="a whole number from 3 to 40 (m = 2^BIT)",
            )
            hashes = config.check_int(
                "BLOOMFILTER_HASH_NUMBER",
                settings.get("BLOOMFILTER_HASH_NUMBER", 6),
                minimum=1,
                allowed="a whole number from 1 to 64",
            )
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
        capacity = config.check_capacity(
            "DEDUP_BLOOM_CAPACITY", value(settings, "DEDUP_BLOOM_CAPACITY")
        )
        error_rate = config.check_error_rate(
            "DEDUP_BLOOM_ERROR_RATE", value(settings, "DEDUP_BLOOM_ERROR_RATE")
        )
        blocks = config.check_int(
            "DEDUP_BLOOM_BLOCKS",
            value(settings, "DEDUP_BLOOM_BLOCKS"),
            minimum=0,
            allowed="0 (automatic) or a number of blocks >= 1",
        )
        expansion = scaling.expansion if scaling is not None else 0
        return cls(sized(NativeParams.create, capacity, error_rate, blocks, expansion))


@dataclass(frozen=True)
class WaitOptions:
    """Replicas each write waits for (WAIT), and how long at most."""

    replicas: int
    timeout: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WaitOptions:
        replicas = config.check_int(
            "DEDUP_WAIT_REPLICAS",
            value(settings, "DEDUP_WAIT_REPLICAS"),
            minimum=0,
            allowed="a number of replicas >= 0 (0: do not wait)",
        )
        timeout = config.check_float(
            "DEDUP_WAIT_TIMEOUT",
            value(settings, "DEDUP_WAIT_TIMEOUT"),
            low=0.0,
            high=3600.0,
            low_open=True,
            high_open=False,
            allowed="a number of seconds > 0 (e.g. 1.0)",
        )
        return cls(replicas, timeout)


@dataclass(frozen=True)
class WindowOptions:
    window: WindowSpec

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WindowOptions:
        return cls(
            WindowSpec.parse(
                value(settings, "DEDUP_WINDOW"),
                value(settings, "DEDUP_WINDOW_COUNT"),
                value(settings, "DEDUP_WINDOW_TZ"),
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
        cron = value(settings, "DEDUP_JANITOR_CRON")
        if not isinstance(cron, str):
            raise DedupConfigError(
                f"DEDUP_JANITOR_CRON must be a cron expression such as '*/10 * * * *', got {cron!r}"
            )
        return cls(
            interval=config.check_float(
                "DEDUP_JANITOR_INTERVAL",
                value(settings, "DEDUP_JANITOR_INTERVAL"),
                low=0.0,
                high=10 * 365 * 86400.0,
                low_open=False,
                high_open=False,
                allowed="a number of seconds >= 0 (0 disables the janitor extension)",
            ),
            cron=cron,
            # Checked by Janitor, which hand-built janitors go through too.
            batch=value(settings, "DEDUP_JANITOR_BATCH"),
            lock_timeout=value(settings, "DEDUP_JANITOR_LOCK_TIMEOUT"),
        )


#: The largest batch BatchDedupMiddleware sends in one call.
MAX_BATCH_SIZE = 10_000
#: The most batches in flight at once (threads, each with its own connection).
MAX_BATCH_THREADS = 64


@dataclass(frozen=True)
class BatchOptions:
    """BatchDedupMiddleware's settings."""

    size: int
    threads: int
    outage_wait: float = 0.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BatchOptions:
        size = config.check_int(
            "DEDUP_BATCH_SIZE",
            value(settings, "DEDUP_BATCH_SIZE"),
            minimum=1,
            maximum=MAX_BATCH_SIZE,
            allowed=f"a whole number of requests from 1 to {MAX_BATCH_SIZE:,} (one call holds "
            "the server for the whole batch)",
        )
        threads = config.check_int(
            "DEDUP_BATCH_THREADS",
            value(settings, "DEDUP_BATCH_THREADS"),
            minimum=1,
            maximum=MAX_BATCH_THREADS,
            allowed=f"a whole number of threads from 1 to {MAX_BATCH_THREADS}",
        )
        outage_wait = config.check_float(
            "DEDUP_BATCH_OUTAGE_WAIT",
            value(settings, "DEDUP_BATCH_OUTAGE_WAIT"),
            low=0.0,
            high=3600.0,
            low_open=False,
            high_open=False,
            allowed="a number of seconds from 0 to 3600 (e.g. 30; 0: do not wait)",
        )
        return cls(size, threads, outage_wait)
