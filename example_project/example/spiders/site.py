"""Two spiders over the example site.

- ``example-site``: crawls the whole site from page 0, following every link.
  With 2,000 pages of 10 links it offers 20,001 requests to the dupefilter, of
  which 18,001 are duplicates.
- ``example-news``: the same crawl over a 100-page site with the
  ``windowed-bloom`` backend and a window of 2 x 10 seconds: run it twice within
  the window and the second run fetches nothing new; wait 20 seconds and it
  fetches everything again.
"""

from __future__ import annotations

from typing import Any

import scrapy
from scrapy import signals

from ..site import LocalSite


class SiteSpider(scrapy.Spider):
    name = "example-site"

    async def start(self) -> Any:
        settings = self.settings
        # The spider serves the site itself, on a fixed port: fingerprints
        # include the URL, so every run must see the same URLs.
        self.site = LocalSite(
            settings.getint("EXAMPLE_SITE_PORT"),
            settings.getint("EXAMPLE_PAGES"),
            settings.getint("EXAMPLE_LINKS"),
        )
        self.crawler.signals.connect(self.site.stop, signal=signals.spider_closed)
        yield scrapy.Request(self.site.url("/page/0"))

    def parse(self, response: scrapy.http.Response) -> Any:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)


class NewsSpider(SiteSpider):
    name = "example-news"
    custom_settings = {
        "DEDUP_BACKEND": "windowed-bloom",
        "DEDUP_WINDOW": 10,  # seconds per bucket
        "DEDUP_WINDOW_COUNT": 2,  # filtered for at least 10 s, forgotten after 20 s
        "DEDUP_BLOOM_CAPACITY": 10_000,  # per bucket
        "EXAMPLE_PAGES": 100,
        "EXAMPLE_LINKS": 10,
    }
