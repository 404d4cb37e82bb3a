"""Take over a crawl that scrapy-redis's scheduler persisted, and hand one back.

Take over: its queue at
SCHEDULER_QUEUE_KEY (``%(spider)s:requests``: a sorted set for its PriorityQueue, a
list for its FifoQueue and LifoQueue) moves into the frontier when the scheduler opens,
a chunk at a time. Its dupefilter set needs no move: it is the ``set`` backend's key.

On a single server each chunk moves in one script call: a request leaves the old queue
in the call that enqueues it here, so a kill at any moment loses nothing and moves
nothing twice, and workers opening at once share the work. On a Cluster the old queue
and the frontier's shards are in different slots: a chunk is enqueued, then removed
from the old queue, so a kill in between enqueues that chunk twice (its pages may be
fetched twice; none is lost). Interrupted, the next open goes on where it stopped.

Hand back (``scrapy frontier-handback``, with every worker stopped): the requests
waiting in the frontier, and those leased by workers that are gone, move into
scrapy-redis's priority queue at SCHEDULER_QUEUE_KEY, pickled as its scheduler pickles
them, a chunk at a time: each chunk is added there before it leaves the frontier, so an
interrupted run moves at most one chunk twice, and a second run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.utils.request import request_from_dict

from ..backends.keys import as_str
from ..exceptions import DedupConfigError
from ..server import scripts
from .codec import PICKLE_ADVICE, PickleSerializer, RequestCodec, RequestEncodingError, Serializer
from .entries import entry_of, parse_run, stored_priority
from .figures import shard_counts
from .queue import FrontierQueue, Shard

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)

#: Requests moved per call.
CHUNK = 500


def take_over(
    queue: FrontierQueue,
    source: str,
    codec: RequestCodec,
    serializer: Serializer | None = None,
    chunk: int = CHUNK,
    tag: Callable[[bytes, Request], bytes] | None = None,
) -> int:
    """Move every request of scrapy-redis's queue at ``source`` (read with
    ``serializer``, scrapy-redis's: SCHEDULER_SERIALIZER, or pickle with
    FRONTIER_READ_PICKLE; None: a queue there is refused, left as it is) into ``queue``
    (each entry tagged with its download slot by ``tag``, if given); how many were
    moved."""
    server = queue.server
    kind = _kind_of(server, source, ("zset", "list"), "queue (a sorted set or a list)")
    if kind == "none":
        return 0
    if serializer is None:
        count = server.zcard(source) if kind == "zset" else server.llen(source)
        raise DedupConfigError(
            f"scrapy-redis's queue {source!r} holds {count:,} request(s), pickled as its "
            f"scheduler pickles them; they stay there, not read: {PICKLE_ADVICE} (or set "
            "SCHEDULER_SERIALIZER to the module they were written with)"
        )
    old = serializer
    moved = turn = aside = 0
    while True:
        if kind == "zset":  # the highest priority first, as scrapy-redis pops
            members = server.zrange(source, 0, chunk - 1)
        else:  # the oldest first: scrapy-redis pushes on the left (LIFO pops there too)
            members = server.lrange(source, -chunk, -1)[::-1]
        if not members:
            break
        args: list[Any] = []
        stale: list[bytes] = []
        refusal: DedupConfigError | None = None
        for member in members:
            try:
                request = _read(old, member, codec, source)
            except DedupConfigError as exc:  # (its callback gone, a class changed...)
                stale.append(member)
                refusal = refusal or exc
                continue
            entry = codec.encode(request, priority_apart=True)
            entry = tag(entry, request) if tag is not None else entry
            args += [member, stored_priority(request.priority), entry]
        shard = queue.shards[turn % len(queue.shards)]
        turn += 1
        if stale:
            first = not args and not moved and not aside
            if refusal and first and not _any_readable(server, kind, source, old, codec, chunk):
                raise refusal  # none of the queue can be read: its serializer, not a request
            aside += _set_aside(server, kind, source, stale, shard.bad)
            if not args:
                continue
        if queue.cluster:
            queue.push(shard, [(args[i + 1], args[i + 2]) for i in range(0, len(args), 3)])
            _remover(server, kind)(source, *members)
            moved += len(args) // 3
        else:
            keys = [source, shard.queue, shard.counters]
            moved += int(scripts.FRONTIER_TAKEOVER(server, keys, args))
    if moved:
        logger.info("Took over %d request(s) of scrapy-redis's queue %r", moved, source)
    if aside:
        logger.error(
            "%d request(s) of scrapy-redis's queue %r cannot be rebuilt by this spider (a "
            "callback or class gone?): set aside as they were in the frontier's '...:bad' "
            "list, the others taken over",
            aside,
            source,
        )
    return moved


def _any_readable(
    server: Any, kind: str, source: str, old: Serializer, codec: RequestCodec, chunk: int
) -> bool:
    """Whether any request of the old queue past its first ``chunk`` can be read: then
    the unreadable ones are stale requests to set aside, not a serializer to set."""
    start = chunk
    while True:
        if kind == "zset":
            members = server.zrange(source, start, start + chunk - 1)
        else:
            members = server.lrange(source, -start - chunk, -start - 1)[::-1]
        for member in members:
            try:
                _read(old, member, codec, source)
                return True
            except DedupConfigError:
                continue
        if len(members) < chunk:
            return False
        start += chunk


def _set_aside(server: Any, kind: str, source: str, members: list[bytes], bad: str) -> int:
    """Move ``members`` of the old queue to the list ``bad`` as they are (kept before
    they leave: a kill in between keeps them twice, never loses one)."""
    server.rpush(bad, *members)
    _remover(server, kind)(source, *members)
    return len(members)


def _read(serializer: Serializer, member: bytes, codec: RequestCodec, source: str) -> Any:
    try:
        return request_from_dict(serializer.loads(member), spider=codec.spider)
    except Exception as exc:  # (whatever a foreign serializer or a damaged entry raises)
        raise DedupConfigError(
            f"A request of scrapy-redis's queue {source!r} cannot be read "
            f"({type(exc).__name__}: {exc}); set SCHEDULER_SERIALIZER to the serializer it "
            "was written with (nothing of that queue could be read: it stays there)"
        ) from None


@dataclass
class Handback:
    """What a hand-back found or moved."""

    waiting: int = 0
    reclaimed: int = 0
    moved: int = 0
    #: Requests set aside (no worker could rebuild them): moved with the others.
    set_aside: int = 0
    #: Pages that failed, waiting to be tried again (FRONTIER_RETRY_TIMES): moved too.
    later: int = 0
    #: Leases still held by a worker that may be alive (none is moved then).
    held: int = 0


def hand_back(
    queue: FrontierQueue,
    target: str,
    codec: RequestCodec,
    serializer: Serializer | None = None,
    dry_run: bool = False,
    chunk: int = CHUNK,
) -> Handback:
    """Move every request of ``queue`` into scrapy-redis's priority queue at ``target``
    (written with ``serializer``: pickle unless SCHEDULER_SERIALIZER). Leases that ended
    come back first; while any is still held, nothing moves (``held`` says how many).
    Requests set aside move too: scrapy-redis's scheduler may not rebuild them either,
    but they are not left behind in keys nothing reads any more; so do the pages
    waiting to be tried again, due or not."""
    server = queue.server
    _kind_of(server, target, ("zset",), "priority queue (a sorted set)")
    old = serializer or PickleSerializer()
    done = Handback()
    for shard in queue.shards:
        queue.check(shard)  # (a key of another type: refused, never moved nor deleted)
        counts = shard_counts(queue, shard, memory=False)  # (what moves, not its size)
        done.waiting += counts.waiting
        if dry_run:
            done.set_aside += counts.aside
            done.later += counts.later
            done.held += counts.held
            continue
        while True:  # the leases that ended: back into the queue first
            answer = queue.call(shard, 1)
            done.reclaimed += answer.reclaimed
            if not answer.reclaimed:
                break
        done.held += answer.held
    if done.held or dry_run:
        return done
    for shard in queue.shards:
        done.set_aside += queue.unaside(shard)  # (else left behind in the frontier's keys)
        done.later += queue.unlater(shard)
        for key in [shard.queue, *queue.slot_queues(shard)]:
            done.moved += _hand_back_runs(queue, shard, key, target, codec, old, chunk)
        server.delete(shard.slots, shard.ready)  # (their queues are empty: nothing to tell)
        server.hdel(shard.counters, "waiting")
    return done


def _hand_back_runs(
    queue: FrontierQueue,
    shard: Shard,
    key: str | bytes,
    target: str,
    codec: RequestCodec,
    old: Serializer,
    chunk: int,
) -> int:
    """Move the requests of ``key`` (``shard``'s queue, or one of its download slots')
    into ``target``, each chunk of runs added
    there before it leaves; a member that is not a run, or a request that cannot be
    read, goes to the shard's bad members. How many moved."""
    server, moved = queue.server, 0
    while members := server.zrange(key, 0, max(1, chunk // 16) - 1):
        out: dict[bytes | str, int] = {}
        bad: list[bytes] = []
        for member in members:
            records = parse_run(member)
            if records is None:
                bad.append(b"queue " + bytes(member))
                continue
            for priority, item in records:
                try:
                    fields = codec.fields(entry_of(item), priority)
                except RequestEncodingError:
                    bad.append(b"%d %s" % (priority, item))
                    continue
                out[old.dumps(fields)] = -priority
        if out:
            server.zadd(target, out)
        queue.set_bad(shard, bad)
        server.zrem(key, *members)
        moved += len(out)
    return moved


def _kind_of(server: Any, key: str, kinds: tuple[str, ...], what: str) -> str:
    """The type of ``key``: "none" or one of ``kinds`` (scrapy-redis's ``what``), else
    an error saying what to do (a key of another type is never touched)."""
    kind = as_str(server.type(key))
    if kind != "none" and kind not in kinds:
        raise DedupConfigError(
            f"SCHEDULER_QUEUE_KEY {key!r} holds a {kind}, not scrapy-redis's {what}; point "
            "SCHEDULER_QUEUE_KEY at another key, or move that one away yourself"
        )
    return kind


def old_queue(server: Any, source: str) -> bool:
    """Whether ``source`` holds scrapy-redis's queue (a sorted set or a list)."""
    return as_str(server.type(source)) in ("zset", "list")


def _remover(server: Any, kind: str) -> Any:
    """How members leave scrapy-redis's queue of ``kind`` (a sorted set or a list)."""
    return server.zrem if kind == "zset" else _lrem(server)


def _lrem(server: Any) -> Any:
    def remove(key: str, *members: bytes) -> None:
        for member in members:
            server.lrem(key, -1, member)

    return remove
