"""Requests on their way into the frontier: encoded, recorded and enqueued in one call
per slot group (:mod:`.record`), a batch at a time, without a round trip on the reactor
thread for each request.

``enqueue_request`` fingerprints a request, asks the local cache, and hands it on: it
waits in :attr:`Incoming.waiting` until the end of the reactor's turn (a page's links
arrive in one turn), when the requests waiting go in one batch to a thread of their
own; the answer is counted on the reactor thread. One batch is in flight at a time;
what arrives meanwhile goes in the next. A request the frontier finds seen then was
already said enqueued to the engine: it is logged as filtered and Scrapy's
``request_dropped`` signal is sent for it, as the engine would have.

Each request handed on has a number; the engine's being done with a page is acted on
(its lease acknowledged) only once every request handed on up to then is settled
(:meth:`Incoming.settled`): recorded and enqueued, or found seen. So a page is never
acknowledged before the requests its callback yielded are safe, whichever call
carries them. A request whose call failed waits at the front and is sent again after
RETRY_EVERY; nothing handed on after it is acknowledged meanwhile. Each batch also
carries the acknowledgements waiting for its shards (a call that happens anyway).

Without a running reactor (tests, commands), a request is recorded and enqueued at
once, here."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from .acks import PendingAcks
from .codec import RequestCodec, RequestEncodingError
from .entries import stored_priority
from .homes import Move, count_failed_call, move, settle
from .idle import running_reactor
from .queue import FrontierQueue, Shard
from .record import record_and_enqueue
from .refusals import wrong_type
from .slots import SlotPolicy

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from twisted.internet.defer import Deferred

    from ..dedup.dupefilter import RFPDupeFilter

logger = logging.getLogger(__name__)

#: Seconds between tries of the requests kept after a failed call (meanwhile new ones
#: join them without a call: an outage costs a failed call a second, not one a link).
RETRY_EVERY = 1.0


class Quiet:
    """Each WARNING (by its message) said at most once a minute, with how many times
    it was not said since."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, every: float = 60.0):
        self.clock = clock
        self.every = every
        self._said: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}

    def warn(self, message: str, *args: Any) -> None:
        now = self.clock()
        if now - self._said.get(message, -float("inf")) < self.every:
            self._unsaid[message] = self._unsaid.get(message, 0) + 1
            return
        unsaid = self._unsaid.pop(message, 0)
        self._said[message] = now
        if unsaid:
            message += f" ({unsaid} more like it since the last one)"
        logger.warning(message, *args)


def _call_later(delay: float, call: Callable[[], None]) -> Any:
    reactor = running_reactor()
    assert reactor is not None  # (kick runs only once the reactor runs)
    return reactor.callLater(delay, call)


class Handed(NamedTuple):
    """A request handed on and not yet settled: its number, the request, its entry,
    and its fingerprint and expiry (None for dont_filter: pushed unrecorded)."""

    number: int
    request: Request
    entry: bytes
    fingerprint: str | None
    expire: float | None


@dataclass
class Prepared:
    """One batch on its way to :meth:`Incoming.send`: what is recorded (with what
    :func:`record_and_enqueue` takes), what is pushed unrecorded (dont_filter) and to
    which shard, the acknowledgements its calls carry (those not carried are left in
    it) and how many there were; filled in by the send: its errors."""

    handed: list[Handed]
    recorded: list[Handed] = field(default_factory=list)
    pushed: list[Handed] = field(default_factory=list)
    push_to: Shard | None = None
    acks: PendingAcks = field(default_factory=PendingAcks)
    acks_given: int = 0
    errors: list[Exception] = field(default_factory=list)
    #: The requests it recorded away from their slot's home and moved there (their
    #: leases to acknowledge), and the errors of the moves that failed.
    moved: list[Move] = field(default_factory=list)
    move_errors: list[Exception] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.handed[0].number


