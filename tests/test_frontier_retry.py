"""A page whose download failed for good goes back to the frontier, to be tried again
later (FRONTIER_RETRY_TIMES, the delay doubled each time), rather than be lost: under a
persisted crawl nothing else would ask for it again (its parent is done and stays seen).

The lease call that ends its lease keeps it until due (``{tag}:frontier:later``), so it
is never lost in between; the lease calls put the pages due back at the front of the
queue. Time is injected by rewriting a page's due time, never waited for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request, Spider

from scrapy_dedup_suite.frontier.queue import FrontierQueue

from .helpers import run_script, settings_for
from .servers import Site, tree_links

ON_CLUSTER = True


def server_ms(server: Any) -> int:
    """The server's clock in whole ms, as the scripts read it."""
    seconds, micros = server.time()
    return int(seconds) * 1000 + int(micros) // 1000


def make_due(server: Any, key: str) -> None:
    """Every page waiting in ``key`` due now (the clock moved on)."""
    for member in server.zrange(key, 0, -1):
        server.zadd(key, {member: 0}, xx=True)


def test_a_page_kept_for_later_leaves_its_lease_and_comes_back_to_the_front_when_due(server):
    queue = FrontierQueue(server, ["{site}:requests"])
    shard = queue.shards[0]
    queue.push(shard, [(0, b"\x01 parse  http://example.com/a"), (0, b"\x01 parse  b")])
    (lease_id, priority, entry), other = queue.call(shard, 60_000, take=2).requests
    before = server_ms(server)
    answer = queue.call(shard, 0, later=[lease_id, 30_000, priority, entry + b"#2"])
    after = server_ms(server)
    assert answer.reclaimed == 0 and server.hlen(shard.leases) == 1  # the other's only
    ((member, due),) = server.zrange(shard.later, 0, -1, withscores=True)
    assert member == b"0 " + entry + b"#2"
    assert before + 30_000 <= due <= after + 30_000
    assert queue.call(shard, 60_000, take=5).requests == []  # not due: not leased
    make_due(server, shard.later)
    queue.push(shard, [(0, b"\x01 parse  c")])
    taken = queue.call(shard, 60_000, take=5).requests
    assert [e for _, _, e in taken] == [entry + b"#2", b"\x01 parse  c"]  # due: first
    assert not server.exists(shard.later)
    # a lease that ended and went back to the queue is not kept for later as well
    assert queue.call(shard, 0, renew=[other[0]]).reclaimed == 1  # (ended at once)
    again = queue.call(shard, 60_000, later=[other[0], 0, 0, other[2]], take=5)
    assert [e for _, _, e in again.requests] == [other[2]]  # once, not twice
    assert not server.exists(shard.later)


class RetrySpider(Spider):
    name = "site"

    def parse(self, response):
        pass


def scheduler_for(redis_url: str, **settings: Any) -> Any:
    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.frontier.scheduler import Scheduler

    crawler = get_crawler(RetrySpider, {"REDIS_URL": redis_url, **settings})
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(inprogress=set()))
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(RetrySpider())
    return scheduler


def handed_out(scheduler: Any) -> Request:
    request = scheduler.next_request()
    assert request is not None
    scheduler.crawler.engine._slot.inprogress.add(request)
    return request


def done(scheduler: Any, request: Request) -> None:
    scheduler.crawler.engine._slot.inprogress.remove(request)


@pytest.mark.single_server
def test_a_failed_page_is_tried_again_after_a_doubling_delay_then_given_up(
    server, redis_url, caplog
):
    scheduler = scheduler_for(
        redis_url, FRONTIER_RETRY_TIMES=2, FRONTIER_RETRY_DELAY=10, SCHEDULER_PERSIST=True
    )
    shard = scheduler.queue.shards[0]
    try:
        assert scheduler.enqueue_request(Request("http://example.com/down", priority=4))
        request = handed_out(scheduler)
        request.meta["retry_times"] = 2  # (RetryMiddleware gave up)
        for tries, delay_ms in ((1, 10_000), (2, 20_000)):
            assert scheduler.retry_later(request)
            done(scheduler, request)
            before = server_ms(server)
            assert scheduler.next_request() is None  # (the call carries it: not due)
            after = server_ms(server)
            ((_, due),) = server.zrange(shard.later, 0, -1, withscores=True)
            assert before + delay_ms <= due <= after + delay_ms
            assert server.hlen(shard.leases) == 0
            make_due(server, shard.later)
            scheduler.looks.forget()  # (the clock moved on: the shard is looked at again)
            request = handed_out(scheduler)
            assert request.url == "http://example.com/down" and request.priority == 4
            assert request.meta["frontier_retry"] == tries
            assert "retry_times" not in request.meta  # RetryMiddleware's count starts again
        assert not scheduler.retry_later(request)  # FRONTIER_RETRY_TIMES reached
        assert not scheduler.retry_later(Request("http://example.com/other"))  # not its own
        done(scheduler, request)
        assert scheduler.stats.get_value("frontier/retry_later") == 2
        # one more kept for later at the close: said, and kept (SCHEDULER_PERSIST)
        assert scheduler.enqueue_request(Request("http://example.com/down2"))
        second = handed_out(scheduler)
        assert scheduler.retry_later(second)
        done(scheduler, second)
        with caplog.at_level(logging.INFO):
            scheduler.close("finished")
        assert server.zcard(shard.later) == 1 and server.hlen(shard.leases) == 0
        assert "1 page(s) whose download failed wait to be tried again, the first in 10 s" in (
            caplog.text
        )
        assert "kept for the next run (SCHEDULER_PERSIST)" in caplog.text
    finally:
        server.flushall()


