"""Deleting a filter: every key it owns, and nothing else (``StoredFilter.clear``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from ..exceptions import WrongKeyTypeError
from ..server import scripts
from .keys import TYPE_NAMES, as_str, slot_of
from .meta import MetaSpec
from .views import TypedView


class Cleared(TypedView, Protocol):
    """What clearing reads of a filter (a :class:`~.stored.StoredFilter`)."""

    def side_keys(self) -> dict[str, str]: ...

    def meta_spec(self) -> MetaSpec | None: ...


logger = logging.getLogger(__name__)


def clear(backend: Cleared) -> int:
    """Delete every key ``backend`` owns (its data, record, and what it keeps beside:
    the janitor's and a migration's state); return how many. Types are checked first:
    if any of those keys holds another type, nothing is deleted and
    :class:`WrongKeyTypeError` is raised."""
    expected = {
        **backend.expected_types(),
        **backend.side_keys(),
    }
    backend.check_types(expected)
    spec = backend.meta_spec()
    # The record first, then each slot's keys in one atomic call: a worker that goes
    # on recording meanwhile stamps what it writes (see record.check_stamps), so
    # nothing it leaves behind is an orphan.
    groups: dict[int, list[str]] = {}
    first = [spec.key] if spec is not None and spec.key in expected else []
    for key in expected:
        if key not in first:
            groups.setdefault(slot_of(key), []).append(key)
    deleted = sum(delete_if_type(backend, keys, expected) for keys in [first, *groups.values()])
    logger.info(
        "Cleared %d Redis key(s) of the %s dupefilter at %r", deleted, backend.name, backend.key
    )
    return deleted


def delete_if_type(backend: Cleared, keys: list[str], expected: Mapping[str, str]) -> int:
    """Delete ``keys`` (all in one cluster slot) in one atomic call if each is missing
    or holds its ``expected`` type; return how many existed. Nothing is deleted and
    :class:`WrongKeyTypeError` is raised when one holds another type."""
    if not keys:
        return 0
    count, kind = scripts.DELETE_IF_TYPE(backend.server, keys, [expected[k] for k in keys])
    if count < 0:
        key = keys[-count - 1]
        raise WrongKeyTypeError(
            key,
            as_str(kind),
            expected[key],
            backend.wrong_type_hint(as_str(kind)),
            TYPE_NAMES.get(expected[key], ""),
        )
    return int(count)
