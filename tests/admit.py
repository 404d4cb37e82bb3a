"""One crawler process for the concurrency test: offers requests, prints its admissions.

python -m tests.admit REDIS_URL BACKEND SEED N
"""

from __future__ import annotations

import json
import random
import sys

import redis
from scrapy.settings import Settings

from scrapy_dedup_suite.dupefilter import RFPDupeFilter, build_backend
from scrapy_dedup_suite.fingerprint import scrapy_redis_fingerprint


def main() -> None:
    url, backend, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    from scrapy import Request

    settings = Settings({"DEDUP_BACKEND": backend, "DEDUP_BLOOM_CAPACITY": 100_000})
    df = RFPDupeFilter(build_backend(settings, "crowd", server=redis.Redis.from_url(url)))
    df.open()
    requests = [Request(f"http://crowd.test/page/{i}") for i in range(n)]
    random.Random(seed).shuffle(requests)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    admitted = [scrapy_redis_fingerprint(r) for r in requests if not df.request_seen(r)]
    print(json.dumps(admitted), flush=True)


if __name__ == "__main__":
    main()