@pytest.mark.single_server
def test_dedup_info_and_the_handback_count_the_pages_to_try_again(server, redis_url):
    from scrapy_dedup_suite.commands.dedup_info import frontier_view, render
    from scrapy_dedup_suite.frontier.codec import RequestCodec
    from scrapy_dedup_suite.frontier.takeover import hand_back

    scheduler = scheduler_for(redis_url, FRONTIER_RETRY_DELAY=120, SCHEDULER_PERSIST=True)
    try:
        assert scheduler.enqueue_request(Request("http://example.com/down"))
        request = handed_out(scheduler)
        assert scheduler.retry_later(request)
        done(scheduler, request)
        scheduler.close("finished")
        view = frontier_view(scheduler.crawler.settings, "site", server)
        assert view["retry_later"] == 1 and 0 < view["next_retry_in"] <= 120
        assert "1 page(s) whose download failed wait to be tried again, the first in" in (
            render("site", {"frontier": view})
        )
        codec = RequestCodec(None)
        dry = hand_back(scheduler.queue, "site:requests", codec, dry_run=True)
        assert dry.later == 1 and not server.exists("site:requests")
        moved = hand_back(scheduler.queue, "site:requests", codec)
        assert moved.later == 1 and moved.moved == 1 and server.zcard("site:requests") == 1
        assert not server.exists(scheduler.queue.shards[0].later)
    finally:
        server.flushall()


@pytest.fixture(scope="module")
def tree() -> Any:
    site = Site(pages=156, links=5, linker=tree_links).start()
    yield site
    site.stop()


#: Page 6 (31 pages below it) answers 503 to its first three requests: once and
#: RetryMiddleware's two retries, so it fails for good once; page 2 (and the 31 below
#: it) answers 503 always.
FLAKY, DOWN = 6, 2


def below(page: int, pages: int) -> set[int]:
    out, todo = set(), [page]
    while todo:
        n = todo.pop()
        out.add(n)
        todo += tree_links(n, pages, 5)
    return out


@pytest.mark.parametrize("retry", [True, False], ids=["retried", "not-retried"])
def test_a_crawl_downloads_the_pages_below_one_that_failed_for_good_once(
    tmp_path, tree, server, redis_settings, retry
):
    """The comparison: the same crawl with FRONTIER_RETRY_TIMES on and off. On, the page
    that failed for good once is tried again (at once: FRONTIER_RETRY_DELAY 0) and every
    page below it is downloaded; one that always fails is tried 1 + FRONTIER_RETRY_TIMES
    times (with RetryMiddleware's retries each), then forgotten at the close. Off, the
    pages below the failed one are never asked for."""
    tree.downloads.clear()
    tree.failures.clear()
    tree.fail_first = {FLAKY: 3}
    tree.failing = {DOWN: "503"}
    try:
        settings = settings_for(
            redis_settings, "compact", "frontier",
            DOWNLOADER_MIDDLEWARES={"scrapy_dedup_suite.failed.FailedPagesMiddleware": 540},
            FRONTIER_RETRY_TIMES=2 if retry else 0, FRONTIER_RETRY_DELAY=0,
        )  # fmt: skip
        args = {"site": tree.url, "start": [0], "settings": settings}
        result = run_script("tests.crawl_cases", args, tmp_path / "run.json")
    finally:
        tree.fail_first, tree.failing = {}, {}
    lost = below(FLAKY, tree.pages) | below(DOWN, tree.pages)
    stats = result["stats"]
    if retry:
        assert sorted(result["pages"]) == sorted(set(range(tree.pages)) - below(DOWN, tree.pages))
        assert tree.failures[FLAKY] == 3 and tree.downloads[FLAKY] == 1
        assert tree.failures[DOWN] == 3 * (1 + 2)  # then given up, forgotten at the close
        assert stats["frontier/retry_later"] == 1 + 2
    else:
        assert sorted(result["pages"]) == sorted(set(range(tree.pages)) - lost)
        assert tree.failures[FLAKY] == 3 and tree.failures[DOWN] == 3
        assert "frontier/retry_later" not in stats
    assert stats["dedup/failed"] == (1 if retry else 2)
    assert max(tree.downloads.values()) == 1  # none downloaded twice
    assert server.keys("*") == []  # SCHEDULER_PERSIST off: all gone at the close


