"""Politeness across workers (FRONTIER_POLITENESS): the frontier queues requests per
download slot and hands a slot's request out only when the slot is ready for every
worker together. The queue's calls are made by hand here (two queues on one shard are
two workers); then real crawls by two worker processes of hosts whose servers note
when each request arrived."""

from __future__ import annotations

import time

import pytest
from scrapy import Request
from scrapy.settings import Settings

from bench.politeness import HostsSite
from scrapy_dedup_suite.frontier.entries import entry_of
from scrapy_dedup_suite.frontier.queue import FrontierQueue
from scrapy_dedup_suite.frontier.slots import SlotPolicy

from .helpers import crawl_worker, settings_for

ON_CLUSTER = True

HOUR_MS = 3_600_000


def tagged(url: str, **settings) -> bytes:
    """The entry a worker sends for ``url`` under ``settings`` (its body: the URL; no
    jitter unless asked)."""
    request = Request(url)
    policy = SlotPolicy(Settings({"RANDOMIZE_DOWNLOAD_DELAY": False, **settings}))
    return policy.tag(b"\x01" + url.encode(), request)


def workers(server, n: int = 2) -> list[FrontierQueue]:
    return [FrontierQueue(server, ["t:requests"]) for _ in range(n)]


def urls_of(requests) -> list[str]:
    return [entry[1:].decode() for _, _, entry in requests]


def urls(leased) -> list[str]:
    return urls_of(leased.requests)


def test_a_slot_hands_out_its_next_request_a_delay_after_the_last_for_every_worker(server):
    """DOWNLOAD_DELAY an hour: the first call gets the slot's first request now and
    its second to hold for the delay (the server's clock of the same call: exact);
    another worker right after gets none of it, and is told when the slot is ready."""
    one, two = workers(server)
    shard = one.shards[0]
    one.push(shard, [(0, tagged(f"http://a.test/{i}", DOWNLOAD_DELAY=3600)) for i in range(3)])
    first = one.call(shard, 60_000, take=10)
    assert urls(first) == ["http://a.test/0", "http://a.test/1"]
    # The first sent at once, the second held a delay (the server's clock of the same
    # call, read on this process's: less the answer's way here).
    assert first.holds[0] == 0.0 and 3599 < first.holds[1] <= 3600
    other = two.call(shard, 60_000, take=10)
    assert other.requests == [] and other.waiting == 1  # (the slot is waiting, not gone)
    assert other.due_in is not None and 3599 < other.due_in <= 3600  # (its next turn)


def test_a_slot_s_concurrency_holds_across_workers_and_each_lease_s_end_frees_it(server):
    """CONCURRENT_REQUESTS_PER_DOMAIN 2: two leased, by any worker, and no third until
    one ends: acknowledged, given back, or expired (a worker killed holding it)."""
    one, two, dead = workers(server, 3)
    shard = one.shards[0]
    entries = [tagged(f"http://b.test/{i}", CONCURRENT_REQUESTS_PER_DOMAIN=2) for i in range(6)]
    one.push(shard, [(0, entry) for entry in entries])
    held = one.call(shard, 60_000, take=10).requests
    assert len(held) == 2 and two.call(shard, 60_000, take=10).requests == []
    one.call(shard, 60_000, acks=[held[0][0]])  # done with one
    got = two.call(shard, 60_000, take=10).requests
    assert len(got) == 1 and one.call(shard, 60_000, take=10).requests == []
    two.call(shard, 60_000, release=[got[0][0]])  # given back at a close: taken again
    again = one.call(shard, 60_000, take=10).requests
    assert urls_of(again) == ["http://b.test/2"]
    one.call(shard, 60_000, acks=[held[1][0], again[0][0]])
    # A worker leases two for 1 ms and dies: the slot is full until their leases end;
    # the call that takes them back frees it and leases them again (polled until the
    # server's clock passed them: no wait measured).
    assert len(dead.call(shard, 1, take=10).requests) == 2
    deadline, back = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        back = two.call(shard, 60_000, take=10)
        if back.reclaimed:
            break
        assert back.requests == []  # (full until then)
    assert back is not None and back.reclaimed == 2
    assert urls_of(back.requests) == ["http://b.test/3", "http://b.test/4"]


