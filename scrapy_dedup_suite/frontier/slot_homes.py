"""Each download slot's home shard (:class:`Homes`): where its requests wait, so that
one host's limits hold across a Cluster's queue shards (:mod:`.homes` moves a request
recorded elsewhere there)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from .slots import TAG

S = TypeVar("S")

#: The byte an entry starts with when a lease that ended gave it back (its count next).
_RETURNED = 3


def slot_name(entry: bytes) -> bytes | None:
    """The download slot ``entry`` is tagged with (as the scripts read its header), or
    None for an untagged entry."""
    if len(entry) >= 2 and entry[0] == _RETURNED:
        entry = entry[2:]
    if len(entry) < 2 or entry[0] != TAG or len(entry) < 2 + entry[1]:
        return None
    fields = entry[2 : 2 + entry[1]].split(b" ", 3)
    return fields[3] if len(fields) == 4 else None


class Homes(Generic[S]):
    """The home shard of each download slot among ``shards``: the same for every worker
    of the crawl (by the shards' names, ``name(shard)``, not the order they were listed
    in)."""

    def __init__(self, shards: Sequence[S], name: Callable[[S], str]) -> None:
        self.shards = sorted(shards, key=name)

    def of(self, entry: bytes) -> S | None:
        """The home of ``entry``'s slot; None if it has none (untagged, or one shard)."""
        if len(self.shards) < 2:
            return None
        name = slot_name(entry)
        return None if name is None else self.of_slot(name)

    def of_slot(self, name: bytes) -> S:
        """The home of the download slot ``name`` (as its tag's header holds it)."""
        return self.shards[zlib.crc32(name) % len(self.shards)]

    def away(self, shard: S, entry: bytes) -> S | None:
        """``entry``'s home if it is not ``shard`` (it moves there), else None."""
        home = self.of(entry)
        return None if home is None or home == shard else home
