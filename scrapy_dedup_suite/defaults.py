"""Every ``DEDUP_*`` setting with its default value, in one place.

Settings are read from the Scrapy project (``settings.py``, ``-s NAME=VALUE`` or
``custom_settings``); a setting the project does not define takes the value
below. README.md documents each one with the same defaults.
"""

from __future__ import annotations

#: Which storage records fingerprints: ``"set"``, ``"hash"``, ``"bloom"``,
#: ``"windowed-bloom"``, or the dotted path of a :class:`DedupBackend` subclass.
#: ``"set"`` keeps scrapy-redis's own set, so switching the dupefilter class
#: alone changes nothing in Redis.
DEDUP_BACKEND = "set"

#: Where the dupefilter keeps its fingerprints, if not on the server scrapy-redis
#: uses (``REDIS_URL`` / ``REDIS_HOST`` / ``REDIS_PORT``). ``REDIS_PARAMS`` apply.
#: Use it to put the fingerprints on a Redis Cluster while scrapy-redis's
#: scheduler keeps its queue on a single server.
DEDUP_REDIS_URL = None

#: Whether that URL names a node of a Redis Cluster: the dupefilter then uses
#: redis-py's ``RedisCluster`` client, which discovers the other nodes;
#: ``REDIS_PARAMS`` apply to each node.
DEDUP_REDIS_CLUSTER = False

#: Sentinel: the sentinels' addresses (``["10.0.0.1:26379", ...]`` or
#: ``("host", port)`` pairs) and the name they monitor the primary by; the client
#: asks them for the primary, and again after a failover. ``REDIS_PARAMS`` apply to
#: the primary's connections, ``DEDUP_REDIS_SENTINEL_PARAMS`` (e.g. a password)
#: to the sentinels'. Or ``DEDUP_REDIS_URL =
#: "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/0"``.
DEDUP_REDIS_SENTINELS = None
DEDUP_REDIS_SENTINEL_SERVICE = "mymaster"
DEDUP_REDIS_SENTINEL_DB = 0
DEDUP_REDIS_SENTINEL_PARAMS = None

#: Replicas every write waits for (Redis ``WAIT``, sent in the same round trip as
#: the write), so that a failover loses no recorded fingerprint that was
#: answered: 0 (default) waits for none. ``DEDUP_WAIT_TIMEOUT``: seconds a write
#: waits at most; a write that times out is logged (``dedup/unreplicated``) and
#: its answer stands.
DEDUP_WAIT_REPLICAS = 0
DEDUP_WAIT_TIMEOUT = 1.0

#: How a request becomes a fingerprint. ``"scrapy-redis"``: exactly
#: scrapy-redis's ``RFPDupeFilter.request_fingerprint`` (40 hex characters), so
#: fingerprint sets written by scrapy-redis are recognised as they are.
#: ``"scrapy"``: ``crawler.request_fingerprinter`` (honours
#: ``REQUEST_FINGERPRINTER_CLASS``), stored as hex.
DEDUP_FINGERPRINTER = "scrapy-redis"

#: Redis key templates used when ``SCHEDULER_DUPEFILTER_KEY`` is not set.
#: ``%(spider)s`` is the spider name. The set backend uses scrapy-redis's own key.
DEDUP_DEFAULT_KEYS = {
    "set": "%(spider)s:dupefilter",
    "hash": "%(spider)s:dedup-hash",
    "bloom": "%(spider)s:bloomfilter",
    "windowed-bloom": "%(spider)s:windowed-bloom",
    "native-bloom": "%(spider)s:native-bloom",
    "windowed-native-bloom": "%(spider)s:windowed-native-bloom",
}
#: Key template for custom backends (dotted paths) when none is configured.
DEDUP_DEFAULT_KEY = "%(spider)s:dedup"

#: hash backend: seconds a fingerprint stays "seen" after it is recorded.
#: A request can override it with ``request.meta["dedup_expire"]``.
DEDUP_EXPIRE = 7 * 24 * 3600

#: hash backend: number of Redis hashes the fingerprints are spread over
#: (fixed when the filter is created; more shards spread a Redis Cluster and
#: keep each janitor scan short).
DEDUP_HASH_SHARDS = 16

#: hash backend: who expires fingerprints. ``None`` (auto): a new filter uses the
#: server's own hash-field expiry where it has one (Redis >= 7.4, Valkey >= 9; no
#: janitor needed), else expiry timestamps that the janitor purges; an existing
#: filter keeps the way it was created with. ``True`` requires the server's expiry,
#: ``False`` the janitor's.
DEDUP_HASH_FIELD_EXPIRY = None

