"""A filter's parameter record (``K:meta``) and the stamps beside its data: what the
data was written with, created at the first open, compared at every open, and the
messages that say in a user's terms (settings) what differs."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import ResponseError

from ..exceptions import FilterMismatchError, WrongKeyTypeError
from ..server import scripts
from ..server.failures import code_of
from .keys import as_str, read_hash
from .views import TypedView

logger = logging.getLogger(__name__)


#: The setting behind each field of a parameter record ...
FIELD_SETTINGS = {
    "capacity": "DEDUP_BLOOM_CAPACITY",
    "error_rate": "DEDUP_BLOOM_ERROR_RATE",
    "compound_error_rate": "DEDUP_BLOOM_ERROR_RATE",
    "blocks": "DEDUP_BLOOM_BLOCKS",
    "expansion": "DEDUP_BLOOM_EXPANSION",
    "scaling": "DEDUP_BLOOM_SCALING",
    "tightening": "DEDUP_BLOOM_TIGHTENING",
    "max_layers": "DEDUP_BLOOM_MAX_LAYERS",
    "shards": "DEDUP_HASH_SHARDS",
    "sized_for": "DEDUP_COMPACT_CAPACITY",
    "expiry": "DEDUP_HASH_FIELD_EXPIRY",
    "window": "DEDUP_WINDOW",
    "window_count": "DEDUP_WINDOW_COUNT",
    "window_tz": "DEDUP_WINDOW_TZ",
}
#: ... and the command option that sets it too.
FIELD_OPTIONS = {
    "capacity": "--capacity of migrate-set-to-bloom",
    "error_rate": "--error-rate",
    "compound_error_rate": "--error-rate",
}

#: Record fields computed from others: a Bloom filter's bits and hashes follow from
#: its capacity, error rate and blocks, which are what a user sets.
DERIVED = {"block_bits": ("capacity", "error_rate", "blocks"), "hashes": ("capacity", "error_rate")}


def set_by(field: str) -> str:
    """The setting (and option) that sets a record field: 'DEDUP_BLOOM_CAPACITY, or ...'."""
    option = FIELD_OPTIONS.get(field)
    return FIELD_SETTINGS[field] + (f", or {option}" if option else "")


def shown(value: str | None) -> str | None:
    """A record's value as a user reads it: large whole numbers with separators."""
    if value is not None and value.isdigit() and len(value) > 4:
        return f"{int(value):,}"
    return value


def as_setting(field: str, value: str) -> str:
    """A record's value written as the setting takes it, so that the advice "Set
    NAME = VALUE" is itself accepted: DEDUP_WINDOW = 30 (stored "30s"), 'day'."""
    if field == "window" and value.endswith("s") and value[:-1].isdigit():
        return value[:-1]
    if field == "expiry" and value in ("server", "janitor"):
        return str(value == "server")
    if field == "scaling" and value in ("0", "1"):
        return str(value == "1")
    try:
        float(value)
    except ValueError:
        return repr(value)
    return value


def in_user_terms(
    different: Sequence[str], stored: Mapping[str, str], wanted: Mapping[str, str]
) -> list[str]:
    """``different`` with derived fields replaced by the ones a user set, where
    those differ too (else the derived ones stay: a change of scheme, say)."""
    out: list[str] = []
    for name in different:
        sources = [f for f in DERIVED.get(name, ()) if stored.get(f) != wanted.get(f)]
        if sources and all(f in stored for f in sources):
            out += [f for f in sources if f not in out]
        elif name not in out:
            out.append(name)
    if "compound_error_rate" in stored:
        # A scalable filter: DEDUP_BLOOM_ERROR_RATE is its compound rate; the first
        # layer's own rate follows from it.
        out = ["compound_error_rate" if f == "error_rate" else f for f in out]
        out = [f for i, f in enumerate(out) if f not in out[:i]]
    return out


@dataclass(frozen=True)
class MetaSpec:
    """A parameter record: its key, the fields to write, the fields that must match."""

    key: str
    fields: dict[str, str]
    compare: tuple[str, ...]

    @property
    def stamp(self) -> str:
        """The compared fields as one string: what each slot's stamp holds."""
        return ";".join(
            f"{name}={self.fields.get(name, '')}" for name in ("backend", *self.compare)
        )

    @property
    def flat_fields(self) -> list[str]:
        """The fields to write as a script's arguments: name, value, name, value, ..."""
        return [part for item in self.fields.items() for part in item]

    @staticmethod
    def parse_stamp(stamp: str) -> dict[str, str]:
        return dict(part.partition("=")[::2] for part in stamp.split(";"))


def stored_parameters(server: Any, key: str, stamp_keys: Sequence[str]) -> list[dict[str, str]]:
    """What the filter stored at ``key`` was written with: its record (``key``), else
    each of its stamps found (none of them: nothing is stored)."""
    if as_str(server.type(key)) == "hash":
        return [read_hash(server, key)]
    pipe = server.pipeline(transaction=False)
    for stamp in stamp_keys:
        pipe.get(stamp)
    return [
        MetaSpec.parse_stamp(as_str(v))
        for v in pipe.execute(raise_on_error=False)
        if isinstance(v, (bytes, str))
    ]


def refuse_orphans(orphans: Sequence[str], meta_key: str) -> None:
    """Refuse data keys that exist without the record of their parameters."""
    if orphans:
        raise FilterMismatchError(
            f"Redis key(s) {', '.join(map(repr, orphans))} exist but {meta_key!r}, the record "
            "of the parameters they were written with, does not, so this package cannot tell "
            "what they hold. Nothing was changed. Move them away (RENAME) or point the "
            "dupefilter at another key with SCHEDULER_DUPEFILTER_KEY."
        )


