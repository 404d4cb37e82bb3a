"""How many groups (DEDUP_HASH_SHARDS) a filter of buckets, or a hash filter's shards,
has: the setting where it is set; unset, the stored filter's (its record, else its
stamps), else a new filter's: GROUPS, or GROWING_GROUPS for buckets that split on one
server (a group spreads a filter over a Cluster's masters and spreads nothing on one
server, where each costs its own keys: the stamp and the level record)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..server.cluster import is_cluster
from ..settings.table import GROUPS, GROWING_GROUPS
from .growing import Growing
from .keys import meta_key
from .meta import stored_parameters


@dataclass(frozen=True)
class StoredShape:
    """What the record (else a stamp) of a filter of buckets says it was created with."""

    capacity: int  # 0: its buckets split as it grows
    groups: int | None  # None: not said


def stored_shape(
    server: Any, key: str, shards: int | None, backend: str = "compact"
) -> StoredShape | None:
    """The filter of buckets at ``key`` (``backend``'s: compact, or hash's buckets), by
    its record, else by its stamps (those of ``shards`` groups, or of GROUPS: a filter
    of fewer has them among these); None when none is stored."""
    stamps = Growing(key, shards or GROUPS, 0).stamp_keys
    for said in stored_parameters(server, meta_key(key), stamps):
        sized = said.get("sized_for", "") if said.get("backend") == backend else ""
        if sized.isdigit():
            return StoredShape(int(sized), said_groups(said))
    return None


def said_groups(said: Mapping[str, str]) -> int | None:
    """The groups (or a hash filter's shards) a record or stamp says (None: not said)."""
    groups = said.get("shards", "")
    return int(groups) if groups.isdigit() and int(groups) > 0 else None


def new_groups(server: Any, growing: bool) -> int:
    """A new filter's groups when DEDUP_HASH_SHARDS is unset (no server: a settings
    check, GROUPS)."""
    return GROWING_GROUPS if growing and server is not None and not is_cluster(server) else GROUPS


def groups_for(server: Any, asked: int | None, stored: StoredShape | None, growing: bool) -> int:
    """The groups to open a filter with: ``asked`` (the setting), else the ``stored``
    filter's, else a new filter's."""
    if asked is not None:
        return asked
    if stored is not None and stored.groups is not None:
        return stored.groups
    return new_groups(server, growing)
