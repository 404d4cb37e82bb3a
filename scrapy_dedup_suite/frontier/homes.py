"""Each download slot's home shard, so that one host's limits hold across a Cluster.

On a Cluster the queue has a shard in the slot of each of the dupefilter's groups,
and a request is recorded in the group of its fingerprint: one host's requests are
recorded all over the Cluster. A slot's delay and concurrency are kept where its
requests wait, so they wait in one shard: the slot's home (:meth:`Homes.of`, by its
name, the same for every worker). A request recorded elsewhere is not lost on its way
there: the call that records it holds it in a lease of its worker's
(``frontier_moving``, ``lua/frontier.lua``); the worker then pushes it to the home
(:func:`move`) and acknowledges that lease with its next call to the shard. A worker
that dies in between leaves the lease to end; the next call to that shard hands the
request to its own worker to move (``lua/frontier_lease.lua``). So a fault may push a
request to its home twice (it is fetched twice), and never loses one.

On a single server there is one shard: every request is at home, nothing moves.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..server.failures import error_kind
from .slots import TAG

if TYPE_CHECKING:
    from .acks import PendingAcks
    from .queue import FrontierQueue, Leased, Shard

logger = logging.getLogger(__name__)

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


class Homes:
    """The home shard of each download slot among ``shards``: the same for every worker
    of the crawl (by the shards' names, not the order they were listed in)."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self.shards = sorted(shards, key=lambda shard: shard.queue)

    def of(self, entry: bytes) -> Shard | None:
        """The home of ``entry``'s slot; None if it has none (untagged, or one shard)."""
        if len(self.shards) < 2:
            return None
        name = slot_name(entry)
        return None if name is None else self.of_slot(name)

    def of_slot(self, name: bytes) -> Shard:
        """The home of the download slot ``name`` (as its tag's header holds it)."""
        return self.shards[zlib.crc32(name) % len(self.shards)]

    def away(self, shard: Shard, entry: bytes) -> Shard | None:
        """``entry``'s home if it is not ``shard`` (it moves there), else None."""
        home = self.of(entry)
        return None if home is None or home == shard else home


@dataclass(frozen=True)
class Move:
    """A request recorded in ``origin`` and held there under ``lease_id`` until it is
    pushed to its slot's home shard."""

    origin: Shard
    lease_id: str
    priority: int
    entry: bytes


def move(queue: FrontierQueue, moves: Sequence[Move]) -> tuple[list[Move], list[Exception]]:
    """Push each of ``moves`` to its home (one call per home shard): the moves pushed,
    whose leases the caller acknowledges next (never before the push), and the errors
    of the calls that failed (their leases end and the request moves later)."""
    by_home: dict[Shard, list[Move]] = {}
    for one in moves:
        home = queue.homes.of(one.entry) or one.origin
        by_home.setdefault(home, []).append(one)
    done: list[Move] = []
    errors: list[Exception] = []
    for home, group in by_home.items():
        try:
            queue.push(home, [(one.priority, one.entry) for one in group])
        except Exception as exc:  # whatever the client raised: the lease ends, moved later
            errors.append(exc)
            continue
        done.extend(group)
    return done, errors


def settle(
    acks: PendingAcks,
    done: Sequence[Move],
    errors: Sequence[Exception],
    count: Callable[..., None],
    warn: Callable[..., None],
) -> None:
    """What :func:`move` answered, on the reactor thread: the leases of the moves done
    wait for the next call to their shard (which acknowledges them), each failure is
    counted and said (``warn``: at most once a minute)."""
    for one in done:
        acks.add(one.origin, [one.lease_id])
    if done:
        count("frontier/moved", len(done))
    for error in errors:
        count("frontier/failed_calls")
        count(f"frontier/failed_calls/{error_kind(error)}")
        warn(
            "The frontier could not move requests to their download slot's home shard "
            "(they stay held where they were recorded; a call there moves them once "
            "FRONTIER_LEASE ends): %s",
            error,
        )


def rehome(queue: FrontierQueue, origin: Shard, leased: Leased) -> None:
    """Move the requests a call to ``origin`` handed this worker to move (their lease
    ended: the worker that recorded them died or failed to push them), then
    acknowledge their leases there (a call of its own: this is rare). A push that
    fails leaves them held until their lease ends again."""
    moves = [Move(origin, lease_id, priority, entry) for lease_id, priority, entry in leased.moves]
    done, errors = move(queue, moves)
    for error in errors:
        logger.warning(
            "The frontier could not move %d request(s) from %r to their download slot's "
            "home shard (moved once their lease ends again): %s",
            len(moves),
            origin.queue,
            error,
        )
    if done:
        queue.call(origin, queue.move_ms, acks=[one.lease_id for one in done])
    leased.moved = len(done)
