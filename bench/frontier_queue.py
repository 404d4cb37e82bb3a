"""The server's time per queued request: the frontier's queue (runs of requests in one
sorted set) against scrapy-redis's priority queue, on the suite's server.

    python -m bench.frontier_queue [--requests 100000] [--priorities 1,5,100000]
        [--server BINARY]

What each costs the server, not the client: the CPU time of Redis's main thread
(``INFO cpu``: reading the calls, running them, answering), over n requests
pushed as a crawl pushes them (pages of 10 links sharing a priority; the pages'
priorities in no order, ``--priorities`` distinct ones) then taken. The frontier pushes
a page's links in one call and takes 16 a call; scrapy-redis pushes each (ZADD) and
pops each (ZRANGE and ZREMRANGEBYRANK in a transaction), as its scheduler does. Varied
URLs (``bench.frontier_memory``). A figure is the server's time, so the ratio is what
counts: the machine's load moves both.
"""

from __future__ import annotations

import argparse
import random
from functools import partial

import redis
from scrapy import Request
from scrapy_redis import queue as srq

from scrapy_dedup_suite.frontier.codec import RequestCodec
from scrapy_dedup_suite.frontier.queue import FrontierQueue

from .frontier_memory import Spider, varied_url
from .server_features import server as started

LINKS = 10


def pages(n: int, priorities: int) -> list[list[Request]]:
    """n requests as pages of LINKS links, each page's at one priority."""
    spider, order = Spider(), list(range(priorities))
    random.Random(0).shuffle(order)
    out = []
    for page in range(n // LINKS):
        priority = -order[page % priorities]
        referer = {"Referer": varied_url(page)}
        links = range(page * LINKS, (page + 1) * LINKS)
        link = partial(Request, callback=spider.parse, priority=priority, headers=referer)
        out.append([link(varied_url(i)) for i in links])
    return out


class ServerClock:
    """The CPU time of a server's main thread, in microseconds, lap by lap."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.last = self.now()

    def now(self) -> float:
        cpu = self.client.info("cpu")
        return 1e6 * sum(float(cpu[f"used_cpu_{k}_main_thread"]) for k in ("user", "sys"))

    def lap(self) -> float:
        now = self.now()
        spent, self.last = now - self.last, now
        return spent


def frontier(client: redis.Redis, sent: list[list[Request]]) -> tuple[float, float]:
    queue = FrontierQueue(client, ["site:requests"])
    shard, codec = queue.shards[0], RequestCodec(Spider())  # type: ignore[arg-type]
    entries = [[(r.priority, codec.encode(r, priority_apart=True)) for r in p] for p in sent]
    clock = ServerClock(client)
    for links in entries:
        queue.push(shard, links)
    push = clock.lap()
    while queue.call(shard, 60_000, take=16).requests:
        pass
    return push, clock.lap()


def scrapy_redis(client: redis.Redis, sent: list[list[Request]]) -> tuple[float, float]:
    queue = srq.PriorityQueue(client, Spider(), "%(spider)s:requests")
    clock = ServerClock(client)
    for links in sent:
        for request in links:
            queue.push(request)
    push = clock.lap()
    while queue.pop() is not None:
        pass
    return push, clock.lap()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000, metavar="N")
    parser.add_argument("--priorities", default="1,5,100000", metavar="P,P,...")
    parser.add_argument("--server", default="/usr/bin/redis-server", help="server binary")
    args = parser.parse_args()
    for priorities in (int(p) for p in args.priorities.split(",")):
        sent = pages(args.requests, priorities)
        n = len(sent) * LINKS
        with started(args.server) as client:
            print(f"{n:,} requests, {priorities:,} priorities, Redis "
                  f"{client.info('server')['redis_version']}")  # fmt: skip
            ours = frontier(client, sent)
            client.flushall()
            theirs = scrapy_redis(client, sent)
        for what, mine, base in (("push", ours[0], theirs[0]), ("take", ours[1], theirs[1])):
            print(f"  {what}: frontier {mine / n:5.1f} us/request, scrapy-redis "
                  f"{base / n:5.1f} ({mine / base:4.2f}x)")  # fmt: skip
        print(flush=True)


if __name__ == "__main__":
    main()
