"""What a backend is and can do beyond checking and recording, declared once by each
backend class as a :class:`Capabilities` (``DedupBackend.capabilities``): the dupefilter,
the janitor, the commands and the migration ask it, never a backend's name or class,
so a backend of one's own gets what it declares. A class that declares a capability
must define its methods (checked when the class is made)."""

from __future__ import annotations

from dataclasses import dataclass, fields


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
    #: An answer never turns from "seen" back to "new" (until clear()): what a process
    #: learns may be kept in its local cache (DEDUP_LOCAL_CACHE).
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

    def declared(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


#: The methods a backend declaring each capability defines.
METHODS = {
    "purge_expired": ("purge_units", "purge_step", "purge_remaining"),
    "report_fill": ("filter_reports",),
    "restore_expiry": ("restore_expiry",),
    "count": ("count",),
    "bulk_bits": ("bulk_target", "bulk_fill"),
}
