"""Redis memory per queued request: the frontier's queue against scrapy-redis's
priority queue (its default: a sorted set of pickled request dicts) and its FIFO queue
(a list of the same), on the suite's server.

    python -m bench.frontier_memory [--requests 1000000] [--server BINARY]

Each row alone in a flushed server: the growth of ``used_memory`` over n requests, /n.
The requests are what a crawl queues: a GET of a 60-character URL with a callback, its
depth (``priorities`` distinct priorities, as DEPTH_PRIORITY gives one per depth) and the
Referer header RefererMiddleware gives a link (its parent's URL, of the same length),
each encoded as its scheduler encodes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import redis
from scrapy import Request
from scrapy_redis import queue as srq

from scrapy_dedup_suite.frontier.codec import RequestCodec
from scrapy_dedup_suite.frontier.queue import FrontierQueue

from .compact_layouts import servers, settle, used
from .server_features import server as started

CHUNK = 10_000


class Spider:
    name = "site"

    def parse(self, response: object) -> None:
        pass


def requests(n: int, priorities: int) -> list[Request]:
    spider = Spider()
    return [
        Request(
            f"https://www.example.com/catalogue/item-{i:012d}/page.html?ref=abc",
            callback=spider.parse,
            priority=-(i % priorities),
            meta={"depth": i % priorities},
            headers={
                "Referer": f"https://www.example.com/catalogue/item-{i // 5:012d}/page.html?ref=abc"
            },
        )
        for i in range(n)
    ]


def scrapy_redis(kind: str) -> Callable[[redis.Redis, list[Request]], None]:
    def load(client: redis.Redis, sent: list[Request]) -> None:
        q = getattr(srq, kind)(client, Spider(), "%(spider)s:requests")
        pipe = client.pipeline(transaction=False)
        for i, request in enumerate(sent, 1):
            data = q._encode_request(request)
            if kind == "PriorityQueue":
                pipe.execute_command("ZADD", q.key, -request.priority, data)
            else:
                pipe.lpush(q.key, data)
            if i % CHUNK == 0:
                pipe.execute()
        pipe.execute()

    return load


def frontier(client: redis.Redis, sent: list[Request]) -> None:
    queue = FrontierQueue(client, ["site:requests"])
    codec = RequestCodec(Spider())  # type: ignore[arg-type]
    entries = [(r.priority, codec.encode(r, priority_apart=True)) for r in sent]
    queue.push(queue.shards[0], entries)


ROWS = [
    ("scrapy-redis priority queue", scrapy_redis("PriorityQueue")),
    ("scrapy-redis FIFO queue", scrapy_redis("FifoQueue")),
    ("frontier", frontier),
]


def section(label: str, binary: str, n: int, priorities: int) -> None:
    sent = requests(n, priorities)
    with started(binary) as client:
        info = client.info("server")
        print(f"{label}: Redis {info['redis_version']} ({binary}), {n:,} requests, "
              f"{priorities} priorities")  # fmt: skip
        base = None
        for name, load in ROWS:
            client.flushall()
            settle(client)
            before = used(client)
            load(client, sent)
            per = (used(client) - before) / n
            base = base or per
            print(f"  {name:30} {per:7.1f} B/request  ({per / base:4.2f}x the priority queue)")
        print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000, metavar="N")
    parser.add_argument("--priorities", type=int, default=5, metavar="P")
    parser.add_argument("--server", help="this server binary only (default: every one found)")
    args = parser.parse_args()
    for label, binary in servers(args.server):
        section(label, binary, args.requests, args.priorities)


if __name__ == "__main__":
    main()