class Recorded(TypedView, Protocol):
    """What the record's checks read of a filter (a :class:`~.stored.StoredFilter`)."""

    def meta_spec(self) -> MetaSpec | None: ...

    def compare_meta(self, spec: MetaSpec, stored: Mapping[str, str]) -> None: ...

    def stamp_of(self, data_key: str) -> str | None: ...


def check_stamps(backend: Recorded, found: Mapping[str, str], spec: MetaSpec) -> None:
    """Refuse data written with other parameters, or with no record of them.

    The stamps stand in for a missing parameter record (after a clear() by
    another worker, FLUSHALL, or a lost ``K:meta``): when every slot that holds
    data is stamped with these parameters, the record is recreated by
    :meth:`init_meta`; data with no stamp and no record is refused as before.
    """
    stamp_keys = sorted(
        {k for k, kind in found.items() if kind != "none" and backend.stamp_of(k) == k}
    )
    stamps: dict[str, str] = {}
    if stamp_keys:
        pipe = backend.server.pipeline(transaction=False)
        for key in stamp_keys:
            pipe.get(key)
        stamps = {k: as_str(v) for k, v in zip(stamp_keys, pipe.execute()) if v is not None}
    if any(stamp != spec.stamp for stamp in stamps.values()) and found.get(spec.key) == "hash":
        # The record says the same in the user's terms (capacity, error rate).
        record = read_hash(backend.server, spec.key)
        if record:
            backend.compare_meta(spec, record)
    for key, stamp in stamps.items():
        if stamp != spec.stamp:
            try:
                backend.compare_meta(spec, MetaSpec.parse_stamp(stamp))
            except FilterMismatchError as exc:
                raise FilterMismatchError(f"{exc} (found in the stamp {key!r})") from None
    if found.get(spec.key) != "none":
        return
    # Data: every key found but the record and the stamps. A key with no stamp (a
    # backend that keeps none, or data from before stamps) is an orphan here.
    data = [
        k
        for k, kind in found.items()
        if kind != "none" and k != spec.key and backend.stamp_of(k) != k
    ]
    refuse_orphans([k for k in data if backend.stamp_of(k) not in stamps], spec.key)
    if data or stamps:
        # (A layout with too many keys to list at open, compact buckets, shows its
        # data by its stamps alone.)
        logger.warning(
            "The parameter record %r of the %s dupefilter was missing (a clear() by "
            "another worker, FLUSHALL, eviction or a manual DEL) while its data remains "
            "(%d key(s) found, in %d stamped slot(s), stamped with these parameters): "
            "recreating the record",
            spec.key,
            backend.name,
            len(data),
            len(stamps),
        )


def init_meta(backend: Recorded, spec: MetaSpec) -> bool:
    """Create the parameter record or check it; True when this call created it."""
    try:
        created, flat = scripts.META_INIT(backend.server, [spec.key], spec.flat_fields)
    except ResponseError as exc:
        if code_of(exc) == "dedup:WRONGTYPE":
            kind = as_str(backend.server.type(spec.key))
            raise WrongKeyTypeError(spec.key, kind, "hash", backend.wrong_type_hint(kind)) from None
        raise
    backend.compare_meta(
        spec, {as_str(flat[i]): as_str(flat[i + 1]) for i in range(0, len(flat), 2)}
    )
    return bool(created)


def compare_meta(key: str, spec: MetaSpec, stored: Mapping[str, str]) -> None:
    """Raise FilterMismatchError unless ``stored`` matches the compared fields."""
    wanted = spec.fields
    if stored.get("backend") != wanted["backend"]:
        raise FilterMismatchError(
            f"{spec.key!r} describes a {stored.get('backend', 'unknown')!r} filter, not "
            f"{wanted['backend']!r}. Set DEDUP_BACKEND={stored.get('backend')!r} to use it, or "
            "point the dupefilter at another key with SCHEDULER_DUPEFILTER_KEY."
        )
    different = [f for f in spec.compare if stored.get(f) != wanted.get(f)]
    if not different:
        return
    different = in_user_terms(different, stored, wanted)
    diff = ", ".join(
        f"{f}: stored {shown(stored.get(f))!r}, configured {shown(wanted.get(f))!r}"
        + (f" ({set_by(f)})" if f in FIELD_SETTINGS else "")
        for f in different
    )
    fix = [
        f"{FIELD_SETTINGS[f]} = {as_setting(f, stored[f])}"
        for f in different
        if f in FIELD_SETTINGS and stored.get(f) is not None
    ]
    use = (
        f"Set {', '.join(fix)} as when it was created"
        if fix
        else (f"Use the settings it was created with (stored in {spec.key!r})")
    )
    raise FilterMismatchError(
        f"The {wanted['backend']} filter at {key!r} was created with other "
        f"parameters ({diff}). Opening it with these settings would read and write the "
        f"wrong places. {use}, or point the dupefilter at another key with "
        "SCHEDULER_DUPEFILTER_KEY; delete the old keys only if their contents may be lost."
    )


def verify(backend: Recorded) -> bool:
    """``backend.verify()``: key types and the stored parameters checked as at open,
    creating nothing; False when nothing of the filter is stored yet."""
    found = backend.check_types(backend.expected_types())
    spec = backend.meta_spec()
    if spec is None:
        return any(kind != "none" for kind in found.values())
    check_stamps(backend, found, spec)
    if found[spec.key] == "none":
        return any(kind != "none" for kind in found.values())
    stored = read_hash(backend.server, spec.key)
    backend.compare_meta(spec, stored)
    return True
