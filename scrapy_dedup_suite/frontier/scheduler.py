"""``Scheduler``: the crawl's frontier in Redis, a drop-in for scrapy-redis's scheduler
that loses no page on kill -9.

    SCHEDULER = "scrapy_dedup_suite.frontier.scheduler.Scheduler"

A request a worker takes is leased, not popped (:mod:`.queue`); it is acknowledged once
Scrapy is done with it: its response parsed and every request its callback yielded
recorded and enqueued, each in the same call as its record (:mod:`.record`). A kill
between the two leaves the parent to be fetched again, never its children lost. A
live worker renews its leases every third of FRONTIER_LEASE, from a thread that a
callback blocking the reactor does not stop (:mod:`.leases`); a dead worker's go back
to the front of the queue when their lease ends, by the next call of any worker.
A graceful close gives back what was taken and not started. A page whose download
failed for good is tried again later rather than acknowledged (:mod:`.later`).

Round trips: one call per batch of requests recorded (those the engine hands it in one
turn of the reactor, a page's links: sent in a thread, :mod:`.incoming`), one call per
FRONTIER_PREFETCH requests taken; both carry the acknowledgements waiting, which a call
of their own sends when none went to their shard within ACK_WITHIN (0.2 s). The next
requests are leased in a thread once half of those taken are handed out, so that the
engine seldom waits for Redis; the idle checks look at most once a second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from twisted.internet import task
from twisted.internet.defer import Deferred

from ..backends.keys import spider_key
from ..core.daemon_threads import DaemonThreads
from ..dedup.crawl_checks import dupefilter_for, frontier_dupefilter
from ..dedup.dupefilter import RFPDupeFilter
from ..dedup.engine_state import engine_slot, watch_engine
from ..exceptions import DedupConfigError
from ..server.privileges import permission_error
from ..settings.table import read
from .acks import stamped
from .backoff import SlotBackoff, on_refusal
from .frontier_options import FrontierOptions
from .homes import crawl_queue
from .idle import EngineWaker, IdleTimer, OneShot, ShardLooks, running_reactor
from .incoming import Incoming
from .later import RetryLater
from .leases import Holdings, LeaseKeeper
from .queue import FrontierQueue, Shard
from .record import load_scripts
from .refusals import Refusals, wrong_type
from .shard_calls import ShardCalls
from .slots import SlotPolicy, learned_delays, local_delay_off
from .takeover import old_queue, take_over
from .taking import Taking

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: The longest a finished page's acknowledgement waits for a call to its shard (s).
ACK_WITHIN = 0.2


class Scheduler(BaseScheduler):
    """The frontier (see the module's docstring)."""

    #: BatchDedupMiddleware passes requests on untouched under a scheduler that says
    #: this: it batches them itself (:mod:`.incoming`).
    records_and_enqueues = True

    def __init__(self, crawler: Crawler, df: RFPDupeFilter, options: FrontierOptions) -> None:
        self.crawler = crawler
        self.df = df
        self.options = options
        self.stats = crawler.stats
        self.server = df.backend.server
        self.spider: Spider | None = None
        self.codec = options.codec()
        self.queue: FrontierQueue | None = None
        self.queue_key = ""
        self.lease_ms = max(1, round(options.lease * 1000))
        self.clock: Callable[[], float] = time.monotonic
        #: The leases this worker holds (:mod:`.leases`).
        self.holdings = Holdings()
        #: Pages whose download failed for good, tried again later (:mod:`.later`).
        self.later = RetryLater(self.codec, options.retry_times, options.retry_delay, self._count)
        #: The way in: requests recorded and enqueued, and those to send again.
        self.incoming = Incoming(
            df, self.codec, self._count, self._forget_shards, self.holdings.acks,
            read(crawler.settings, "DEDUP_BATCH_SIZE"),
        )  # fmt: skip
        self.incoming.on_settled = self._batch_answered
        self.incoming.on_dropped = self._dropped
        #: Sends the batches of requests to record, in a thread of their own.
        self.record_thread = DaemonThreads("dedup-frontier-record", 1)
        self.refusals = Refusals(crawler, self.incoming.quiet)
        self.incoming.on_refused = self.refusals.failed
        #: What each shard's last call said (by :attr:`clock`, which a test may set).
        self.looks = ShardLooks(lambda: self.clock())
        self.idle = IdleTimer(options.idle_before_close, options.retry_wait)
        self.waker = EngineWaker(lambda: engine_slot(crawler))
        self.acks_due = OneShot(self._acknowledge)  # (when no other call took them)
        self._acknowledging: task.LoopingCall | None = None
        #: The calls to the shards, each carrying what waits for its shard.
        self.calls = ShardCalls(
            lambda: self.queue, self.lease_ms, options.max_returns, self.holdings,
            self.later, self.looks, self.codec, self._count,
        )  # fmt: skip
        #: Renews the leases held, from a thread of its own (:mod:`.leases`).
        self.keeper = LeaseKeeper(
            lambda: self.queue, self.lease_ms, options.max_returns,
            lambda: self.holdings.ids(self.later.waiting), self.calls.reclaimed,
            lambda exc: self.refusals.failed(exc, "renew its leases"),
        )  # fmt: skip
        #: Leases the next requests, here or in a thread ahead of need.
        self.taking = Taking(
            lambda: self.queue, self.calls, self.holdings, self.looks, self.codec,
            options.prefetch, self._count, self.incoming.quiet, self.refusals.failed,
        )  # fmt: skip
        self.taking.on_found = self._found
        self.taking.clock = lambda: self.clock()
        #: Each request's download slot, kept across workers (FRONTIER_POLITENESS).
        self.slots = self.incoming.slots = SlotPolicy.from_settings(crawler.settings)
        self.taking.on_answered = self._lease_answered
        #: Blocks a slot a site refused, for every worker (FRONTIER_BACKOFF_HTTP_CODES).
        backoff = SlotBackoff.from_settings(crawler.settings, self.slots)
        self._on_refusal = None if backoff is None else on_refusal(
            backoff, lambda: self.queue, self.holdings, lambda: self.clock(), self._count,
            self.refusals.failed,
        )  # fmt: skip
        self._closed = False
        #: Whether the open took its queue: a worker refused at its open, or stopped by
        #: a key refused, deletes nothing at the close (what it refused stays as it was).
        self._opened = False

    @classmethod
    def check_settings(cls, settings: BaseSettings) -> None:
        """The frontier's own settings, and the dupefilter class it needs: a bad one
        raises its one-line DedupConfigError (called before the engine starts)."""
        FrontierOptions.from_settings(settings)
        frontier_dupefilter(settings.get("DUPEFILTER_CLASS"))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        options = FrontierOptions.from_settings(crawler.settings)
        return cls(crawler, dupefilter_for(crawler), options)

    def __len__(self) -> int:
        """Requests taken and not started, here; the queue's count is ``dedup-info``'s."""
        return len(self.holdings.taken)

    # -- life cycle --------------------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self.spider = spider
        self.codec.spider = spider
        self.codec.say_trust()
        df = self.df
        df.open()
        backend = df.backend
        self.queue_key = spider_key(self.options.queue_key, spider.name, "SCHEDULER_QUEUE_KEY")
        self.queue = self.incoming.queue = crawl_queue(backend, self.queue_key, self.lease_ms)
        self.incoming.spider = spider
        try:
            load_scripts(backend)
            waiting, held = self._open_queue()
        except DedupConfigError as exc:  # scrapy-redis's queue it may not read: left there
            self.refusals.refuse(exc)
            waiting = held = 0
        except Exception as exc:  # a key of another type, a command the user may not run
            refused = permission_error(exc, self.server)
            if refused is not None:
                self.refusals.refuse(refused)
            elif wrong_type(exc) is not None:
                self.refusals.failed(exc, "open its queue", close=False)
            else:
                raise
            waiting = held = 0
        self._opened = True
        watch_engine(self.crawler, self._done)
        if self._on_refusal is not None:
            self.crawler.signals.connect(self._on_refusal, signals.response_downloaded)
        if self.slots is not None:
            self.slots.learned = learned_delays(self.crawler)
            self.crawler.signals.connect(self.holdings.reached, signals.request_reached_downloader)
        self._acknowledging = task.LoopingCall(self._acknowledge)
        self._acknowledging.start(self.options.lease / 3, now=False)
        if running_reactor() is not None:  # (as the engine opens it, not a test)
            self.keeper.start()
            self.incoming.in_thread = self.record_thread
        logger.info(
            "Frontier: %d shard(s) at %r, %s, %d lease(s) held",
            len(self.queue.shards),
            self.queue.shards[0].queue,
            f"requests waiting in {waiting:,} run(s) (dedup-info counts them)"
            if waiting
            else "no request waiting",
            held,
        )

    def _open_queue(self) -> tuple[int, int]:
        """Flush (SCHEDULER_FLUSH_ON_START), take over scrapy-redis's queue, give what
        was set aside another try; then what the shards say (runs waiting, leases
        held)."""
        assert self.queue is not None
        if self.options.flush_on_start:
            self.flush()
        tag = self.slots.tag if self.slots is not None else None
        moved = take_over(self.queue, self.queue_key, self.codec, self.codec.reader, tag=tag)
        self._count("frontier/taken_over", moved)
        self.queue.unaside_all()
        return self._look()[:2]

    def close(self, reason: str) -> Deferred[Any] | None:
        """Give back what was taken and not started (after the lease call running in a
        thread, if any, answered), acknowledge what is done, flush unless persisting."""
        self._closed = self.incoming.closing = self.taking.closed = True
        self.waker.stop()
        self.acks_due.stop()
        for running in (self.taking.running, self.incoming.sent):
            if running is not None:
                return running.addBoth(lambda _: self.close(reason))
        self._close(reason)
        return None

    def _close(self, reason: str) -> None:
        if self._acknowledging is not None and self._acknowledging.running:
            self._acknowledging.stop()
        self.keeper.stop()
        self.taking.stop()  # (the calls have answered: close() waited for them)
        self.record_thread.stop()
        self.incoming.push_at_close(self.refusals.stopping)  # (the rest: settled, or not)
        released = self.holdings.give_back()
        for shard in {*released, *self.holdings.acks, *self.later.waiting}:
            try:
                self.calls.call(shard, 0, release=released.get(shard, ()))
            except Exception as exc:  # their leases end and go back by themselves
                logger.warning("Could not give back the frontier's leases at close: %s", exc)
        self._count("frontier/released", sum(len(ids) for ids in released.values()))
        if self.queue is not None:
            self.later.say_at_close(self.queue, self.options.persist)
        if not self.options.persist and self._opened and not self.refusals.stopping:
            try:
                self.flush()
            except Exception as exc:  # Redis away at the close: what it holds stays
                logger.error(
                    "The frontier could not delete its queue and fingerprints at the close "
                    "(SCHEDULER_PERSIST is off): %s; they stay in Redis, and the next run "
                    "resumes them unless SCHEDULER_FLUSH_ON_START is on",
                    exc,
                )
        self.df.close(reason)

    def flush(self) -> None:
        """Delete the queue and the fingerprints (SCHEDULER_FLUSH_ON_START, and the close
        without SCHEDULER_PERSIST)."""
        assert self.queue is not None
        self.queue.clear()
        if old_queue(self.server, self.queue_key):  # scrapy-redis's, not yet taken over
            self.server.delete(self.queue_key)
        self.df.clear()

    # -- requests in -------------------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        return self.incoming.enqueue(request)

    def _forget_shards(self, shards: set[Shard] | None) -> None:
        """This worker enqueued to ``shards`` (None: any): what they last said is stale."""
        self.looks.forget(shards)

    # -- requests out ------------------------------------------------------------------

    def next_request(self) -> Request | None:
        if self.refusals.stopping:
            self.refusals.close()  # (refused at the open: the engine runs now)
            return None
        if not self.holdings.taken and self.taking.running is None:
            self.taking.take()
        if not self.holdings.taken:
            if self.looks.work_elsewhere():  # (else the engine's heartbeat asks again)
                self.waker.later()
                ready_at = self.looks.next_due()  # (a slot's turn, before the wait's end)
                if ready_at is not None:
                    self.waker.within(max(0.0, ready_at - self.clock()))
            return None
        due = self.holdings.next_due(self.clock())
        if not isinstance(due, tuple):  # (held for its slot's turn: asked again then)
            self.waker.within(due or 0.0)
            return None
        request, shard, lease_id = due
        if self.slots is not None:
            local_delay_off(self.crawler, request)
        self.holdings.in_flight[request] = (shard, lease_id)
        self.holdings.sent[lease_id] = time.monotonic()
        self._count("scheduler/dequeued/redis")
        if len(self.holdings.taken) <= self.options.prefetch // 2:
            self.taking.ahead()
        return request

    def _found(self) -> None:
        """This worker's own call took requests: no look saw them."""
        self.idle.busy()
        self.waker.found()

    def _lease_answered(self) -> None:
        self._forget_if_idle()
        self.waker.now()

    def _done(self, request: Request) -> None:
        """The engine is done with ``request``: every request its callback yielded was
        handed on before now; its lease is acknowledged once those are settled."""
        held = self.holdings.in_flight.pop(request, None)
        if held is not None:
            self.holdings.settling.append((self.incoming.handed, request, *held))
            self._settled()

    def _settled(self) -> None:
        """Act on the pages done whose children are settled (recorded and enqueued, or
        seen): acknowledge them, or keep them to try again later. With nothing taken,
        their shards are looked at again: a slot whose concurrency was full made them say
        nothing waits, and these acknowledgements free it (the engine's next ask, right
        after, carries them and leases its next request, not ACK_WITHIN later)."""
        settling = self.holdings.settling
        freed: set[Shard] = set()
        while settling and self.incoming.settled(settling[0][0]):
            _, request, shard, lease_id = settling.popleft()
            sent = self.holdings.sent.pop(lease_id, None)
            if not self.later.done(request, shard, lease_id):
                clock = self.queue.clocks.get(shard) if self.queue is not None else None
                self.holdings.acks.add(shard, [stamped(lease_id, sent, clock)])
            freed.add(shard)
        if freed and not self._closed:
            self.acks_due.ask(ACK_WITHIN)
            if not self.holdings.taken:  # (they may free a full slot: look again)
                self.looks.forget(freed)
        self._forget_if_idle()

    def _batch_answered(self) -> None:
        """A batch of requests was recorded: act on the pages it settled; and an engine
        with nothing taken asks again now, not at its next heartbeat (what it found
        nothing in may hold these requests; or, all seen, the crawl may be over)."""
        self._settled()
        if not self.holdings.taken and not self._closed and self.incoming.in_thread:
            self.waker.now()

    def _dropped(self, request: Request) -> None:
        """``request`` was handed on as enqueued and then found seen: Scrapy's signal
        for a request the scheduler did not take, as the engine sends it."""
        self.crawler.signals.send_catch_log(
            signals.request_dropped, request=request, spider=self.spider
        )

    def retry_later(self, request: Request) -> bool:
        """``request``'s download failed for good (``FailedPagesMiddleware`` says so):
        whether it is tried again later (:mod:`.later`), rather than acknowledged."""
        return request in self.holdings.in_flight and self.later.decide(request)

    def _forget_if_idle(self) -> None:
        """Done with all it took: what the shards last said counted as another worker's
        the leases this one had not acknowledged yet, so the idle check looks again (its
        call carries the acknowledgements), else the crawl waits a heartbeat to end."""
        holdings = self.holdings
        if not holdings.in_flight and not holdings.taken and not holdings.settling:
            self.looks.forget_held()

    def _acknowledge(self) -> None:
        """ACK_WITHIN after a page is done, and every third of the lease: acknowledge
        what this worker is done with (and record what waits to be), when no other call
        did."""
        self.incoming.push_waiting()
        for shard in {*self.holdings.acks, *self.later.waiting}:
            try:
                self.calls.call(shard, 0)
            except Exception as exc:  # (the call kept the acknowledgements for the next)
                self.refusals.failed(exc, "acknowledge its leases")

    # -- idle --------------------------------------------------------------------------

    def has_pending_requests(self) -> bool:
        """Requests here, or in Redis, or leased by another worker (whose pages may
        yield more); from what the shards' last calls said, each looked at again when
        that is older than LOOK_EVERY. Then SCHEDULER_IDLE_BEFORE_CLOSE more seconds."""
        if self.refusals.stopping:
            return False  # (a key refused: the spider is closing)
        if self.holdings.taken or self.incoming.busy or self.taking.running is not None:
            return True
        assert self.queue is not None
        calls = self.looks.calls
        for fresh in (False, True):  # (idle only on what the shards say now)
            if fresh:
                if self.looks.calls - calls == len(self.queue.shards):
                    return False  # (the first look called every shard: it was now)
                self.looks.forget()
            try:
                waiting, held, due_at = self._look()
            except Exception as exc:  # Redis away: say pending, and look again later
                self.refusals.failed(exc, "look at the queue")
                return not self.refusals.stopping
            if self.idle.pending(self.clock(), bool(waiting or held), due_at):
                return True
        return False

    def _look(self) -> tuple[int, int, float | None]:
        """What the shards say (:meth:`ShardLooks.totals`), each call acknowledging
        what this worker is done with."""
        assert self.queue is not None
        return self.looks.totals(self.queue.shards, lambda shard: self.calls.call(shard, 0))

    def _count(self, name: str, n: int = 1) -> None:
        if n and self.stats is not None:
            self.stats.inc_value(name, n)
