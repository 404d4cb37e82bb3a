"""Redis memory per queued request: the frontier's queue against scrapy-redis's
priority queue (its default: a sorted set of pickled request dicts) and its FIFO queue
(a list of the same), on the suite's server.

    python -m bench.frontier_memory [--requests 1000000] [--priorities 5]
        [--urls shared|varied] [--extras] [--server BINARY]

Each row alone in a flushed server: the growth of ``used_memory`` over n requests, /n.
The requests are what a crawl queues: a GET of a URL with a callback, its depth
(``--priorities`` distinct priorities, as DEPTH_PRIORITY gives one per depth; as many
as requests for a spider that scores each one; the requests come in no order of
priority, each pushed at the back of its own) and the Referer header RefererMiddleware
gives a link (its parent's URL), each encoded as its scheduler encodes it. URLs
(``--urls``): ``shared``, 60 characters that share 44 with their Referer (one site's
catalogue); ``varied``, 60 to 100 characters (80 on average) of random words on 20
hosts, sharing little more than the host with their Referer. ``--extras``: each request
also carries meta (an item id and a category) and cb_kwargs (a page number).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

import redis
from scrapy import Request
from scrapy.settings import Settings
from scrapy_redis import queue as srq

from scrapy_dedup_suite.frontier.codec import RequestCodec, serializer
from scrapy_dedup_suite.frontier.queue import FrontierQueue
from scrapy_dedup_suite.frontier.slots import SlotPolicy

from .compact_layouts import servers, settle, used
from .server_features import server as started

CHUNK = 10_000


class Spider:
    name = "site"

    def parse(self, response: object) -> None:
        pass


WORDS = (
    "news", "sport", "world", "article", "product", "category", "item", "review",
    "listing", "archive", "search", "page", "detail", "blue", "green", "travel", "hotel",
    "city", "market", "price", "offer", "guide", "report",
)  # fmt: skip


def varied_url(i: int) -> str:
    """A URL of 60 to 100 characters made of random words (the same for the same i)."""
    rng = random.Random(i)
    host = f"www.{rng.choice(WORDS)}{i % 20}.example.org"
    url = f"https://{host}/{rng.choice(WORDS)}/{rng.choice(WORDS)}-{rng.randrange(10**8)}"
    target = rng.randint(60, 100)
    while len(url) < target - 6:
        url += f"-{rng.choice(WORDS)}"
    return (url + ".html?p=" + str(rng.randrange(100)))[:target]


def shared_url(i: int) -> str:
    return f"https://www.example.com/catalogue/item-{i:012d}/page.html?ref=abc"


def requests(n: int, priorities: int, urls: str = "shared", extras: bool = False) -> list[Request]:
    spider = Spider()
    url = varied_url if urls == "varied" else shared_url
    order = list(range(priorities))
    random.Random(0).shuffle(order)  # (in no order: a score each lands anywhere)
    out = []
    for i in range(n):
        meta: dict[str, object] = {"depth": i % priorities}
        kwargs = {}
        if extras:
            meta.update(item_id=i, category=WORDS[i % len(WORDS)])
            kwargs = {"page": i % 50}
        out.append(
            Request(
                url(i),
                callback=spider.parse,
                priority=-order[i % priorities],
                meta=meta,
                cb_kwargs=kwargs,
                headers={"Referer": url(i // 5)},
            )
        )
    return out


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


def frontier(chosen: str | None) -> Callable[[redis.Redis, list[Request]], None]:
    """The frontier's queue, its requests encoded as data (the default) or with
    SCHEDULER_SERIALIZER ``chosen``, each tagged with its download slot as a worker
    tags it (FRONTIER_POLITENESS, the default: queued per host)."""

    def load(client: redis.Redis, sent: list[Request]) -> None:
        queue = FrontierQueue(client, ["site:requests"])
        codec = RequestCodec(Spider(), serializer(chosen))  # type: ignore[arg-type]
        slots = SlotPolicy(Settings())
        entries = [(r.priority, slots.tag(codec.encode(r, priority_apart=True), r)) for r in sent]
        queue.push(queue.shards[0], entries)

    return load


ROWS = [
    ("scrapy-redis priority queue", scrapy_redis("PriorityQueue")),
    ("scrapy-redis FIFO queue", scrapy_redis("FifoQueue")),
    ("frontier", frontier(None)),
]


def section(label: str, binary: str, n: int, priorities: int, urls: str, extras: bool) -> None:
    sent = requests(n, priorities, urls, extras)
    mean = sum(len(r.url) for r in sent) / n
    with started(binary) as client:
        info = client.info("server")
        print(f"{label}: Redis {info['redis_version']} ({binary}), {n:,} requests, "
              f"{priorities:,} priorities, {urls} URLs ({mean:.0f} characters on average)"
              f"{', with meta and cb_kwargs' if extras else ''}")  # fmt: skip
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
    parser.add_argument("--urls", choices=("shared", "varied"), default="shared")
    parser.add_argument("--extras", action="store_true", help="meta and cb_kwargs too")
    parser.add_argument("--server", help="this server binary only (default: every one found)")
    parser.add_argument(
        "--serializer", metavar="NAME", help="the frontier's SCHEDULER_SERIALIZER (e.g. pickle)"
    )
    args = parser.parse_args()
    ROWS[-1] = (f"frontier ({args.serializer or 'data'})", frontier(args.serializer))
    for label, binary in servers(args.server):
        section(label, binary, args.requests, args.priorities, args.urls, args.extras)


if __name__ == "__main__":
    main()
