"""A crawl whose Redis stops answering writes while a batch is in flight.

    python -m tests.crawl_paused '{"site": URL, "redis": URL, "settings": {...}, "out": PATH}'

The first page's callback pauses the server's writes (CLIENT PAUSE WRITE), then
yields its links (held by BatchDedupMiddleware for one batch, whose call now
waits), an item, and a dont_filter request to /page/1. That request's chain of
three pages is downloaded and parsed while the batch waits, if the reactor is
free; the third page unpauses the server. The events, in the order they
happened, are written to PATH with the crawl's stats.
"""

from __future__ import annotations

import json
import sys

import redis
import scrapy
from scrapy.crawler import CrawlerProcess

from tests.crawl import BASE_SETTINGS, stats_of

#: Long enough that an answer to the paused batch can only come from the unpause.
PAUSE_MS = 60_000
SIDE_PAGES = 3


class PausedSpider(scrapy.Spider):
    name = "paused"

    def __init__(self, site: str, redis_url: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.redis = redis.Redis.from_url(redis_url)
        self.events: list[str] = []

    async def start(self):
        yield scrapy.Request(f"{self.site}/page/0", callback=self.first)

    def first(self, response):
        self.redis.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        self.events.append("paused")
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)
        yield {"item": "first"}
        yield scrapy.Request(
            f"{self.site}/page/1", callback=self.side, dont_filter=True, cb_kwargs={"n": 1}
        )

    def side(self, response, n):
        self.events.append(f"side-{n}")
        if n < SIDE_PAGES:
            yield response.request.replace(cb_kwargs={"n": n + 1})
        else:
            self.redis.execute_command("CLIENT", "UNPAUSE")
            self.events.append("unpaused")

    def parse(self, response):
        self.events.append("link")
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)


class Record:
    """Item pipeline: when the item went through."""

    def process_item(self, item, spider):
        spider.events.append("item")
        return item


def main() -> None:
    args = json.loads(sys.argv[1])
    settings = {
        **BASE_SETTINGS,
        "SPIDER_MIDDLEWARES": {"scrapy_dedup_suite.middleware.BatchDedupMiddleware": 50},
        "ITEM_PIPELINES": {"tests.crawl_paused.Record": 100},
        **args["settings"],
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(PausedSpider)
    process.crawl(crawler, site=args["site"], redis_url=args["redis"])
    process.start()
    with open(args["out"], "w") as f:
        json.dump({"stats": stats_of(crawler), "events": crawler.spider.events}, f, indent=1)


if __name__ == "__main__":
    main()
