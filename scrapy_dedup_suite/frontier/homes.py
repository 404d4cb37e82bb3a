"""Each download slot's home shard, so that one host's limits hold across a Cluster.

On a Cluster the queue has a shard in the slot of each of the dupefilter's groups,
and a request is recorded in the group of its fingerprint: one host's requests are
recorded all over the Cluster. A slot's delay and concurrency are kept where its
requests wait, so they wait in one shard: the slot's home (:mod:`.slot_homes`, by its
name, the same for every worker). A request recorded elsewhere is not lost on its way
there: the call that records it holds it in a lease of its worker's
(``frontier_moving``, ``lua/frontier.lua``); the worker then pushes it to the home
(:func:`move`) and acknowledges that lease with its next call to the shard. A worker
that dies in between leaves the lease to end; the next call to that shard hands the
request to its own worker to move (``lua/frontier_lease.lua``; :func:`rehome`, the
queue's ``on_moves``). So a fault may push a
request to its home twice (it is fetched twice), and never loses one.

On a single server there is one shard: every request is at home, nothing moves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..server.failures import error_kind
from .queue import FrontierQueue

if TYPE_CHECKING:
    from .acks import PendingAcks
    from .queue import Leased, Shard

logger = logging.getLogger(__name__)


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
        count_failed_call(count, error)
        warn(
            "The frontier could not move requests to their download slot's home shard "
            "(they stay held where they were recorded; a call there moves them once "
            "FRONTIER_LEASE ends): %s",
            error,
        )


def count_failed_call(count: Callable[..., None], error: BaseException) -> None:
    """A frontier call that failed: ``frontier/failed_calls``, and by the error's kind."""
    count("frontier/failed_calls")
    count(f"frontier/failed_calls/{error_kind(error)}")


def crawl_queue(backend: Any, queue_key: str, lease_ms: int) -> FrontierQueue:
    """The queue beside ``backend``'s fingerprints as a worker of the crawl uses it:
    seen among the workers, its requests on their way home held ``lease_ms``, and
    those a call hands it to move moved (:func:`rehome`)."""
    queue = FrontierQueue.for_backend(backend, queue_key)
    queue.crawling, queue.move_ms = True, lease_ms
    queue.on_moves = lambda origin, leased: rehome(queue, origin, leased)
    return queue


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
        acked = queue.call(origin, queue.move_ms, acks=[one.lease_id for one in done])
        # (that call reclaims what ended there meanwhile too: counted as the first's; what
        # it hands to move waits for its lease to end again)
        leased.reclaimed += acked.reclaimed
        leased.returned += acked.returned
    leased.moved = len(done)
