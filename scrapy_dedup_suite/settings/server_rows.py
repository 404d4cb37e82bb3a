"""Where the fingerprints live and how writes reach them: the connection's settings
(scrapy-redis's and the package's: a URL, a Cluster, Sentinel, replicas), their part
of the one settings table (:mod:`.table`, which lists them in this order)."""

from __future__ import annotations

from .kinds import Checked, Flag, Params, Seconds, Setting, Text, Url, Whole

SERVER_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "REDIS_URL",
        None,
        Url(),
        "the connection, built exactly as scrapy-redis builds it (also `REDIS_HOST`, `REDIS_PORT`)",
        owner="scrapy-redis",
    ),
    Setting(
        "REDIS_PARAMS",
        None,
        Params("client arguments"),
        "redis-py client arguments (password, timeouts), for the dupefilter's connections too",
        owner="scrapy-redis",
    ),
    Setting(
        "DEDUP_REDIS_URL",
        None,
        Url(),
        "where the fingerprints live, if not on scrapy-redis's server (`REDIS_PARAMS` apply)",
        shown="unset (= `REDIS_URL`)",
    ),
    Setting(
        "DEDUP_REDIS_CLUSTER",
        False,
        Flag(),
        "the URL names a node of a Redis Cluster: use redis-py's `RedisCluster` (see "
        "[Redis Cluster](servers.md#redis-cluster))",
    ),
    Setting(
        "DEDUP_REDIS_SENTINELS",
        None,
        Checked("server.sentinel.SentinelOptions"),
        'Sentinel: the sentinels\' addresses, `["10.0.0.1:26379", ...]`; or `DEDUP_REDIS_URL '
        '= "redis+sentinel://h1:26379,h2:26379/mymaster/0"` (see [Redis Sentinel]'
        "(servers.md#redis-sentinel))",
    ),
    Setting(
        "DEDUP_REDIS_SENTINEL_SERVICE",
        "mymaster",
        Text("the name the sentinels monitor the primary by (e.g. 'mymaster')"),
        "the name the sentinels monitor the primary by",
    ),
    Setting(
        "DEDUP_REDIS_SENTINEL_DB",
        0,
        Whole(0, None, "a database number >= 0"),
        "the database on the primary",
    ),
    Setting(
        "DEDUP_REDIS_SENTINEL_PARAMS",
        None,
        Params("arguments for the sentinels' connections (e.g. {'password': '...'})"),
        "redis-py arguments for the sentinels' own connections (a password)",
    ),
    Setting(
        "DEDUP_WAIT_REPLICAS",
        0,
        Whole(0, None, "a number of replicas >= 0 (0: do not wait)"),
        "replicas each write waits for (`WAIT`, in the same round trip), so a failover loses "
        "nothing that was answered; not on a cluster",
    ),
    Setting(
        "DEDUP_WAIT_TIMEOUT",
        1.0,
        Seconds(0.0, 3600.0, "a number of seconds > 0 (e.g. 1.0)"),
        "seconds a write waits for them at most; then it is counted (`dedup/unreplicated`) and "
        "its answer stands",
    ),
)
