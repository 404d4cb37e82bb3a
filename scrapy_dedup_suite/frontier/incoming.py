"""Requests on their way into the frontier: encoded, recorded and enqueued in one call
per slot group (:mod:`.record`), one by one (the scheduler's ``enqueue_request``) or a
page's batch (BatchDedupMiddleware: prepared on the reactor thread, sent in a thread,
counted on the reactor thread). Each call also carries the acknowledgements waiting
for its shard (a call that happens anyway). A request whose call failed is kept and
sent again: until then nothing is acknowledged, since its parent may be among it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends.calls import FailedCall
from ..server.failures import error_kind
from .acks import PendingAcks
from .codec import RequestCodec, RequestEncodingError
from .queue import FrontierQueue, stored_priority
from .record import record_and_enqueue
from .refusals import wrong_type

if TYPE_CHECKING:
    from scrapy import Request, Spider

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


@dataclass
class Prepared:
    """Requests on their way to one record-and-enqueue: what is sent, and per request
    what is known (True: new and enqueued, False: seen, None: not yet)."""

    requests: list[tuple[Request, bytes]]
    out: list[bool | None]
    todo: list[int] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    expires: list[float | None] = field(default_factory=list)
    queued: list[tuple[int, bytes]] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    #: The acknowledgements its calls carry (those not carried are left here), and
    #: how many there were.
    acks: PendingAcks = field(default_factory=PendingAcks)
    acks_given: int = 0


class Incoming:
    """The frontier's way in: ``count(name, n)`` counts a stat, ``on_enqueued()`` is
    called when a request was enqueued here; ``acks``: the leases done, per shard,
    which the next call to their shard acknowledges (this one's, or a lease call)."""

    def __init__(
        self,
        df: RFPDupeFilter,
        codec: RequestCodec,
        count: Callable[..., None],
        on_enqueued: Callable[[], None],
        acks: PendingAcks,
    ) -> None:
        self.df = df
        self.codec = codec
        self.acks = acks
        self.queue: FrontierQueue | None = None
        self.spider: Spider | None = None
        self._count = count
        self.on_enqueued = on_enqueued
        #: Requests whose record-and-enqueue call failed: sent again before anything is
        #: acknowledged (their parent among it).
        self.unpushed: list[tuple[Request, bytes]] = []
        #: Requests a batch recorded and enqueued, on their way to ``enqueue_request``.
        self.enqueued: set[Request] = set()
        self._next_shard = 0
        self.clock: Callable[[], float] = time.monotonic
        #: When the kept requests are tried again (after a failed call).
        self.retry_at = -float("inf")
        self.quiet = Quiet(self.clock)
        #: Told of a call refused because a key holds another type (:mod:`.refusals`).
        self.on_refused: Callable[[BaseException, str], None] | None = None

    def _encode(self, request: Request) -> bytes | None:
        try:
            return self.codec.encode(request, priority_apart=True)
        except RequestEncodingError as exc:
            logger.error("%s", exc, extra={"spider": self.spider})
            self._count("frontier/unencodable")
            return None

    def enqueue(self, request: Request) -> bool:
        if request in self.enqueued:  # a batch recorded and enqueued it
            self.enqueued.discard(request)
            return True
        entry = self._encode(request)
        if entry is None:
            return False
        if self.unpushed:
            if self.clock() < self.retry_at:  # Redis failed a moment ago: kept, no call
                self.unpushed.append((request, entry))
                return True
            self.push_unpushed()
        new = self._record([(request, entry)])[0]
        if new is None:
            self.unpushed.append((request, entry))
            return True
        if not new:
            self.df.log(request, self.spider)  # type: ignore[arg-type]
            return False
        self._count("scheduler/enqueued/redis")
        self._count("frontier/enqueued")
        self.on_enqueued()
        return True

    def _record(
        self, requests: list[tuple[Request, bytes]], acks: bool = True
    ) -> list[bool | None]:
        """Record and enqueue: per request True if it was new and is enqueued, False if
        seen, None if its call failed."""
        batch = self.prepare(requests, acks)
        return self.account(batch, self.send(batch))

    def prepare(self, requests: list[tuple[Request, bytes]], acks: bool = True) -> Prepared:
        """What :meth:`send` sends for ``requests`` (on the reactor thread: the
        fingerprinter and the local cache are not thread-safe); dont_filter requests
        are pushed unrecorded here. ``acks``: the calls carry the acknowledgements
        waiting, unless a request waits to be sent again (its parent may be among them)."""
        assert self.queue is not None
        df = self.df
        batch = Prepared(requests, [None] * len(requests))
        if acks and not self.unpushed and self.acks:
            batch.acks = self.acks.take_all()
            batch.acks_given = len(batch.acks)
        for i, (request, entry) in enumerate(requests):
            if request.dont_filter:
                shard = self.queue.shards[self._next_shard % len(self.queue.shards)]
                self._next_shard += 1
                try:
                    self.queue.push(shard, [(request.priority, entry)])
                    batch.out[i] = True
                except Exception as exc:  # kept and tried again
                    self._failed(exc)
                continue
            fp, cached, expire = df.step.before(request)
            if cached:
                df.counts.filtered(0, cached=1)
                batch.out[i] = False
                continue
            batch.todo.append(i)
            batch.fingerprints.append(fp)
            batch.expires.append(expire)
            batch.queued.append((stored_priority(request.priority), entry))
        return batch

    def send(self, batch: Prepared) -> list[bool | None]:
        """The record-and-enqueue calls of ``batch`` (blocking, touching no stats: safe in
        a thread): per fingerprint sent, seen, new, or None where its call failed."""
        if not batch.todo:
            return []
        assert self.queue is not None
        try:
            seen, failed = record_and_enqueue(
                self.df.backend,
                self.queue,
                batch.fingerprints,
                batch.expires,
                batch.queued,
                batch.acks,
            )
        except Exception as exc:  # whatever the client raised: kept, tried again
            seen, failed = [None] * len(batch.todo), [FailedCall(batch.todo, exc)]
        batch.errors = [call.error for call in failed]
        return seen

    def account(self, batch: Prepared, seen: list[bool | None]) -> list[bool | None]:
        """Count what :meth:`send` answered (on the reactor thread); the
        acknowledgements it did not carry wait for the next call."""
        df = self.df
        for error in batch.errors:
            self._failed(error)
        if batch.acks_given:
            left = self.acks.give_back(batch.acks)
            self._count("frontier/acknowledged", batch.acks_given - left)
        filtered = added = 0
        for i, fp, answer in zip(batch.todo, batch.fingerprints, seen):
            if answer is None:
                continue
            batch.out[i] = not answer
            df.step.learned(fp)
            if answer:
                filtered += 1
            else:
                added += 1
        df.counts.tally(filtered, added)  # (once a batch: a page's links are many)
        return batch.out

    def enqueue_many(self, requests: Sequence[Request]) -> Prepared:
        """For BatchDedupMiddleware: encode ``requests`` (those that cannot be are
        logged and left out) and prepare their one call per slot group."""
        encoded = []
        for request in requests:
            entry = self._encode(request)
            if entry is not None:
                encoded.append((request, entry))
        return self.prepare(encoded)

    def enqueued_many(self, batch: Prepared, seen: list[bool | None]) -> list[Request]:
        """After :meth:`send`: the requests to pass on (the new ones, already enqueued:
        :meth:`enqueue_request` lets them through without a call); the seen ones are
        logged as filtered, the failed ones kept and tried again."""
        self._count("dedup/batches")  # (as the dupefilter's batch path counts its own)
        self._count("dedup/batched", len(batch.requests))
        out = []
        for (request, entry), new in zip(batch.requests, self.account(batch, seen)):
            if new is None:
                self.unpushed.append((request, entry))
            elif new:
                self.enqueued.add(request)
                self._count("scheduler/enqueued/redis")
                self._count("frontier/enqueued")
                self.on_enqueued()
                out.append(request)
            else:
                self.df.log(request, self.spider)  # type: ignore[arg-type]
        return out

    def _failed(self, error: Exception) -> None:
        self._count("frontier/failed_calls")
        self._count(f"frontier/failed_calls/{error_kind(error)}")
        self.retry_at = self.clock() + RETRY_EVERY
        if self.on_refused is not None and wrong_type(error) is not None:
            self.on_refused(error, "record and enqueue requests")  # (the worker stops)
            return
        self.quiet.warn(
            "The frontier could not record and enqueue requests (kept, tried again each "
            "second; nothing is acknowledged meanwhile): %s",
            error,
        )

    def push_unpushed(self, now: bool = False) -> None:
        """Send the kept requests again (``now``: even within RETRY_EVERY of a failure)."""
        if not now and self.clock() < self.retry_at:
            return
        unpushed, self.unpushed = self.unpushed, []
        for (request, entry), new in zip(unpushed, self._record(unpushed, acks=False)):
            if new is None:
                self.unpushed.append((request, entry))
            elif new:  # (seen: another call recorded and enqueued it, or a worker did)
                self._count("scheduler/enqueued/redis")
                self._count("frontier/enqueued")
                self.on_enqueued()

    def push_at_close(self, refused: bool) -> bool:
        """At the close, send the kept requests once more: whether none is left (else
        said, as a WARNING after a key was ``refused``: that said why)."""
        if self.unpushed:
            self.push_unpushed(now=True)
        if self.unpushed:
            logger.log(
                logging.WARNING if refused else logging.ERROR,
                "%d request(s) could not be recorded and enqueued before the close; the "
                "pages that yielded them stay leased and will be fetched again (start "
                "requests: by the next start)",
                len(self.unpushed),
            )
        return not self.unpushed
