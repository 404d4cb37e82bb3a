"""One crawl by a scrapy-redis RedisSpider, whose start URLs are read from Redis
(``<name>:start_urls``); writes the pages it parsed and its stats as JSON.

    python -m tests.crawl_redis_spider '{"settings": {...}, "out": "result.json"}'
"""

from __future__ import annotations

import json
import sys

from scrapy.crawler import CrawlerProcess
from scrapy_redis.spiders import RedisSpider

from .crawl import BASE_SETTINGS, stats_of


class StartFromRedis(RedisSpider):
    name = "fromredis"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.downloaded: list[int] = []

    def parse(self, response):
        self.downloaded.append(int(response.url.rsplit("/", 1)[1]))
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)


def main() -> None:
    args = json.loads(sys.argv[1])
    settings = {**BASE_SETTINGS, "MAX_IDLE_TIME_BEFORE_CLOSE": 1, **args["settings"]}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(StartFromRedis)
    process.crawl(crawler)
    process.start()
    with open(args["out"], "w") as f:
        json.dump({"stats": stats_of(crawler), "pages": crawler.spider.downloaded}, f)


if __name__ == "__main__":
    main()
