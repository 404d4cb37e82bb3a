"""One crawler process for the concurrency test: offers requests, prints its admissions.

python -m tests.admit REDIS_URL CLUSTER BACKEND SEED N [SETTINGS_JSON]
(CLUSTER: 1 for a Redis Cluster; SETTINGS_JSON: more settings, and "_batch": N to
offer the requests in batches of N, as BatchDedupMiddleware does)
"""

from __future__ import annotations

import json
import random
import sys

from scrapy.settings import Settings

from scrapy_dedup_suite.backends import build_backend
from scrapy_dedup_suite.core.fingerprint import scrapy_redis_fingerprint
from scrapy_dedup_suite.dupefilter import RFPDupeFilter


def main() -> None:
    url, cluster, backend = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
    seed, n = int(sys.argv[4]), int(sys.argv[5])
    extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    size = extra.pop("_batch", 0)
    from scrapy import Request

    settings = Settings(
        {
            "REDIS_URL": url,
            "DEDUP_REDIS_CLUSTER": cluster,
            "DEDUP_BACKEND": backend,
            "DEDUP_BLOOM_CAPACITY": 100_000,
            "DEDUP_BLOOM_BLOCKS": 6,  # spread over the cluster's masters
            **extra,
        }
    )
    df = RFPDupeFilter(build_backend(settings, "crowd"))
    df.open()
    requests = [Request(f"http://crowd.test/page/{i}") for i in range(n)]
    random.Random(seed).shuffle(requests)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    if size:
        admitted = []
        for start in range(0, n, size):
            chunk = requests[start : start + size]
            batch = df.batches.prepare(chunk)
            new = df.batches.account(batch, df.batches.check(batch))
            admitted += [scrapy_redis_fingerprint(r) for r in new if not df.request_seen(r)]
    else:
        admitted = [scrapy_redis_fingerprint(r) for r in requests if not df.request_seen(r)]
    print(json.dumps(admitted), flush=True)


if __name__ == "__main__":
    main()
