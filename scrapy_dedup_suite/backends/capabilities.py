"""What a backend is and can do beyond checking and recording, declared once by each
backend class as a :class:`Capabilities` (``DedupBackend.capabilities``): the dupefilter,
the janitor, the commands and the migration ask it, never a backend's name or class,
so a backend of one's own gets what it declares. A class that declares a capability
must define its methods (checked when the class is made)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .purge import OnScan, PurgeStep
from .reports import FilterFill


@dataclass(frozen=True)
class Capabilities:
    #: Answers may be false positives (a Bloom filter): duplicates also count in
    #: ``bloomfilter/filtered``, custom fingerprints are spread before they are hashed,
    #: and a scrapy-redis set found at its key is offered for conversion.
    probabilistic: bool = False
    #: Fingerprints must be hex digests (the Lua Bloom filters hash them so).
    hex_fingerprints: bool = False
    #: Each fingerprint expires: ``check_and_add`` honours an expiry, and the backend's
    #: ``expire`` is its default (DEDUP_EXPIRE).
    expiring_fingerprints: bool = False
    #: Some keys carry an expiry (time buckets): a ``volatile-*`` eviction policy can
    #: delete them too.
    expiring_keys: bool = False
    #: An answer never turns from "seen" back to "new" but by clear() or a forget: what
    #: a process learns may be kept in its local cache (DEDUP_LOCAL_CACHE).
    stable_answers: bool = False
    #: The janitor purges expired entries: ``purge_units()``, ``purge_step()``,
    #: ``purge_remaining()``.
    purge_expired: bool = False
    #: Bloom filters whose fill the janitor reports: ``filter_reports()``.
    report_fill: bool = False
    #: Keys that must carry an expiry and may have lost it: ``restore_expiry()``.
    restore_expiry: bool = False
    #: An exact number of entries: ``count()``.
    count: bool = False
    #: Bloom bits a migration may OR in: ``bulk_target()``, ``bulk_fill()``.
    bulk_bits: bool = False
    #: Fingerprints can be removed, so that their pages count as new again (a page
    #: that failed for good): ``forget_many()``.
    forget: bool = False

    def declared(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


#: The methods a backend declaring each capability defines.
METHODS = {
    "purge_expired": ("purge_units", "purge_step", "purge_remaining"),
    "report_fill": ("filter_reports",),
    "restore_expiry": ("restore_expiry",),
    "count": ("count",),
    "bulk_bits": ("bulk_target", "bulk_fill"),
    "forget": ("forget_many",),
}


class CapabilityMethods:
    """The methods each capability gives (:data:`METHODS`), which a backend declaring it
    defines (checked when its class is made); :class:`~.base.DedupBackend` inherits
    these stubs, so that a caller asks ``backend.capabilities`` first."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared: Capabilities = getattr(cls, "capabilities", Capabilities())
        for capability in declared.declared():
            for method in METHODS.get(capability, ()):
                if getattr(cls, method) is getattr(CapabilityMethods, method):
                    raise TypeError(
                        f"{cls.__name__} declares {capability} but does not define {method}()"
                    )

    def purge_units(self) -> list[str]:
        """purge_expired: what the janitor walks in order, a :meth:`purge_step` at a time
        (a shard, a group of buckets), named for messages; none when the server expires
        the entries itself."""
        raise NotImplementedError

    def purge_step(
        self, unit: int, cursor: int, batch: int, on_scan: OnScan | None = None
    ) -> PurgeStep:
        """purge_expired: delete the expired entries of about ``batch`` fields of unit
        number ``unit`` from ``cursor`` (0: its start); the step's cursor is where the
        next step goes on, 0 when the unit is done."""
        raise NotImplementedError

    def purge_remaining(self) -> int:
        """purge_expired: how many entries are stored (expired or not) after a purge."""
        raise NotImplementedError

    def filter_reports(self, info: Mapping[str, Any] | None = None) -> list[FilterFill]:
        """report_fill: each Bloom filter's fill (a time bucket's with its label and
        expiry; a scalable filter's with its layers). ``info``: this backend's
        :meth:`info`, when the caller has read it already (else it is read)."""
        raise NotImplementedError

    def restore_expiry(self) -> list[str]:
        """restore_expiry: give each key that must expire and lost its expiry (a restore
        from a backup, say) its expiry back; return those keys."""
        raise NotImplementedError

    def count(self) -> int:
        """count: how many entries are stored."""
        raise NotImplementedError

    def bulk_target(self, block: int) -> tuple[str, int]:
        """bulk_bits: the bitmap a migration ORs block ``block``'s bits into now, and
        the expiry in ms it must carry (0: none)."""
        raise NotImplementedError

    def forget_many(self, fingerprints: Iterable[str]) -> int:
        """forget: remove ``fingerprints``; how many were recorded."""
        raise NotImplementedError

    def bulk_fill(self) -> tuple[str, float]:
        """bulk_bits: where the bits go now (a bucket's label, or "") and about how
        many fingerprints are there already."""
        raise NotImplementedError