#: What a send answered per request of its batch (in ``handed`` order): True new and
#: enqueued (or pushed), False seen, None its call failed.
Outcomes = list[Optional[bool]]


class Incoming:
    """The frontier's way in (see the module): ``count(name, n)`` counts a stat;
    ``on_enqueued()`` is called when requests were enqueued here, ``on_settled()`` when
    a batch was answered (the scheduler acts on the pages done meanwhile), and
    ``on_dropped(request)`` for a request handed on and then found seen; ``acks``: the
    leases done, per shard, which the next call to their shard acknowledges;
    ``on_enqueued(shards)`` is told the shards the requests went to (None: it may be
    any)."""

    def __init__(
        self,
        df: RFPDupeFilter,
        codec: RequestCodec,
        count: Callable[..., None],
        on_enqueued: Callable[[set[Shard] | None], None],
        acks: PendingAcks,
        batch_size: int = 500,
    ) -> None:
        self.df = df
        self.codec = codec
        self.acks = acks
        self.batch_size = batch_size
        self.queue: FrontierQueue | None = None
        self.spider: Spider | None = None
        #: Tags each entry with its download slot (FRONTIER_POLITENESS), if set.
        self.slots: SlotPolicy | None = None
        self._count = count
        self.on_enqueued = on_enqueued
        self.on_settled: Callable[[], None] = lambda: None
        self.on_dropped: Callable[[Request], None] = lambda request: None
        #: Requests handed on and not yet sent (or sent and failed: those first).
        self.waiting: deque[Handed] = deque()
        #: The batch in flight in a thread, and its answer's Deferred.
        self.sending: Prepared | None = None
        self.sent: Deferred[Any] | None = None
        #: Runs a send in a thread (``threads(call, *args)``, a Deferred), once the
        #: reactor runs; None: each request is sent at once, here.
        self.in_thread: Callable[..., Deferred[Any]] | None = None
        #: Whether the scheduler is closing: no batch is sent in a thread any more.
        self.closing = False
        #: How many requests were handed on (the last one's number).
        self.handed = 0
        self._next_shard = 0
        self._kick: Any = None  # (the reactor's call that sends the next batch)
        #: ``call_later(delay, f)``: the running reactor's (a test may set its own).
        self.call_later: Callable[[float, Callable[[], None]], Any] = _call_later
        self.clock: Callable[[], float] = time.monotonic
        #: When the kept requests are tried again (after a failed call).
        self.retry_at = -float("inf")
        self.quiet = Quiet(self.clock)
        #: Told of a call refused because a key holds another type (:mod:`.refusals`).
        self.on_refused: Callable[[BaseException, str], None] | None = None

    @property
    def busy(self) -> bool:
        """Whether requests handed on are not settled yet."""
        return bool(self.waiting) or self.sending is not None

    def settled(self, number: int) -> bool:
        """Whether every request handed on up to ``number`` is settled."""
        firsts = [self.waiting[0].number] if self.waiting else []
        if self.sending is not None:
            firsts.append(self.sending.first)
        return not firsts or min(firsts) > number

    # -- in --------------------------------------------------------------------------

    def _encode(self, request: Request) -> bytes | None:
        try:
            entry = self.codec.encode(request, priority_apart=True)
            return entry if self.slots is None else self.slots.tag(entry, request)
        except RequestEncodingError as exc:
            logger.error("%s", exc, extra={"spider": self.spider})
            self._count("frontier/unencodable")
            return None

    def enqueue(self, request: Request) -> bool:
        """The scheduler's ``enqueue_request``: False for a request the local cache
        knows (or that cannot be encoded); else it is handed on (True) and recorded and
        enqueued with its batch (at once without a running reactor: then False if it
        was seen)."""
        entry = self._encode(request)
        if entry is None:
            return False
        fp = expire = None
        if not request.dont_filter:
            fp, cached, expire = self.df.step.before(request)
            if cached:
                self.df.counts.filtered(0, cached=1)
                self.df.log(request, self.spider)  # type: ignore[arg-type]
                return False
        self.handed += 1
        self.waiting.append(Handed(self.handed, request, entry, fp, expire))
        if self.in_thread is None:  # (no reactor: here and now)
            if self.clock() < self.retry_at:  # Redis failed a moment ago: kept, no call
                return True
            return self.send_now().get(self.handed) is not False
        self.kick()
        return True

    # -- out: a batch at a time --------------------------------------------------------

    def kick(self) -> None:
        """Send what waits at the end of this turn of the reactor (after RETRY_EVERY
        when the last call failed), unless a batch is in flight (its answer kicks)."""
        if self._kick is not None or self.sending is not None or self.closing:
            return
        if not self.waiting or self.in_thread is None:
            return
        delay = max(0.0, self.retry_at - self.clock())
        self._kick = self.call_later(delay, self.send_next)

    def send_next(self) -> None:
        """Send the next batch in a thread (the reactor calls it: :meth:`kick`)."""
        self._kick = None
        if self.sending is not None or not self.waiting or self.closing:
            return
        assert self.in_thread is not None
        batch = self.sending = self.prepare()
        self.sent = self.in_thread(self.send, batch)
        self.sent.addBoth(self._answered, batch)

    def _answered(self, outcomes: Any, batch: Prepared) -> None:
        self.sending = self.sent = None
        if not isinstance(outcomes, list):  # (send catches what the client raises)
            batch.errors.append(getattr(outcomes, "value", RuntimeError(str(outcomes))))
            outcomes = [None] * len(batch.handed)
        self.account(batch, outcomes)
        self.on_settled()
        self.kick()

    def send_now(self) -> dict[int, bool | None]:
        """Send every request waiting here and now (blocking: no reactor, or the close);
        per request's number, what its call answered."""
        answered: dict[int, bool | None] = {}
        while self.waiting and self.sending is None:
            batch = self.prepare()
            outcomes = self.account(batch, self.send(batch))
            answered.update(zip((h.number for h in batch.handed), outcomes))
            if None in outcomes:
                break  # (kept, tried again after RETRY_EVERY)
        self.on_settled()
        return answered

    def prepare(self) -> Prepared:
        """The next batch: up to ``batch_size`` requests from the front of those
        waiting, with the acknowledgements waiting (every one there is safe: the
        scheduler adds a page's only once its children are settled)."""
        assert self.queue is not None
        handed = [self.waiting.popleft() for _ in range(min(self.batch_size, len(self.waiting)))]
        batch = Prepared(handed)
        if self.acks:
            batch.acks = self.acks.take_all()
            batch.acks_given = batch.acks.pages()
        for one in handed:
            (batch.recorded if one.fingerprint is not None else batch.pushed).append(one)
        if batch.pushed:
            shards = self.queue.shards
            batch.push_to = shards[self._next_shard % len(shards)]
            self._next_shard += 1
        self._count("dedup/batches")
        self._count("dedup/batched", len(handed))
        return batch

    def send(self, batch: Prepared) -> Outcomes:
        """The calls of ``batch`` (blocking, touching no stats: safe in a thread): per
        request of ``batch.handed``, what :data:`Outcomes` says."""
        queue = self.queue
        assert queue is not None
        pushed: bool | None = True
        if batch.pushed:
            assert batch.push_to is not None
            by_shard: dict[Shard, list[tuple[int, bytes]]] = {}
            for h in batch.pushed:  # (to its slot's home, if it has one)
                shard = queue.homes.of(h.entry) or batch.push_to
                by_shard.setdefault(shard, []).append((h.request.priority, h.entry))
            try:
                for shard, entries in by_shard.items():
                    queue.push(shard, entries)
            except Exception as exc:  # kept and tried again
                batch.errors.append(exc)
                pushed = None
        seen: list[bool | None] = []
        if batch.recorded:
            moves: list[Move] = []
            try:
                seen, failed = record_and_enqueue(
                    self.df.backend,
                    queue,
                    [h.fingerprint for h in batch.recorded],  # type: ignore[misc]
                    [h.expire for h in batch.recorded],
                    [(stored_priority(h.request.priority), h.entry) for h in batch.recorded],
                    batch.acks,
                    moves,
                )
                batch.errors.extend(call.error for call in failed)
            except Exception as exc:  # whatever the client raised: kept, tried again
                seen = [None] * len(batch.recorded)
                batch.errors.append(exc)
            if moves:  # (held where recorded: safe; moved now, or by a call there later)
                batch.moved, batch.move_errors = move(queue, moves)
        new = (None if s is None else not s for s in seen)  # (in batch.recorded's order)
        return [pushed if h.fingerprint is None else next(new) for h in batch.handed]

    def account(self, batch: Prepared, outcomes: Outcomes) -> Outcomes:
        """Count what a send answered (on the reactor thread): the seen ones logged as
        filtered (and ``on_dropped``), the failed ones kept at the front; the
        acknowledgements it did not carry wait for the next call."""
        df = self.df
        for error in batch.errors:
            self._failed(error)
        left = self.acks.give_back(batch.acks) if batch.acks else 0  # (pages' counted)
        self._count("frontier/acknowledged", batch.acks_given - left)
        settle(self.acks, batch.moved, batch.move_errors, self._count, self.quiet.warn)
        filtered = added = enqueued = 0
        kept = []
        went: set[Shard] | None = set()  # (the shards they went to: their slots' homes)
        for one, new in zip(batch.handed, outcomes):
            if new is None:
                kept.append(one)
                continue
            if one.fingerprint is not None:
                df.step.learned(one.fingerprint)
                added, filtered = added + bool(new), filtered + (not new)
            if new:
                enqueued += 1
                home = None if self.queue is None else self.queue.homes.of(one.entry)
                went = None if home is None or went is None else {*went, home}
            else:
                df.log(one.request, self.spider)  # type: ignore[arg-type]
                if self.in_thread is not None:  # (the engine was told it was enqueued)
                    self.on_dropped(one.request)
        self.waiting.extendleft(reversed(kept))
        df.counts.tally(filtered, added)  # (once a batch: a page's links are many)
        if enqueued:
            self._count("scheduler/enqueued/redis", enqueued)
            self._count("frontier/enqueued", enqueued)
            self.on_enqueued(went)
        return outcomes

    def _failed(self, error: Exception) -> None:
        count_failed_call(self._count, error)
        self.retry_at = self.clock() + RETRY_EVERY
        if self.on_refused is not None and wrong_type(error) is not None:
            self.on_refused(error, "record and enqueue requests")  # (the worker stops)
            return
        self.quiet.warn(
            "The frontier could not record and enqueue requests (kept, tried again each "
            "second; nothing is acknowledged meanwhile): %s",
            error,
        )

    def push_waiting(self) -> None:
        """Without a running reactor, send what was kept after a failed call once
        RETRY_EVERY passed (the scheduler's timer asks); with one, :meth:`kick` does."""
        if self.in_thread is None and self.waiting and self.clock() >= self.retry_at:
            self.send_now()
        else:
            self.kick()

    def push_at_close(self, refused: bool) -> bool:
        """At the close (no batch in flight: the scheduler waited for it), send what
        waits once more, here: whether nothing is left (else said, as a WARNING after
        a key was ``refused``: that said why)."""
        self.closing = True
        if self._kick is not None and self._kick.active():
            self._kick.cancel()
        self._kick = None
        if self.waiting:
            self.send_now()
        if self.waiting:
            logger.log(
                logging.WARNING if refused else logging.ERROR,
                "%d request(s) could not be recorded and enqueued before the close; the "
                "pages that yielded them stay leased and will be fetched again (start "
                "requests: by the next start)",
                len(self.waiting),
            )
        return not self.waiting
