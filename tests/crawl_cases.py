"""One real Scrapy crawl of a test site for the batch path's safety cases; writes the
pages it downloaded, its stats and its log as JSON.

    python -m tests.crawl_cases '{"site": ..., "start": [N, ...], "settings": {...},
                                  "raise_at": [N, ...], "out": "result.json"}'

``raise_at``: pages whose callback raises halfway through its links. ``close_by``
(with ``close_at``, a number of pages): how the crawl is ended once that many pages
were parsed: "stop" (``crawler.stop_async()``), "SIGINT", "SIGTERM" (a graceful stop,
as from a terminal or a process manager), "SIGKILL" (no stop at all). ``pages_file``:
each page parsed ("p N") and each request scheduled ("s N") is appended there at
once, so a killed crawl leaves what it did. ``block``: ``{"page": N, "until": path,
"seconds": S}``: page N's callback blocks the reactor (a slow synchronous call) until
the file at ``path`` says "p N" (another worker parsed it too) or S seconds passed.
Each request is sent with an ``X-Sent`` header: ``time.monotonic()`` when Scrapy's
downloader took it (``request_reached_downloader``, the frontier's send time), so a
site can tell the crawl's spacing from its own clock's delays in noting arrivals.
The spider middlewares below stand for what a project may put after
BatchDedupMiddleware.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import redis
import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.utils.defer import deferred_from_coro

from .crawl import BASE_SETTINGS, stats_of


class CopyingMiddleware:
    """Passes every request on as a ``replace()`` copy (as middlewares that add
    headers or meta often do)."""

    async def process_spider_output(self, response, result, spider=None):
        async for out in result:
            yield (
                out.replace(meta={**out.meta, "copied": True})
                if isinstance(out, scrapy.Request)
                else out
            )


class DroppingMiddleware:
    """Drops the requests for pages whose number ends in 7 (as a middleware that
    filters links would)."""

    async def process_spider_output(self, response, result, spider=None):
        async for out in result:
            if isinstance(out, scrapy.Request) and out.url.endswith("7"):
                continue
            yield out


class CaseSpider(scrapy.Spider):
    name = "cases"

    def __init__(
        self,
        site: str,
        start: list[int],
        raise_at: list[int],
        stop_redis: str = "",
        close_by: str = "",
        close_at: int = 0,
        pages_file: str = "",
        block: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.start_pages = start
        self.raise_at = set(raise_at)
        self.stop_redis = stop_redis
        self.close_by = close_by
        self.close_at = close_at
        self.pages_fd = (
            os.open(pages_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT) if pages_file else -1
        )
        self.downloaded: list[int] = []
        self.block = block or {}

    async def start(self):
        for n in self.start_pages:
            yield scrapy.Request(f"{self.site}/page/{n}")

    def parse(self, response):
        page = int(response.url.rsplit("/", 1)[1])
        self.downloaded.append(page)
        self.note(f"p {page}")
        if self.block.get("page") == page:
            self.block_reactor(page)
        if self.close_by and len(self.downloaded) == self.close_at:
            self.close_now()
        if self.stop_redis and page == 0:
            # Redis goes away for good before the first page's links are checked.
            with contextlib.suppress(redis.ConnectionError):
                redis.Redis.from_url(self.stop_redis).shutdown(nosave=True)
        hrefs = response.css("a::attr(href)").getall()
        for i, href in enumerate(hrefs):
            if page in self.raise_at and i == len(hrefs) // 2:
                raise ValueError(f"callback failed on page {page}")
            yield response.follow(href, self.parse)

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(spider.reached, signal=signals.request_reached_downloader)
        return spider

    def reached(self, request, spider=None) -> None:
        request.headers[b"X-Sent"] = f"{time.monotonic():.6f}"

    def scheduled(self, request, spider=None) -> None:
        self.note(f"s {int(request.url.rsplit('/', 1)[1])}")

    def block_reactor(self, page: int) -> None:
        until = time.monotonic() + self.block["seconds"]
        other = self.block["until"]
        while time.monotonic() < until:
            if os.path.exists(other) and f"p {page}" in Path(other).read_text().splitlines():
                return
            time.sleep(0.05)

    def note(self, line: str) -> None:
        if self.pages_fd >= 0:
            os.write(self.pages_fd, f"{line}\n".encode())

    def close_now(self) -> None:
        if self.close_by == "stop":
            stop_async = getattr(self.crawler, "stop_async", None)  # (Scrapy >= 2.14)
            deferred_from_coro(stop_async()) if stop_async else self.crawler.stop()
        else:
            os.kill(os.getpid(), getattr(signal, self.close_by))


def main() -> None:
    args = json.loads(sys.argv[1])
    settings = {**BASE_SETTINGS, "CONCURRENT_REQUESTS": 8, **args["settings"]}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(CaseSpider)
    began = time.monotonic()
    process.crawl(
        crawler,
        site=args["site"],
        start=args["start"],
        raise_at=args.get("raise_at", []),
        stop_redis=args.get("stop_redis", ""),
        close_by=args.get("close_by", ""),
        close_at=args.get("close_at", 0),
        pages_file=args.get("pages_file", ""),
        block=args.get("block"),
    )
    process.start()
    with open(args["out"], "w") as f:
        json.dump(
            {
                "stats": stats_of(crawler),
                "pages": sorted(crawler.spider.downloaded),
                "seconds": time.monotonic() - began,
            },
            f,
        )


if __name__ == "__main__":
    main()