def idle_looks(scheduler: Any) -> tuple[Any, bytes, Callable[[float], bool]]:
    """The scheduler's clock injected: its shard, a page to try again as kept for later
    (its member), and a look at whether work is pending ``after`` seconds more."""
    now = [1000.0]
    scheduler.clock = lambda: now[0]
    page = Request("http://example.com/again", callback=RetrySpider().parse)
    member = b"0 " + scheduler.codec.encode(page, priority_apart=True)

    def looked_at(after: float) -> bool:
        now[0] += after
        scheduler.looks.forget()  # (the clock moved on: the shard is looked at again)
        return bool(scheduler.has_pending_requests())

    return scheduler.queue.shards[0], member, looked_at


@pytest.mark.single_server
def test_the_idle_close_waits_for_a_retry_due_within_scheduler_idle_before_close(
    server, redis_url, caplog
):
    """SCHEDULER_IDLE_BEFORE_CLOSE 60 s, the scheduler's clock injected: a page kept for
    later and due within that time is work pending, though nothing waits in the queue
    and nothing is leased (before, issue 51, the worker went idle and closed with it
    waiting); one due after that time is not, and the close says it leaves it."""
    scheduler = scheduler_for(redis_url, SCHEDULER_IDLE_BEFORE_CLOSE=60, FRONTIER_RETRY_TIMES=1)
    shard, member, looked_at = idle_looks(scheduler)
    server.zadd(shard.later, {member: server_ms(server) + 30_000})
    assert looked_at(0)
    assert looked_at(61)  # due in 30 s: the worker waits for it
    server.zadd(shard.later, {member: server_ms(server) + 600_000})
    assert looked_at(0)  # (idle from now)
    assert not looked_at(61)  # due in 10 minutes: it goes idle
    with caplog.at_level(logging.INFO):
        scheduler.close("finished")
    assert "1 page(s) whose download failed wait to be tried again" in caplog.text


@pytest.mark.single_server
def test_frontier_wait_for_retries_keeps_a_worker_for_a_retry_due_within_it(server, redis_url):
    """FRONTIER_WAIT_FOR_RETRIES 900 s with no idle wait (issue 56: the operator's bound
    on what "finished" waits for): a page due in 10 minutes is work pending; one due in
    20 minutes is left, and the worker goes idle at once."""
    scheduler = scheduler_for(redis_url, FRONTIER_WAIT_FOR_RETRIES=900, FRONTIER_RETRY_TIMES=1)
    shard, member, looked_at = idle_looks(scheduler)
    server.zadd(shard.later, {member: server_ms(server) + 600_000})
    assert looked_at(0) and looked_at(1)
    server.zadd(shard.later, {member: server_ms(server) + 1_200_000})
    assert not looked_at(0)
    scheduler.close("finished")


@pytest.mark.single_server
def test_a_request_this_worker_takes_itself_starts_the_idle_time_again(server, redis_url):
    """The idle time restarts when the worker takes requests itself, not only when a
    look finds some waiting: before (issue 51), a retry that came due and was taken by
    the worker's own request call left the idle time running from before it."""
    scheduler = scheduler_for(redis_url, SCHEDULER_IDLE_BEFORE_CLOSE=10)
    now = [1000.0]
    scheduler.clock = lambda: now[0]
    scheduler.looks.forget()  # (its open looked by the real clock)
    shard = scheduler.queue.shards[0]
    assert scheduler.has_pending_requests()  # idle from 1000
    now[0] += 5
    page = Request("http://example.com/taken", callback=RetrySpider().parse)
    scheduler.queue.push(shard, [(0, scheduler.codec.encode(page, priority_apart=True))])
    done(scheduler, handed_out(scheduler))  # taken by its own request call, and done
    now[0] += 6
    scheduler.looks.forget()
    assert scheduler.has_pending_requests()  # 6 s since its last request, not 11
    now[0] += 11
    scheduler.looks.forget()
    assert not scheduler.has_pending_requests()