def test_one_busy_host_never_stalls_the_others(server):
    """A call fills a worker from every slot ready: the big host's first request, then
    one from each small host, though the big host's requests came first."""
    (one,) = workers(server, 1)
    shard = one.shards[0]
    polite = {"DOWNLOAD_DELAY": 3600, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    big = [(0, tagged(f"http://big.test/{i}", **polite)) for i in range(50)]
    small = [(0, tagged(f"http://s{h}.test/0", **polite)) for h in range(20)]
    one.push(shard, big + small)
    got = urls(one.call(shard, 60_000, take=30))
    assert got[0] == "http://big.test/0" and len(got) == 21
    assert sorted(got[1:]) == sorted(f"http://s{h}.test/0" for h in range(20))


def test_priorities_are_exact_within_a_slot_and_untagged_requests_still_come(server):
    """Within a slot, the highest priority first, first in first out within one; a
    request without a slot's tag (an older version's) waits in the shard's queue and is
    leased after the slots ready."""
    (one,) = workers(server, 1)
    shard = one.shards[0]
    one.push(shard, [(0, tagged("http://c.test/0")), (5, tagged("http://c.test/5"))])
    one.push(shard, [(1, tagged("http://c.test/1")), (5, tagged("http://c.test/5b"))])
    one.push(shard, [(9, b"\x01http://old.test/9")])
    got = urls(one.call(shard, 60_000, take=10))
    assert got == [f"http://c.test/{p}" for p in ("5", "5b", "1", "0")] + ["http://old.test/9"]


def test_a_slot_s_state_that_is_not_the_frontier_s_costs_a_delay_never_a_stall(server):
    """Another client's value in the slots' hash reads as a slot never used; leases
    deleted by hand (the count of a full slot left) are recounted once nothing is
    leased; a slot's queue of another type is refused in one line, never deleted."""
    (one,) = workers(server, 1)
    shard = one.shards[0]
    one.push(shard, [(0, tagged(f"http://d.test/{i}", CONCURRENT_REQUESTS_PER_DOMAIN=1))
                     for i in range(3)])  # fmt: skip
    assert len(one.call(shard, 60_000, take=10).requests) == 1
    server.delete(shard.leases, shard.expiries)  # (by hand: the slot still counts one)
    assert urls(one.call(shard, 60_000, take=10)) == ["http://d.test/1"]
    server.hset(shard.slots, "d.test", "not a state")
    server.delete(shard.leases, shard.expiries)
    assert urls(one.call(shard, 60_000, take=10)) == ["http://d.test/2"]
    server.set(shard.slot_queue("e.test"), "another's")
    with pytest.raises(Exception, match=r"the frontier slot queue .* holds a string"):
        one.push(shard, [(0, tagged("http://e.test/0"))])
    assert server.get(shard.slot_queue("e.test")) == b"another's"


def test_the_slot_s_tag_is_the_worker_s_alone_and_download_slots_settings_apply():
    """``meta["download_slot"]`` names the slot, DOWNLOAD_SLOTS sets its own limits,
    and every reader of an entry takes the tag off."""
    policy = SlotPolicy(
        Settings({"DOWNLOAD_DELAY": 2, "DOWNLOAD_SLOTS": {"api": {"delay": 0.5, "concurrency": 3}}})
    )
    request = Request("http://x.test/1", meta={"download_slot": "api"})
    assert policy.key(request) == "api" and policy.limits("api") == (0.5, 0.5, 3)
    assert policy.limits("x.test") == (2.0, 0.5, 8)
    entry = policy.tag(b"\x01body", request)
    assert entry_of(entry) == b"\x01body" and entry_of(b"\x03\x01" + entry) == b"\x01body"
    # Each slot's header is kept with the delay it was built for (a learned one changes it).
    assert policy.header("x.test", 3.0) == b"2000:3000 500 8 x.test"
    assert policy.header("x.test", 3.0) is policy.header("x.test", 3.0)
    assert policy.header("x.test") == b"2000 500 8 x.test"


# -- real crawls: two workers, hosts that note each request ---------------------------


def crawl_by_two(
    tmp_path, site: HostsSite, settings: dict, logs: list[str] | None = None
) -> list[int]:
    """Two worker processes started at once on ``site``: every page either parsed.
    ``logs``: each worker's log is appended there (for a failure's message)."""
    procs = [crawl_worker(tmp_path, site.urls[0], settings, f"w{n}") for n in range(2)]
    notes = [tmp_path / f"w{n}.notes" for n in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        if logs is not None:
            logs.append(err)
    lines = [line for note in notes if note.exists() for line in note.read_text().split("\n")]
    return sorted(int(line[2:]) for line in lines if line.startswith("p "))


def gaps_of(times: dict[int, list[float]]) -> list[float]:
    """The gaps between consecutive times at each host, over the hosts."""
    return [b - a for t in times.values() for a, b in zip(sorted(t), sorted(t)[1:])]


@pytest.fixture
def hosts():
    site = HostsSite(pages=10, hosts=3, pause=0.0)  # (7 pages on the first host)
    yield site
    site.stop()


def test_two_workers_keep_each_host_s_delay_as_one_process_does(tmp_path, hosts, redis_settings):
    """DOWNLOAD_DELAY 2 s (no jitter), one request at a time per host: no two requests
    to a host are sent less than 0.95 of the delay apart (the issue's bound: a lower
    bound, whatever the load), across both workers, and every page is fetched once; on
    the Cluster too, where a host's requests are recorded in many shards and wait in
    its home shard (test_frontier_homes.py). Sent: when each worker's downloader took
    the request (its ``X-Sent``, one clock for both), which is what the frontier spaces;
    the host notes an arrival when its thread gets to it, and with both cores busy the
    arrivals once came 1.79 s apart, which one arrival noted late would make (their gaps
    are in the message). (FRONTIER_POLITENESS off, two workers sent the big host's pages
    0.07 s apart; on the Cluster before hosts had homes, each shard kept the delay on
    its own: 0.008 s apart.)"""
    settings = settings_for(
        redis_settings, "compact", "frontier",
        DOWNLOAD_DELAY=2.0, RANDOMIZE_DOWNLOAD_DELAY=False, CONCURRENT_REQUESTS_PER_DOMAIN=1,
        FRONTIER_PREFETCH=1, CONCURRENT_REQUESTS=1,  # (each holds one: both get pages)
    )  # fmt: skip
    assert crawl_by_two(tmp_path, hosts, settings) == list(range(hosts.pages))
    with hosts.lock:
        arrivals, sent = dict(hosts.arrivals), dict(hosts.sent)
    assert sum(len(times) for times in arrivals.values()) == hosts.pages  # each once
    assert sum(len(times) for times in sent.values()) == hosts.pages  # each stamped
    gaps = gaps_of(sent)
    assert gaps and min(gaps) >= 0.95 * 2.0, (sorted(gaps)[:3], sorted(gaps_of(arrivals))[:3])


@pytest.mark.single_server
def test_two_workers_keep_each_host_s_concurrency_as_one_process_does(tmp_path, redis_settings):
    """CONCURRENT_REQUESTS_PER_DOMAIN 2, no delay, each answer taking 0.2 s: no host
    ever answers more than two requests at once, across both workers (each of which
    alone would send it two); every page is fetched once."""
    site = HostsSite(pages=40, hosts=2, pause=0.2)
    try:
        settings = settings_for(
            redis_settings, "compact", "frontier", CONCURRENT_REQUESTS_PER_DOMAIN=2
        )
        assert crawl_by_two(tmp_path, site, settings) == list(range(site.pages))
        with site.lock:
            most = dict(site.most)
            fetched = sum(len(times) for times in site.arrivals.values())
        assert fetched == site.pages and max(most.values()) == 2, most
    finally:
        site.stop()


@pytest.mark.single_server
def test_a_record_call_that_meets_a_slot_queue_of_another_type_records_nothing(
    server, make_backend
):
    """The rule: a request never looks seen without being queued. A slot's queue of
    another type fails the record call before its add step writes a fingerprint, so
    the same call once the key is moved away finds every fingerprint new."""
    import hashlib

    from scrapy_dedup_suite.frontier.record import record_and_enqueue

    backend = make_backend()
    backend.open()
    queue = FrontierQueue.for_backend(backend, "t:requests")
    shard = queue.shards[0]
    fingerprints = [hashlib.sha1(b"%d" % i).hexdigest() for i in range(3)]
    requests = [(0, tagged("http://f.test/0")), (0, tagged("http://g.test/0"))] * 2
    server.set(shard.slot_queue("g.test"), "another's")
    seen, failed = record_and_enqueue(backend, queue, fingerprints, [None] * 3, requests[:3])
    assert seen == [None] * 3 and len(failed) == 1 and "slot queue" in str(failed[0].error)
    server.rename(shard.slot_queue("g.test"), "moved-away")
    seen, failed = record_and_enqueue(backend, queue, fingerprints, [None] * 3, requests[:3])
    assert failed == [] and seen == [False] * 3
    assert sorted(urls(queue.call(shard, 60_000, take=10))) == [
        "http://f.test/0", "http://f.test/0", "http://g.test/0",
    ]  # fmt: skip


def test_a_held_request_s_turn_is_read_on_the_server_s_clock_from_the_quickest_call():
    """A call's answer carries the server's time: the offset of the quickest call
    stands (a slow one, its answer taken late, would make the wait end late); a wait
    counts from when the answer came, less the half round trip."""
    from scrapy_dedup_suite.frontier.server_clock import ServerClock

    clock = ServerClock()
    # Sent at 10.0, answered at 10.2, the server's time 1000.1: the server runs 990.0
    # ahead, and its "now" was 0.1 s before the answer came.
    assert clock.ahead(1000.1, 10.0, 10.2) == pytest.approx(-0.1)
    # A call of 1 s (answered late) keeps the quicker call's offset.
    assert clock.ahead(1001.0, 10.5, 11.5) == pytest.approx(1001.0 - 990.0 - 11.5)
    assert clock.offset == pytest.approx(990.0)


@pytest.mark.single_server
def test_a_page_done_in_a_full_slot_has_the_next_request_leased_at_once(redis_url):
    """A host whose concurrency is full: the shard's call says nothing waits (no slot
    is ready), and the worker skipped it for TAKE_EVERY, so a page done there waited
    for ACK_WITHIN (0.2 s) to be acknowledged before the host's next request could be
    leased (a 300-page tree crawl of one host took 10.8 s, against 1.9 s at a
    concurrency of 100). Now the engine's next ask, right after the page is done,
    carries the acknowledgement and leases the next request. Time stands still (the
    scheduler's clock, and no reactor: nothing is sent later by itself)."""
    from .test_frontier_retry import done, handed_out, scheduler_for

    scheduler = scheduler_for(redis_url, CONCURRENT_REQUESTS_PER_DOMAIN=2)
    scheduler.clock = lambda: 100.0
    try:
        for path in ("/a", "/b", "/c"):
            assert scheduler.enqueue_request(Request(f"http://one.example{path}"))
        first, second = handed_out(scheduler), handed_out(scheduler)
        assert scheduler.next_request() is None  # (the host's two leases are held)
        done(scheduler, first)  # (a leaf: nothing to record first; the other runs on)
        third = scheduler.next_request()  # (the engine asks right after)
        assert third is not None and third.url not in (first.url, second.url)
    finally:
        scheduler.close("finished")


# -- shared back-off: a site's refusal blocks its slot for every worker ----------------


def block(
    queue: FrontierQueue, url: str, asked_ms: int, first_ms=1000, most_ms=HOUR_MS, **settings
):
    from scrapy_dedup_suite.server import scripts

    header = SlotPolicy(Settings({"RANDOMIZE_DOWNLOAD_DELAY": False, **settings})).header(
        SlotPolicy.key(Request(url))
    )
    args = [header, asked_ms, first_ms, most_ms]
    ms, strikes = scripts.FRONTIER_BLOCK(queue.server, [queue.shards[0].queue], args)
    return int(ms), int(strikes)


def slot_line(server, queue: FrontierQueue, name: str) -> list[int]:
    return [int(x) for x in server.hget(queue.shards[0].slots, name).split()]


def server_ms(server) -> int:
    seconds, micros = server.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_request_sent_late_never_leaves_the_next_less_than_a_delay_behind(server):
    """A worker sends its request after its turn (a busy reactor): its acknowledgement
    says when, and the slot's next turn is at least a delay after that send, not after
    the turn (else another worker, on time, sends the next one the lateness less than a
    delay after it: 0.57x of a 0.1 s delay in bench.politeness). A send said to be in
    the future counts as now (a delay at most); one long past changes nothing."""
    from scrapy_dedup_suite.frontier.acks import stamped

    one, two = workers(server)
    shard = one.shards[0]
    entries = [
        tagged(f"http://a.test/{i}", DOWNLOAD_DELAY=1, CONCURRENT_REQUESTS_PER_DOMAIN=1)
        for i in range(4)
    ]
    one.push(shard, [(0, entry) for entry in entries])
    for sent_late, expected in ((300, 300), (10**9, None), (-(10**6), 0)):
        first = one.call(shard, 60_000, take=1)
        lease_id = first.requests[0][0]
        turn = slot_line(server, one, "a.test")[0] - 1000  # (its turn: a delay before the next)
        sent = turn + sent_late
        deadline = time.monotonic() + 10
        while server_ms(server) < min(sent, turn + 300):  # (a send is never said in the future)
            assert time.monotonic() < deadline
            time.sleep(0.01)
        clock = one.clocks[shard]
        stamp = (sent / 1000 - clock.offset) if sent_late < 10**9 else time.monotonic() + 10**6
        before = server_ms(server)
        two.call(shard, 60_000, acks=[stamped(lease_id, stamp, clock)])
        after = server_ms(server)
        next_at = slot_line(server, one, "a.test")[0]
        if expected is None:  # (said in the future: now, a delay at most)
            assert before + 1000 <= next_at <= after + 1000
        else:
            assert abs(next_at - (turn + 1000 + expected)) <= 1  # (ms, rounded both ways)
        server.hset(
            shard.slots,
            "a.test",
            " ".join(str(x) for x in [0, *slot_line(server, one, "a.test")[1:]]),
        )  # (its next turn now: the next round starts at once)


def test_a_request_s_send_time_is_when_the_downloader_took_it():
    """Its middlewares (robots.txt's waits for the file) may keep a request a while
    after the engine took it: the send time its acknowledgement says is when Scrapy's
    downloader took it (``request_reached_downloader``), for this worker's requests."""
    from scrapy_dedup_suite.frontier.leases import Holdings
    from scrapy_dedup_suite.frontier.queue import Shard

    holdings = Holdings()
    ours = Request("http://a.test/")
    holdings.in_flight[ours] = (Shard("{t}:frontier"), "w:1")
    holdings.sent["w:1"] = 1.0  # (when the engine took it)
    before = time.monotonic()
    holdings.reached(ours)
    holdings.reached(Request("http://b.test/"))  # (not from the frontier: nothing)
    assert list(holdings.sent) == ["w:1"] and holdings.sent["w:1"] >= before


def test_a_refusal_blocks_its_slot_for_every_worker_and_the_others_go_on(server):
    """A 429 with Retry-After an hour: no worker is handed the slot's next request
    before then (it is handed out a delay before, to hold); another host's requests
    still come."""
    one, two = workers(server)
    shard = one.shards[0]
    one.push(shard, [(0, tagged(f"http://a.test/{i}")) for i in range(2)])
    one.push(shard, [(0, tagged("http://b.test/0"))])
    assert block(one, "http://a.test/0", HOUR_MS) == (HOUR_MS, 0)
    leased = two.call(shard, 60_000, take=10)
    assert urls(leased) == ["http://b.test/0"]
    assert leased.due_in is not None and 3599 < leased.due_in <= 3600


def test_the_back_off_doubles_for_each_refusal_after_a_block_and_starts_over_after_quiet(
    server,
):
    """No Retry-After: FRONTIER_BACKOFF (here 1 s), doubled for each refusal after the
    last block ended, up to its bound; refusals while blocked (requests sent before the
    block) do not count again; a slot not refused for as long as its last block lasted,
    after it ended, starts over. The
    slot's past is written by hand (the server's clock cannot be moved)."""
    queue = workers(server, 1)[0]
    name = "a.test"
    assert block(queue, "http://a.test/", -1) == (1000, 1)
    assert block(queue, "http://a.test/", -1)[1] == 1  # (still blocked: not again)
    seconds, micros = server.time()  # (to the ms: whole seconds made it 'quiet' by chance)
    now = int(seconds) * 1000 + int(micros) // 1000
    line = slot_line(server, queue, name)
    line[5] = now - 10  # (the block ended 10 ms ago)
    server.hset(queue.shards[0].slots, name, " ".join(map(str, line)))
    ms, strikes = block(queue, "http://a.test/", -1, most_ms=3000)
    assert (strikes, ms) == (2, 2000)
    line = slot_line(server, queue, name)
    line[5], line[6] = now - 10, 5  # (five refusals: 32 s, bounded at 3 s)
    server.hset(queue.shards[0].slots, name, " ".join(map(str, line)))
    assert block(queue, "http://a.test/", -1, most_ms=3000) == (3000, 6)
    line = slot_line(server, queue, name)
    line[5] = now - 5000  # (quiet for longer than the last block, 3 s)
    server.hset(queue.shards[0].slots, name, " ".join(map(str, line)))
    assert block(queue, "http://a.test/", -1, most_ms=3000) == (1000, 1)
    line = slot_line(server, queue, name)
    line[5] = now - 1500  # (quiet for longer than the last block, 1 s)
    server.hset(queue.shards[0].slots, name, " ".join(map(str, line)))
    assert block(queue, "http://a.test/", -1, most_ms=3000) == (1000, 1)


def test_a_slot_line_of_an_older_version_or_another_client_still_blocks(server):
    """A line of five fields (before the back-off) keeps its fields and gains the
    block; a line that is not the frontier's reads as a slot never used."""
    queue = workers(server, 1)[0]
    slots = queue.shards[0].slots
    server.hset(slots, "a.test", "0 0 250 0 3")
    assert block(queue, "http://a.test/", 5000) == (5000, 0)
    line = slot_line(server, queue, "a.test")
    assert line[1:5] == [0, 250, 0, 3] and line[0] == line[5]
    server.hset(slots, "b.test", "junk")
    assert block(queue, "http://b.test/", -1) == (1000, 1)


def test_retry_after_reads_seconds_and_http_dates_and_nothing_else():
    from scrapy_dedup_suite.frontier.backoff import retry_after

    assert retry_after(b"120") == 120.0
    assert retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    for bad in (None, b"", b"-5", b"soon", b"1.5", b"Wed, 21 Oct 2015 07:28:00"):
        assert retry_after(bad) is None, bad


@pytest.mark.single_server
def test_a_429_seen_by_one_worker_stops_every_worker_s_requests_to_that_host(
    tmp_path, redis_settings
):
    """The first request to host 1 answers 429 with Retry-After: 3. No request reaches
    host 1 again before 3 s after it (the hosts' clocks; a lower bound), from either
    worker, while host 0's are still fetched meanwhile; then every page is fetched (the
    refused one retried by Scrapy's RetryMiddleware). (Without the shared back-off, the
    retry came at once.)"""
    site = HostsSite(pages=100, hosts=3, pause=0.05)
    site.refusing[1] = (1, "3")
    try:
        settings = settings_for(
            redis_settings, "compact", "frontier", CONCURRENT_REQUESTS_PER_DOMAIN=1
        )
        logs: list[str] = []
        assert crawl_by_two(tmp_path, site, settings, logs) == list(range(site.pages))
        with site.lock:
            arrivals = {h: sorted(times) for h, times in site.arrivals.items()}
            sent = sorted(site.sent[1])
        refused, *after = arrivals[1]
        said = [  # (what the workers said of the refusal and the block, or of a failure)
            line[-300:]
            for log in logs
            for line in log.splitlines()
            if any(word in line for word in ("429", "block", "Traceback", "ERROR"))
        ]
        assert after and after[0] - refused >= 3.0, (after[0] - refused, sent[:3], said[-20:])
        assert any(refused < t < refused + 3.0 for t in arrivals[0])
    finally:
        site.stop()


# -- a delay a worker learned: robots.txt's Crawl-delay, AutoThrottle's ------------------


def test_a_delay_a_worker_learned_raises_the_slot_s_until_one_says_otherwise(server):
    """A tag saying a learned delay of an hour ("0:3600000") makes the slot's delay an
    hour, for every worker; a tag saying nothing learned (another worker's) leaves it;
    one that learned 0 (a robots.txt without Crawl-delay) lowers it."""
    one = workers(server, 1)[0]
    shard = one.shards[0]
    policy = SlotPolicy(Settings({"RANDOMIZE_DOWNLOAD_DELAY": False}))

    def entry(i: int, learned: float | None) -> bytes:
        header = policy.header("c.test", learned)
        return bytes((5, len(header))) + header + f"\x01http://c.test/{i}".encode()

    one.push(shard, [(0, entry(0, 3600.0)), (0, entry(1, 3600.0))])
    first = one.call(shard, 60_000, take=10)
    assert urls(first) == ["http://c.test/0", "http://c.test/1"]
    assert first.holds[0] == 0.0 and 3599 < first.holds[1] <= 3600
    one.push(shard, [(0, entry(2, None))])
    assert slot_line(server, one, "c.test")[7] == 3_600_000  # (kept)
    one.push(shard, [(0, entry(3, 0.0))])
    assert slot_line(server, one, "c.test")[7] == 0


def crawl_delay_read() -> bool:
    from scrapy.robotstxt import RobotParser

    return hasattr(RobotParser, "crawl_delay")


@pytest.mark.single_server
@pytest.mark.skipif(not crawl_delay_read(), reason="this Scrapy does not read Crawl-delay (2.18+)")
def test_robots_txt_s_crawl_delay_holds_across_workers(tmp_path, redis_settings):
    """Host 0's robots.txt says Crawl-delay: 0.5 (no DOWNLOAD_DELAY): once a worker read
    it, no two requests to host 0 are sent less than 0.95 of it apart, from either
    worker (when each downloader took it, as in the test of DOWNLOAD_DELAY above; a
    lower bound). The first two may: page 0 was queued before any worker read
    robots.txt. (Without it, 0.05 s apart.)"""
    site = HostsSite(pages=20, hosts=3, pause=0.0)
    site.robots[0] = "User-agent: *\nCrawl-delay: 0.5\n"
    try:
        settings = settings_for(
            redis_settings, "compact", "frontier",
            ROBOTSTXT_OBEY=True, CONCURRENT_REQUESTS_PER_DOMAIN=1,
        )  # fmt: skip
        assert crawl_by_two(tmp_path, site, settings) == list(range(site.pages))
        with site.lock:
            times, arrived = sorted(site.sent[0]), sorted(site.arrivals[0])
        assert len(times) == len(arrived)  # (every request to host 0 stamped)
        gaps = gaps_of({0: times})[1:]
        assert len(gaps) >= 10 and min(gaps) >= 0.95 * 0.5, (gaps, gaps_of({0: arrived}))
    finally:
        site.stop()


def test_autothrottle_s_delay_for_a_slot_is_what_the_worker_learned():
    """Under AutoThrottle the worker tags a slot's requests with the delay AutoThrottle
    set for that slot here (shared: the slot keeps the last worker's); without it, or
    for a slot this worker has not downloaded from, it learned nothing."""
    from types import SimpleNamespace

    from scrapy.utils.test import get_crawler

    from scrapy_dedup_suite.frontier.slots import learned_delays

    slots = {"a.test": SimpleNamespace(delay=2.5)}
    for throttled, expected in ((True, 2.5), (False, None)):
        crawler = get_crawler(settings_dict={"AUTOTHROTTLE_ENABLED": throttled})
        downloader = SimpleNamespace(slots=slots, middleware=SimpleNamespace(middlewares=()))
        crawler.engine = SimpleNamespace(downloader=downloader)
        learned = learned_delays(crawler)
        assert learned(Request("http://a.test/x"), "a.test") == expected
        assert learned(Request("http://b.test/x"), "b.test") is None
    policy = SlotPolicy(Settings({"RANDOMIZE_DOWNLOAD_DELAY": False, "DOWNLOAD_DELAY": 1}))
    assert policy.header("a.test", 2.5) == b"1000:2500 0 8 a.test"
    assert policy.header("a.test") == b"1000 0 8 a.test"


def test_dedup_info_lists_the_slots_with_most_waiting_their_delay_leases_and_blocks(server):
    """Issue 54 item 5: the slots with the most requests waiting, each with its
    delay, leases and how long a refusal still blocks it; a slot's line that is not the
    frontier's is counted but not listed."""
    from scrapy_dedup_suite.commands.dedup_info import render
    from scrapy_dedup_suite.frontier.figures import crawl_figures

    one = workers(server, 1)[0]
    shard = one.shards[0]
    one.push(shard, [(0, tagged(f"http://a.test/{i}")) for i in range(5)])
    one.push(shard, [(0, tagged(f"http://b.test/{i}", DOWNLOAD_DELAY=3600)) for i in range(3)])
    one.push(shard, [(0, tagged("http://c.test/0"))])
    leased = one.call(shard, 60_000, take=1)  # (a.test's, the slot ready longest)
    assert urls(leased) == ["http://a.test/0"]
    block(one, "http://c.test/0", HOUR_MS)
    server.hset(shard.slots, "junk.test", "not a slot")
    view = crawl_figures(one, 60.0, 0.0, slots=2)
    assert view["slots"] == 4
    top = view["busiest_slots"]
    assert [(s["name"], s["waiting"], s["leased"]) for s in top] == [
        ("a.test", 4, 1), ("b.test", 3, 0)
    ]  # fmt: skip
    assert top[1]["delay"] == 3600.0 and top[1]["blocked_for"] is None
    c = crawl_figures(one, 60.0, 0.0, slots=3)["busiest_slots"][2]
    assert c["name"] == "c.test" and c["waiting"] == 1 and 3599 < c["blocked_for"] <= 3600
    view["scrapy_redis_queue"] = {"key": "t:requests", "type": "none", "requests": 0}
    view["status"] = view["status_detail"] = ""
    text = render("spider", {"frontier": view})
    assert "4 download slot(s); the most waiting:" in text
    assert "a.test: 4 waiting, 1/8 leased, delay 0 s, ready" in text


@pytest.mark.single_server
def test_requests_waiting_in_blocked_slots_do_not_make_a_worker_call_at_every_ask(
    server, redis_url
):
    """Another host's requests wait, its slot blocked for an hour, while this host's one
    place is leased: a lease call got fewer than it asked, so nothing there is ready
    before the blocked slot's turn. The engine's next asks (after each response) call
    Redis no more until TAKE_EVERY has passed (before: a call at every ask, and 100,000
    parked hosts doubled the calls per page, ``python -m bench.scale``). Time stands
    still (the scheduler's clock)."""
    from .test_frontier_retry import handed_out, scheduler_for

    scheduler = scheduler_for(redis_url, CONCURRENT_REQUESTS_PER_DOMAIN=1)
    now = [100.0]
    scheduler.clock = lambda: now[0]
    try:
        for path in ("/a", "/b"):
            assert scheduler.enqueue_request(Request(f"http://one.example{path}"))
        assert scheduler.enqueue_request(Request("http://parked.example/"))
        parked = FrontierQueue(server, [scheduler.queue_key])
        block(parked, "http://parked.example/", HOUR_MS)
        handed_out(scheduler)
        sent = []
        call = scheduler.calls.call
        scheduler.calls.call = lambda *a, **k: sent.append(a) or call(*a, **k)
        for _ in range(5):
            assert scheduler.next_request() is None  # (asked as the engine asks)
        assert sent == []  # (the call that took the first got fewer than it asked)
        now[0] += 0.5  # (TAKE_EVERY later: it looks again)
        assert scheduler.next_request() is None and len(sent) == 1
    finally:
        scheduler.close("finished")