#: bloom / windowed-bloom: number of fingerprints the filter (for
#: windowed-bloom: each bucket) is sized for, and the false-positive rate it
#: has at that many. m = ceil(-n ln p / (ln 2)^2) bits, k = round(m/n ln 2).
DEDUP_BLOOM_CAPACITY = 10_000_000
DEDUP_BLOOM_ERROR_RATE = 0.001

#: bloom / windowed-bloom: number of blocks (separate Redis keys) the bits are
#: split into. 0 picks the fewest blocks that keep each under 512 MB (one
#: Redis string). Raise it to spread a filter over the masters of a cluster.
DEDUP_BLOOM_BLOCKS = 0

#: bloom / windowed-bloom: a scalable filter (Almeida et al., 2007) that adds
#: a layer, ``DEDUP_BLOOM_EXPANSION`` times larger than the last, each time the
#: newest one is full, so that the false-positive rate stays at or below
#: ``DEDUP_BLOOM_ERROR_RATE`` past ``DEDUP_BLOOM_CAPACITY`` (which then sizes
#: the first layer). Setting ``DEDUP_BLOOM_EXPANSION`` alone turns it on. Layer
#: j has error rate ``p x (1 - t) x t^j`` for ``DEDUP_BLOOM_TIGHTENING`` t;
#: layers stop at ``DEDUP_BLOOM_MAX_LAYERS`` (or where one block of the next
#: would pass 512 MB). All fixed when the filter is created.
DEDUP_BLOOM_SCALING = False
DEDUP_BLOOM_EXPANSION = 2
DEDUP_BLOOM_TIGHTENING = 0.5
DEDUP_BLOOM_MAX_LAYERS = 16

#: windowed-bloom: length of one bucket (``"hour"``, ``"day"``, ``"month"`` or
#: a number of seconds), how many buckets are live, and the time zone whose
#: calendar sets hour/day/month boundaries.
DEDUP_WINDOW = "day"
DEDUP_WINDOW_COUNT = 7
DEDUP_WINDOW_TZ = "UTC"

#: What happens to the request being checked when Redis cannot be reached:
#: ``"allow"`` lets it through at once (it is crawled, ``dedup/errors`` counts
#: it; no request is lost), ``"raise"`` retries ``DEDUP_ERROR_RETRIES`` times at
#: once (the reactor must not sleep) and then raises :class:`DedupBackendError`.
#: A retry that answers "seen" is not trusted (the failed call may have run):
#: the request counts as new (``dedup/ambiguous``).
DEDUP_ON_ERROR = "allow"
DEDUP_ERROR_RETRIES = 3

#: Seconds one dedup call may wait for Redis's answer (the dupefilter's own
#: socket timeout; ``REDIS_PARAMS["socket_timeout"]``, 30 s by scrapy-redis's
#: defaults, still applies to scrapy-redis's queue). A server that accepts
#: connections but never answers holds a request this long, once per attempt.
DEDUP_SOCKET_TIMEOUT = 5.0

#: Janitor (``scrapy_dedup_suite.janitor``): seconds between two passes while a
#: spider runs (``JanitorExtension``) and for ``scrapy dedup-janitor``; a cron
#: expression (``"*/10 * * * *"``) in ``DEDUP_JANITOR_CRON`` replaces the
#: interval for the command.
DEDUP_JANITOR_INTERVAL = 300
DEDUP_JANITOR_CRON = ""

#: Janitor: hash fields read per HSCAN and checked per purge call. Each call
#: then takes well under a few milliseconds of Redis time.
DEDUP_JANITOR_BATCH = 200

#: Janitor: lifetime of the lock that lets one janitor pass run at a time per
#: dedup key, renewed while the pass runs; a crashed janitor's lock expires
#: after this many seconds.
DEDUP_JANITOR_LOCK_TIMEOUT = 60

#: BatchDedupMiddleware (``scrapy_dedup_suite.middleware``): the most requests
#: checked in one call (a callback's requests are sent at the end of its output,
#: or each time this many are waiting), and how many batches may be in flight at
#: once (each on a thread with its own Redis connection).
DEDUP_BATCH_SIZE = 500
DEDUP_BATCH_THREADS = 4

#: BatchDedupMiddleware: seconds a batch whose call failed (Redis unreachable, a
#: failover under way) keeps trying, in its thread, before DEDUP_ON_ERROR applies.
#: The crawl goes on meanwhile; only the batches in flight when Redis went away
#: are let through after it (their answers may be their own writes), not every
#: link found during the outage. 0: DEDUP_ON_ERROR at once.
DEDUP_BATCH_OUTAGE_WAIT = 0

#: Fingerprints one process keeps in memory once it knows they are recorded, to
#: answer repeats with no round trip (0: off). Used with the backends whose answer
#: never turns from seen back to new (set, bloom, scalable bloom); ignored, with a
#: warning, by hash and windowed-bloom. About 150 bytes of the crawler's memory each.
DEDUP_LOCAL_CACHE = 0
