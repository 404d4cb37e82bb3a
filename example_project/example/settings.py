"""Settings of the example project. Everything about deduplication is commented."""

import os

BOT_NAME = "example"
SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = 32

# --- the local site (see example/site.py) -------------------------------------------
EXAMPLE_SITE_PORT = 8917  # fixed: fingerprints include the URL, so runs must agree
EXAMPLE_PAGES = 2000
EXAMPLE_LINKS = 10

# --- Scrapy-Redis: the request queue lives in Redis, shared by all crawler processes ---
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
# Keep queue and fingerprints when the spider closes; with False scrapy-redis calls
# the dupefilter's clear() at close, which deletes every key the backend owns.
SCHEDULER_PERSIST = True
# Where Redis is. run.py sets it to its embedded server unless you export REDIS_URL.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# --- scrapy_dedup_suite ---------------------------------------------------------------
# The add-on sets DUPEFILTER_CLASS to the package's dupefilter, adds BatchDedupMiddleware
# (a page's links checked and recorded in one round trip) and the summary extension,
# and the janitor extension for the backends whose fingerprints expire. What this file
# sets itself (EXTENSIONS below) wins; the crawl's log says what the add-on set.
ADDONS = {"scrapy_dedup_suite.Addon": 300}
# "set" (scrapy-redis's own set), "hash" (expiring), "bloom", "windowed-bloom";
# choose on the command line: scrapy crawl example-site -s DEDUP_BACKEND=hash
DEDUP_BACKEND = "bloom"
# bloom / windowed-bloom: sized for this many fingerprints (per bucket for windowed)
# at this false-positive rate: 100,000 at 0.1% is 175 KiB of Redis memory.
DEDUP_BLOOM_CAPACITY = 100_000
DEDUP_BLOOM_ERROR_RATE = 0.001
# Unsure of the crawl's size? A scalable filter adds layers (2x larger each) past
# the capacity and keeps the error rate: scrapy crawl example-site -s DEDUP_BLOOM_EXPANSION=2
# DEDUP_BLOOM_EXPANSION = 2
# On a Redis Cluster (REDIS_URL: any node), spread over its masters:
# DEDUP_REDIS_CLUSTER = True
# DEDUP_BLOOM_BLOCKS = 12
# hash: a fingerprint stays "seen" this many seconds after its last visit.
DEDUP_EXPIRE = 3600
# windowed-bloom: buckets of a day, 7 of them (overridden by the example-news spider).
DEDUP_WINDOW = "day"
DEDUP_WINDOW_COUNT = 7
# When Redis fails mid-crawl: "allow" crawls the request anyway (counted in dedup/errors).
DEDUP_ON_ERROR = "allow"

EXTENSIONS = {
    # Purges expired fingerprints of the hash backend every DEDUP_JANITOR_INTERVAL
    # seconds while the spider runs (and reports fill for the Bloom backends).
    "scrapy_dedup_suite.janitor.JanitorExtension": 500,
    # Logs a table about the dupefilter when the spider closes.
    "scrapy_dedup_suite.summary.DedupSummary": 900,
}
DEDUP_JANITOR_INTERVAL = 5
