"""The registry (``DEDUP_BACKEND`` names -> backend classes) and the factory that
builds a backend from settings, for the dupefilter, the janitor, the commands and
the migration alike."""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from ..exceptions import DedupConfigError
from ..server.connection import get_redis
from ..settings.options import DupefilterOptions, WaitOptions
from ..settings.table import read
from .base import DedupBackend
from .bloom import BloomBackend
from .compact import CompactBackend
from .hash import HashBackend
from .hash_buckets import HashBucketsBackend
from .keys import as_str, meta_key, spider_key
from .native import NativeBloomBackend, WindowedNativeBloomBackend
from .set import SetBackend
from .windowed import WindowedBloomBackend

#: A name's class builds the filter a key holds (``from_settings``); for ``hash``, the
#: layout its record names (layout 1's shards, :class:`HashBackend`), else the buckets
#: every new filter gets.
BACKENDS: dict[str, type[DedupBackend]] = {
    cls.name: cls
    for cls in (
        SetBackend,
        HashBucketsBackend,
        CompactBackend,
        BloomBackend,
        WindowedBloomBackend,
        NativeBloomBackend,
        WindowedNativeBloomBackend,
    )
}

#: The backend whose data ``scrapy migrate-set-to-bloom`` converts (scrapy-redis's set),
#: and the backends it converts it into (``--to``).
MIGRATION_SOURCE = "set"
MIGRATION_TARGETS = (
    "bloom",
    "windowed-bloom",
    "hash",
    "compact",
    "native-bloom",
    "windowed-native-bloom",
)


def get_backend_class(name: object) -> type[DedupBackend]:
    """The class for a registered name or a dotted path to a DedupBackend subclass."""
    valid = ", ".join(repr(n) for n in BACKENDS)
    if isinstance(name, type) and issubclass(name, DedupBackend):
        return name
    if not isinstance(name, str) or not name:
        raise DedupConfigError(
            f"DEDUP_BACKEND must be one of {valid} or the dotted path of a DedupBackend subclass, "
            f"got {name!r}"
        )
    if name in BACKENDS:
        return BACKENDS[name]
    if "." not in name:
        raise DedupConfigError(
            f"Unknown DEDUP_BACKEND {name!r}: use one of {valid}, or the dotted path of a "
            "scrapy_dedup_suite.backends.DedupBackend subclass (e.g. 'myproject.dedup.MyBackend')"
        )
    try:
        cls = load_object(name)
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise DedupConfigError(
            f"DEDUP_BACKEND {name!r} could not be imported ({exc}); use one of {valid}, or the "
            "dotted path of a DedupBackend subclass"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, DedupBackend)):
        raise DedupConfigError(
            f"DEDUP_BACKEND {name!r} is {cls!r}, not a subclass of "
            f"scrapy_dedup_suite.backends.DedupBackend; valid names are {valid}"
        )
    return cls


def dupefilter_key(settings: BaseSettings, backend_name: str, spider_name: str) -> str:
    """``SCHEDULER_DUPEFILTER_KEY`` if the project sets it, else the backend's default."""
    template = settings.get("SCHEDULER_DUPEFILTER_KEY")
    if template is None:
        template = BACKENDS.get(backend_name, DedupBackend).default_key
    if not isinstance(template, str):
        raise DedupConfigError(
            "SCHEDULER_DUPEFILTER_KEY must be a string such as '%(spider)s:dupefilter', "
            f"got {template!r}"
        )
    if "%" in template.replace("%%", "").replace("%(spider)s", ""):
        raise DedupConfigError(
            f"SCHEDULER_DUPEFILTER_KEY {template!r} is not a valid key template: the only "
            "placeholder is %(spider)s (write %% for a literal %)"
        )
    return spider_key(template, spider_name, "SCHEDULER_DUPEFILTER_KEY")


def other_filters(settings: BaseSettings, spider_name: str, chosen: str) -> dict[str, str]:
    """The base key each other registered backend would use for this spider."""
    return {
        name: dupefilter_key(settings, name, spider_name) for name in BACKENDS if name != chosen
    }


def find_other_filters(
    server: Any, others: dict[str, str], chosen: str = ""
) -> list[tuple[str, str, str]]:
    """Which of ``others`` hold data: (backend, key, description) for a scrapy-redis
    set, or a filter's parameter record, found there. A record of the ``chosen``
    backend is this filter's own (SCHEDULER_DUPEFILTER_KEY without the backend in it
    gives every backend one key), not another filter."""
    found = []
    for name, key in others.items():
        if name == MIGRATION_SOURCE:
            if as_str(server.type(key)) == "set":
                count = int(server.scard(key))
                found.append((name, key, f"{key!r} is a scrapy-redis fingerprint set of {count:,}"))
        else:
            record = meta_key(key)
            recorded = (
                server.hget(record, "backend") if as_str(server.type(record)) == "hash" else None
            )
            if recorded is not None and as_str(recorded) != chosen:
                found.append(
                    (name, key, f"{record} records a {as_str(recorded)} filter at {key!r}")
                )
    return found


def check_settings(settings: BaseSettings, spider_name: str | None = None) -> None:
    """Refuse now, without Redis, the DEDUP_* settings the dupefilter would refuse when
    the spider opens (its keys named for ``spider_name``, when known). The components
    Scrapy builds before its engine starts (the batch middleware, the janitor and
    summary extensions) call it, so that a bad setting ends ``scrapy crawl`` with its
    own one-line error: raised from the engine's start, the same error is followed by
    Scrapy's shutdown tracebacks (Scrapy <= 2.19)."""
    name = read(settings, "DEDUP_BACKEND")
    cls = get_backend_class(name)
    key = "settings-check" if spider_name is None else dupefilter_key(settings, name, spider_name)
    if cls in BACKENDS.values():  # (a backend of one's own is checked when it opens)
        cls.from_settings(None, key, settings)  # its parameters; no Redis
    DupefilterOptions.from_settings(settings)
    WaitOptions.from_settings(settings)


def build_backend(
    settings: BaseSettings, spider_name: str, server: Any = None, key: str | None = None
) -> DedupBackend:
    """The backend ``DEDUP_BACKEND`` names, built from settings, not yet opened.

    ``key`` replaces the base key derived from ``SCHEDULER_DUPEFILTER_KEY``.
    """
    cls = get_backend_class(read(settings, "DEDUP_BACKEND"))
    if server is None:
        server = get_redis(settings)
    if key is None:
        key = dupefilter_key(settings, cls.name or settings.get("DEDUP_BACKEND"), spider_name)
    backend = cls.from_settings(server, key, settings)
    wait = WaitOptions.from_settings(settings)
    backend.wait_for_replicas(wait.replicas, wait.timeout)
    return backend


__all__ = [
    "BACKENDS",
    "MIGRATION_SOURCE",
    "MIGRATION_TARGETS",
    "BloomBackend",
    "CompactBackend",
    "DedupBackend",
    "HashBackend",
    "HashBucketsBackend",
    "NativeBloomBackend",
    "SetBackend",
    "WindowedBloomBackend",
    "WindowedNativeBloomBackend",
    "build_backend",
    "check_settings",
    "dupefilter_key",
    "get_backend_class",
]
