"""The frontier scheduler records and enqueues what the engine hands it a batch at a
time, in a thread, without a round trip per request on the reactor thread; a page's
lease is acknowledged only once the requests its callback yielded are settled.

The reactor's end-of-turn call and the thread are run here by hand (no timing): the
scheduler is opened as the engine opens it (a running reactor said), its
``incoming.call_later`` and ``incoming.in_thread`` replaced by recorders."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.utils.test import get_crawler
from twisted.internet import defer, reactor

from scrapy_dedup_suite.frontier.figures import shard_counts
from scrapy_dedup_suite.frontier.scheduler import Scheduler

pytestmark = pytest.mark.single_server


class SiteSpider(Spider):
    name = "site"


class ByHand:
    """The reactor's turns and the record thread of ``scheduler``, run by hand."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.turns: list[tuple[float, Any]] = []
        self.sends: list[tuple[Any, tuple[Any, ...], defer.Deferred[Any]]] = []
        incoming = scheduler.incoming
        incoming.call_later = self._call_later
        incoming.in_thread = self._in_thread

    def _call_later(self, delay: float, call: Any) -> Any:
        self.turns.append((delay, call))
        return SimpleNamespace(active=lambda: False, cancel=lambda: None)

    def _in_thread(self, call: Any, *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        self.sends.append((functools.partial(call, **kwargs), args, defer.Deferred()))
        return self.sends[-1][2]

    def end_turn(self) -> float:
        """The reactor's end of turn: the call it was asked for runs; its delay."""
        ((delay, call),) = self.turns
        self.turns.clear()
        call()
        return delay

    def answer(self) -> None:
        """The thread runs the one send waiting (here), and answers on the reactor."""
        ((call, args, deferred),) = self.sends
        self.sends.clear()
        deferred.callback(call(*args))


def opened(redis_url: str, monkeypatch: Any) -> tuple[Scheduler, Any, ByHand]:
    settings = {"REDIS_URL": redis_url, "CONCURRENT_REQUESTS": 4, "SCHEDULER_PERSIST": True}
    crawler = get_crawler(SiteSpider, {**settings, "DEDUP_BACKEND": "compact"})
    slot = SimpleNamespace(inprogress=set(), nextcall=SimpleNamespace(schedule=lambda: None))
    crawler.engine = SimpleNamespace(_slot=slot)
    scheduler = Scheduler.from_crawler(crawler)
    leases: list[Any] = []
    scheduler.taking.in_thread = lambda *args, **kwargs: leases.append(args) or defer.Deferred()
    monkeypatch.setattr(reactor, "running", True, raising=False)
    scheduler.open(SiteSpider())
    scheduler.keeper.stop()  # (the renewals: not this test's)
    return scheduler, slot, ByHand(scheduler)


def commands(server: redis.Redis) -> int:
    """Every command the server ran (those scripts ran too)."""
    stats = server.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


def scripts_called(server: redis.Redis) -> int:
    """Calls of scripts clients sent."""
    stats = server.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


def started(scheduler: Scheduler, slot: Any, hand: ByHand) -> Request:
    """The start request enqueued, sent, and taken by the engine (in progress)."""
    assert scheduler.enqueue_request(Request("http://example.com/"))
    hand.end_turn()
    hand.answer()
    parent = scheduler.next_request()
    assert parent is not None
    slot.inprogress.add(parent)
    return parent


def test_a_page_s_links_cost_no_call_on_the_reactor_and_its_lease_waits_for_them(
    server, redis_url, monkeypatch
):
    scheduler, slot, hand = opened(redis_url, monkeypatch)
    dropped: list[Request] = []

    def on_dropped(request: Request, spider: Spider) -> None:  # (held here: a weak reference)
        dropped.append(request)

    scheduler.crawler.signals.connect(on_dropped, signal=signals.request_dropped)
    try:
        parent = started(scheduler, slot, hand)
        shard = scheduler.queue.shards[0]
        before = commands(server)
        links = [Request(f"http://example.com/{i}") for i in range(50)]
        again = Request("http://example.com/")  # the parent's own URL: seen
        assert all(scheduler.enqueue_request(r) for r in [*links, again])
        slot.inprogress.remove(parent)  # the engine is done with the page
        assert commands(server) - before == 0  # no call yet, for 51 requests
        assert not scheduler.holdings.acks and len(scheduler.holdings.settling) == 1
        held = scheduler.holdings.ids({})[shard]
        assert len(held) == 1  # (still renewed meanwhile)
        assert scheduler.has_pending_requests()  # (the batch is not settled)

        assert hand.end_turn() == 0  # at the end of this turn, one batch, one send
        before = scripts_called(server), commands(server)
        hand.answer()
        assert scripts_called(server) - before[0] == 1
        assert commands(server) - before[1] > 1  # (what the script ran)
        assert not scheduler.holdings.settling
        # (each acknowledgement says when its request was sent: "id@ms", frontier_ack)
        acked = [[i.partition("@")[0] for i in ids] for _, ids in scheduler.holdings.acks.items()]
        assert acked == [held]
        assert shard_counts(scheduler.queue, shard).waiting == 50
        stats = scheduler.stats
        assert stats.get_value("frontier/enqueued") == 51  # (with the start request)
        assert stats.get_value("dedup/filtered") == 1 and dropped == [again]
        assert stats.get_value("dedup/batches") == 2
        assert stats.get_value("dedup/batched") == 52
    finally:
        scheduler.close("finished")
        server.flushall()


def test_a_batch_whose_call_failed_is_sent_again_and_nothing_after_it_is_acknowledged(
    server, redis_url, monkeypatch
):
    scheduler, slot, hand = opened(redis_url, monkeypatch)
    try:
        parent = started(scheduler, slot, hand)
        links = [Request(f"http://example.com/{i}") for i in range(10)]
        assert all(scheduler.enqueue_request(r) for r in links)
        slot.inprogress.remove(parent)
        backend = scheduler.df.backend
        live, backend.server = backend.server, redis.Redis(port=1, socket_connect_timeout=0.2)
        hand.end_turn()
        hand.answer()  # refused: no server
        assert scheduler.stats.get_value("frontier/failed_calls") == 1
        assert len(scheduler.incoming.waiting) == 10 and not scheduler.holdings.acks
        assert len(scheduler.holdings.settling) == 1
        # A link handed on meanwhile joins them; the retry waits RETRY_EVERY.
        assert scheduler.enqueue_request(Request("http://example.com/late"))
        assert hand.end_turn() > 0.5
        backend.server = live
        hand.answer()
        assert not scheduler.incoming.waiting and not scheduler.holdings.settling
        assert len(scheduler.holdings.acks) == 1
        assert shard_counts(scheduler.queue, scheduler.queue.shards[0]).waiting == 11
    finally:
        scheduler.close("finished")
        server.flushall()


def test_a_close_waits_for_the_batch_in_flight_then_sends_the_rest_and_acknowledges(
    server, redis_url, monkeypatch
):
    scheduler, slot, hand = opened(redis_url, monkeypatch)
    parent = started(scheduler, slot, hand)
    assert scheduler.enqueue_request(Request("http://example.com/a"))
    hand.end_turn()  # in flight
    assert scheduler.enqueue_request(Request("http://example.com/b"))  # waiting
    slot.inprogress.remove(parent)
    closing = scheduler.close("shutdown")
    assert closing is not None and not closing.called
    hand.answer()
    assert closing.called and not hand.turns and not hand.sends
    shard = scheduler.queue.shards[0]
    counts = shard_counts(scheduler.queue, shard)
    assert counts.waiting == 2 and server.hlen(shard.leases) == 0  # the parent acknowledged
    assert scheduler.stats.get_value("frontier/acknowledged") == 1
    server.flushall()
