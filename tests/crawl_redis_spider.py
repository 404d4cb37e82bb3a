"""One crawl by a scrapy-redis RedisSpider, or RedisCrawlSpider (``"crawl": true``,
following links by its rules), whose start URLs are read from Redis
(``fromredis:start_urls``); writes the pages it parsed and its stats as JSON.

    python -m tests.crawl_redis_spider '{"settings": {...}, "out": "result.json"}'
"""

from __future__ import annotations

import json
import sys

from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

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


class CrawlFromRedis(RedisCrawlSpider):
    name = "fromredis"
    rules = (Rule(LinkExtractor(allow=r"/page/"), callback="parse_page", follow=True),)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.downloaded: list[int] = []

    def parse_page(self, response):
        self.downloaded.append(int(response.url.rsplit("/", 1)[1]))
        return []

    parse_start_url = parse_page


def main() -> None:
    args = json.loads(sys.argv[1])
    settings = {**BASE_SETTINGS, "MAX_IDLE_TIME_BEFORE_CLOSE": 1, **args["settings"]}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(CrawlFromRedis if args.get("crawl") else StartFromRedis)
    process.crawl(crawler)
    process.start()
    with open(args["out"], "w") as f:
        json.dump({"stats": stats_of(crawler), "pages": crawler.spider.downloaded}, f)


if __name__ == "__main__":
    main()
