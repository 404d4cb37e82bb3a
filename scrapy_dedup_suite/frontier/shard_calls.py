"""A worker's calls to the queue's shards (:class:`ShardCalls`): each carries what
waits for its shard (acknowledgements, pages to try again later), and what it
answered is counted and remembered (what the shard says, leases reclaimed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .idle import ShardLooks
from .leases import Holdings, say_returned
from .queue import FrontierQueue, Leased, Shard, is_move

if TYPE_CHECKING:
    from .codec import RequestCodec
    from .later import RetryLater


class ShardCalls:
    """The scheduler's calls to the shards of ``queue()`` (None before the open),
    each with ``lease_ms`` and FRONTIER_MAX_RETURNS ``max_returns``; ``holdings``,
    ``later`` and ``looks`` are the scheduler's, ``count`` its stats."""

    def __init__(
        self,
        queue: Callable[[], FrontierQueue | None],
        lease_ms: int,
        max_returns: int,
        holdings: Holdings,
        later: RetryLater,
        looks: ShardLooks,
        codec: RequestCodec,
        count: Callable[..., None],
    ) -> None:
        self.queue = queue
        self.lease_ms = lease_ms
        self.max_returns = max_returns
        self.holdings = holdings
        self.later = later
        self.looks = looks
        self.codec = codec
        self.count = count

    def call(
        self,
        shard: Shard,
        take: int,
        release: Sequence[str] = (),
        renew: Sequence[str] = (),
        aside: Sequence[str] = (),
    ) -> Leased:
        """One call to ``shard`` here and now, carrying its acknowledgements."""
        queue = self.queue()
        assert queue is not None
        acks, later = self.carried(shard)
        most = self.max_returns
        try:
            leased = queue.call(
                shard, self.lease_ms, take, acks, renew, release, aside, later, most
            )
        except Exception:
            self.keep(shard, acks, later)
            raise
        self.called(shard, acks, leased, take)
        return leased

    def carried(self, shard: Shard) -> tuple[list[str], list[Any]]:
        """The acknowledgements and the pages to try again later a call to ``shard``
        carries (a page's are there once its children are settled)."""
        return self.holdings.acks.take(shard), self.later.carried(shard)

    def keep(self, shard: Shard, acks: list[str], later: list[Any]) -> None:
        """What a call that failed carried waits for the next call to ``shard``."""
        self.holdings.acks.add(shard, acks)
        self.later.keep(shard, later)

    def called(self, shard: Shard, acks: list[str], leased: Leased, take: int) -> None:
        """Count what a call to ``shard`` asking for ``take`` requests answered;
        remember what it said of the shard."""
        self.count("frontier/acknowledged", sum(not is_move(i) for i in acks))
        self.reclaimed(shard, leased)
        ours = self.holdings.on(shard) + len(leased.requests)  # (those: not yet taken)
        drained = take > 0 and len(leased.requests) < take  # (none more ready now)
        self.looks.saw(shard, leased.waiting, leased.held - ours, leased.due_in, drained)

    def reclaimed(self, shard: Shard, leased: Leased) -> None:
        """Count the leases a call to ``shard`` took back; name those it set aside."""
        self.count("frontier/reclaimed", leased.reclaimed)
        self.count("frontier/moves_reclaimed", leased.moved)  # (moved by the call: homes)
        said = say_returned(self.codec, shard, leased.returned, self.max_returns)
        self.count("frontier/returned_aside", said)
