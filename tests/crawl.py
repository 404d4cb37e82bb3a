"""Run one real Scrapy crawl of the test site and write its stats as JSON.

    python -m tests.crawl '{"start_url": ..., "settings": {...}, "out": "stats.json"}'

Run in a subprocess by the tests: a Twisted reactor cannot be restarted, and
each crawl must start from a fresh process as a user's would.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.dupefilters import RFPDupeFilter


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url: str, start_dont_filter: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url
        self.start_dont_filter = start_dont_filter

    async def start(self):
        yield scrapy.Request(self.start_url, dont_filter=self.start_dont_filter)

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)


class OwnDupeFilter(RFPDupeFilter):
    """A project's own dupefilter (Scrapy's, subclassed): the add-on keeps it."""


#: What every test crawl runs with (the test's own settings come on top).
BASE_SETTINGS = {
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
    "ROBOTSTXT_OBEY": False,
    "DUPEFILTER_CLASS": "scrapy_dedup_suite.dupefilter.RFPDupeFilter",
}


def stats_of(crawler) -> dict:
    """The crawl's stats, as JSON can hold them."""
    return {
        k: (v if isinstance(v, (int, float, str)) else str(v))
        for k, v in crawler.stats.get_stats().items()
    }


def main() -> None:
    args = json.loads(sys.argv[1])
    settings = {**BASE_SETTINGS, "CONCURRENT_REQUESTS": 8, **args["settings"]}
    for name in args.get("unset", ()):  # a project that does not set them (the add-on's)
        settings.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        process = CrawlerProcess(settings)
        crawler = process.create_crawler(SiteSpider)
        process.crawl(
            crawler,
            start_url=args["start_url"],
            start_dont_filter=args.get("start_dont_filter", False),
        )
        process.start()
    deprecations = [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in caught
        if issubclass(w.category, DeprecationWarning)
        and ("scrapy" in w.filename or "scrapy_dedup_suite" in str(w.message))
    ]
    stats = stats_of(crawler)
    with open(args["out"], "w") as f:
        threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        json.dump({"stats": stats, "deprecations": deprecations, "threads": threads}, f, indent=1)


if __name__ == "__main__":
    main()
