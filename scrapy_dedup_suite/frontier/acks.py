"""Done leases waiting to be acknowledged (:class:`PendingAcks`): the one owner of
that state, for the scheduler and for each record call that carries some."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator

from .queue import Shard, is_move
from .server_clock import ServerClock


def stamped(lease_id: str, sent: float | None, clock: ServerClock | None) -> str:
    """``lease_id`` as acknowledged: with when its request was sent (``sent``:
    ``time.monotonic()``), on its shard's server's clock in ms, if both are known:
    ``id@ms``. Its download slot's next turn is then at least a delay after it, so a
    request its worker sent late never leaves the next, sent on time by another, less
    than a delay behind (``frontier_ack``)."""
    if sent is None or clock is None or clock.rtt == float("inf"):
        return lease_id
    return f"{lease_id}@{round((sent + clock.offset) * 1000)}"


#: :func:`stamped`'s form, as ``frontier_ack`` reads it (the id, then ``@`` and ms).
_STAMPED = re.compile(r"(.*)@(\d{1,15})", re.DOTALL)


def lease_id_of(acknowledged: str) -> str:
    """The lease id of an acknowledgement, :func:`stamped` or not: what a renewal
    names (a renewal of ``id@ms`` would hold nothing, and the lease would end)."""
    match = _STAMPED.fullmatch(acknowledged)
    return match.group(1) if match else acknowledged


class PendingAcks:
    """Done leases waiting to be acknowledged, per shard. The scheduler adds a lease
    when the engine is done with its request, and a call to a shard takes that shard's
    (:meth:`take`; a batch of record calls takes them all, :meth:`take_all`, and gives
    back what no call carried); what a call could not carry comes back (:meth:`add`).
    Acknowledging one twice is harmless: lease ids are never used again."""

    def __init__(
        self, by_shard: dict[Shard, list[str]] | None = None, since: float | None = None
    ) -> None:
        self._by_shard: dict[Shard, list[str]] = {
            shard: list(ids) for shard, ids in (by_shard or {}).items() if ids
        }
        #: Since when (``time.monotonic()``) some have waited without a break, or None:
        #: the oldest one's wait, or longer after a call took some (for the metrics).
        self.since = (since or time.monotonic()) if self._by_shard else None

    def __bool__(self) -> bool:
        return bool(self._by_shard)

    def __iter__(self) -> Iterator[Shard]:
        return iter(list(self._by_shard))

    def __len__(self) -> int:
        """How many lease ids wait, over every shard (read by the metrics' thread too:
        a copy of the lists, taken at once)."""
        return sum(len(ids) for ids in list(self._by_shard.values()))

    def pages(self) -> int:
        """How many are pages' (the others: requests moved home, :mod:`.homes`)."""
        return sum(not is_move(i) for ids in list(self._by_shard.values()) for i in ids)

    def add(self, shard: Shard, ids: Iterable[str]) -> None:
        """``ids`` wait for the next call to ``shard`` (a call that did not carry
        them, or failed)."""
        ids = list(ids)
        if ids:
            if self.since is None:
                self.since = time.monotonic()
            self._by_shard.setdefault(shard, []).extend(ids)

    def take(self, shard: Shard) -> list[str]:
        """What a call to ``shard`` carries, no longer waiting here."""
        taken = self._by_shard.pop(shard, [])
        if not self._by_shard:
            self.since = None
        return taken

    def take_all(self) -> PendingAcks:
        """Every one, moved to a new owner (a batch of calls), none left here."""
        taken, self._by_shard = self._by_shard, {}
        since, self.since = self.since, None
        return PendingAcks(taken, since)

    def give_back(self, other: PendingAcks) -> int:
        """What ``other`` still holds waits here again; how many of them are pages'."""
        left = other.pages()
        for shard, ids in other.items():
            self.add(shard, ids)
        if left and other.since is not None:
            self.since = min(other.since, self.since or other.since)
        return left

    def drop(self) -> None:
        """Forget them all (their leases stay held until they end)."""
        self._by_shard.clear()
        self.since = None

    def items(self) -> list[tuple[Shard, list[str]]]:
        """A copy, read from the keeper's thread too."""
        return [(shard, list(ids)) for shard, ids in list(self._by_shard.items())]

    def lease_ids(self) -> list[tuple[Shard, list[str]]]:
        """:meth:`items` as lease ids, without their send times: what the keeper renews
        while they wait (a blocked reactor keeps them waiting past the lease)."""
        return [(shard, [lease_id_of(i) for i in ids]) for shard, ids in self.items()]
