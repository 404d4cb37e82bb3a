"""One crawler process of the concurrency comparison (run by bench.run).

    python -m bench.crowd REDIS_URL KIND KEY SEED N

KIND is "ours" (bloom backend) or "legacy" (scrapy-redis-bloomfilter). Offers
the same N requests as its siblings, in its own order, once told to start on
stdin, and prints how many its dupefilter admitted.
"""

from __future__ import annotations

import random
import sys

import redis
from scrapy import Request


def main() -> None:
    url, kind, key, seed, n = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
        int(sys.argv[5]),
    )
    server = redis.Redis.from_url(url)
    if kind == "legacy":
        from scrapy_redis_bloomfilter.dupefilter import RFPDupeFilter as LegacyDupeFilter

        seen = LegacyDupeFilter(server, key, False, 24, 10).request_seen
    else:
        from scrapy.settings import Settings

        from scrapy_dedup_suite.backends import build_backend
        from scrapy_dedup_suite.dupefilter import RFPDupeFilter

        settings = Settings({"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_CAPACITY": 1_000_000})
        df = RFPDupeFilter(build_backend(settings, "crowd", server=server, key=key))
        df.open()
        seen = df.request_seen
    requests = [Request(f"http://crowd.test/page/{i}") for i in range(n)]
    random.Random(seed).shuffle(requests)
    print("ready", flush=True)
    sys.stdin.readline()
    print(sum(not seen(r) for r in requests), flush=True)


if __name__ == "__main__":
    main()
