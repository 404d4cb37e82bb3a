"""The registry: ``DEDUP_BACKEND`` names -> backend classes."""

from __future__ import annotations

from scrapy.utils.misc import load_object

from ..exceptions import DedupConfigError
from .base import DedupBackend
from .bloom import BloomBackend
from .hash import HashBackend
from .set import SetBackend
from .windowed import WindowedBloomBackend

BACKENDS: dict[str, type[DedupBackend]] = {
    cls.name: cls for cls in (SetBackend, HashBackend, BloomBackend, WindowedBloomBackend)
}


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


__all__ = [
    "BACKENDS",
    "BloomBackend",
    "DedupBackend",
    "HashBackend",
    "SetBackend",
    "WindowedBloomBackend",
    "get_backend_class",
]
