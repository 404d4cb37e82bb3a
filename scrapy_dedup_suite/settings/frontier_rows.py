"""The frontier scheduler's settings: its part of the one settings table
(:mod:`.table`), listed in the documentation's frontier page."""

from __future__ import annotations

from .kinds import TEN_YEARS, Checked, Flag, HttpCodes, Seconds, Setting, Text, Whole

FRONTIER_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DEDUP_FRONTIER",
        False,
        Flag(),
        "the add-on sets `SCHEDULER` to the frontier scheduler where the project uses "
        "scrapy-redis's (or Scrapy's default), and says so in its log line",
        table="frontier",
    ),
    Setting(
        "SCHEDULER_PERSIST",
        False,
        Flag(),
        "keep the queue and the fingerprints when the crawl ends (else both are deleted)",
        owner="scrapy-redis",
        table="frontier",
    ),
    Setting(
        "SCHEDULER_FLUSH_ON_START",
        False,
        Flag(),
        "delete the queue and the fingerprints when the crawl starts",
        owner="scrapy-redis",
        table="frontier",
    ),
    Setting(
        "SCHEDULER_IDLE_BEFORE_CLOSE",
        0,
        Seconds(0.0, TEN_YEARS, "a number of seconds >= 0", low_open=False),
        "seconds a worker waits with nothing to take and nothing leased anywhere before "
        "its spider goes idle (and closes, unless it waits for start URLs); a page to try "
        "again that comes due within that time counts as something to take",
        owner="scrapy-redis",
        table="frontier",
    ),
    Setting(
        "SCHEDULER_QUEUE_KEY",
        "%(spider)s:requests",
        Text("a Redis key such as '%(spider)s:requests'"),
        "where the queue lives on a single server: `{<key>}:frontier` and keys beside it "
        "(on a Cluster, beside the dupefilter's groups)",
        owner="scrapy-redis",
        table="frontier",
    ),
    Setting(
        "SCHEDULER_SERIALIZER",
        None,
        Checked("frontier.codec.serializer"),
        'for requests that are not a plain GET: `"pickle"`, or a module (or its dotted '
        "path) with `dumps` and `loads` (default: data only, JSON, which runs nothing when "
        "read; pickle lets whoever writes to the queue run code on every worker, and says "
        "so with a WARNING at the start)",
        shown="unset (data only)",
        owner="scrapy-redis",
        table="frontier",
    ),
    Setting(
        "FRONTIER_POLITENESS",
        True,
        Flag(),
        "keep each download slot's `DOWNLOAD_DELAY` (and jitter), concurrency "
        "(`CONCURRENT_REQUESTS_PER_DOMAIN`, `DOWNLOAD_SLOTS`) across every worker together, "
        "as one Scrapy process keeps them: requests queue per slot (the host, or "
        "`meta['download_slot']`) and a lease call hands out a slot's request only when the "
        "slot is ready; off: each worker's downloader keeps its own, so N workers hit a host "
        "N times as hard (see frontier.md, Politeness)",
        table="frontier",
    ),
    Setting(
        "FRONTIER_BACKOFF_HTTP_CODES",
        [429, 503],
        HttpCodes(),
        "under `FRONTIER_POLITENESS`: a response with one of these codes blocks its "
        "download slot for every worker, for its `Retry-After` (seconds or a date), else "
        "for the back-off (`FRONTIER_BACKOFF`); `[]`: no shared back-off",
        table="frontier",
    ),
    Setting(
        "FRONTIER_BACKOFF",
        10.0,
        Seconds(0.0, 86400.0, "a number of seconds > 0 (e.g. 10)"),
        "a slot's block after a refusal without `Retry-After`; doubled for each refusal "
        "after a block ended, up to `FRONTIER_BACKOFF_MAX`; a slot not refused for as long "
        "as its last block lasted, after it ended, starts over",
        table="frontier",
    ),
    Setting(
        "FRONTIER_BACKOFF_MAX",
        600.0,
        Seconds(0.0, 7 * 86400.0, "a number of seconds > 0 (e.g. 600)"),
        "the longest block of a slot, `Retry-After`'s too (a site that asks for days does "
        "not stop the crawl for days)",
        table="frontier",
    ),
    Setting(
        "FRONTIER_READ_PICKLE",
        False,
        Flag(),
        "read requests written with pickle: scrapy-redis's queue taken over at the start, "
        "and the frontier's own from before its data encoding (with a WARNING: pickle runs "
        "code from Redis; only for a Redis that trusted clients alone write)",
        table="frontier",
    ),
    Setting(
        "FRONTIER_REQUEST_CLASSES",
        (),
        Checked("frontier.codec.request_classes"),
        "Request subclasses (or their dotted paths) the frontier stores and rebuilds by "
        "name, besides Scrapy's own (`FormRequest`, `JsonRequest`, `XmlRpcRequest`); a "
        "request of another class is refused when it is enqueued, naming this setting",
        shown="none",
        table="frontier",
    ),
    Setting(
        "FRONTIER_LEASE",
        60.0,
        Seconds(0.0, 86400.0, "a number of seconds > 0 (e.g. 60)"),
        "seconds a request taken by a worker stays its own without news; a live worker renews "
        "its leases every third of it, a dead one's go back to the queue after it",
        table="frontier",
    ),
    Setting(
        "FRONTIER_MAX_RETURNS",
        3,
        Whole(0, 255, "a whole number from 0 to 255 (0: no bound)"),
        "times a request may come back to the queue from workers that held it past "
        "`FRONTIER_LEASE` (killed, frozen, cut off from Redis); once more, it is set aside "
        "with an ERROR naming its URL, and a worker's start gives it one more try",
        table="frontier",
    ),
    Setting(
        "FRONTIER_PREFETCH",
        0,
        Whole(0, 10_000, "a whole number from 0 to 10000 (0: CONCURRENT_REQUESTS)"),
        "requests a worker leases per call, at most (0: `CONCURRENT_REQUESTS`)",
        table="frontier",
    ),
    Setting(
        "FRONTIER_RETRY_TIMES",
        5,
        Whole(0, 20, "a whole number from 0 to 20 (0: never)"),
        "`FailedPagesMiddleware`: times a page whose download failed for good (after "
        "`RetryMiddleware`'s retries) goes back to the queue to be tried again later; then "
        "it is forgotten at the close as without the frontier",
        table="frontier",
    ),
    Setting(
        "FRONTIER_RETRY_DELAY",
        60.0,
        Seconds(0.0, TEN_YEARS, "a number of seconds >= 0 (e.g. 60)", low_open=False),
        "seconds before a page that failed for good is tried again, doubled each time "
        "(60: after 1, 2, 4, 8 and 16 minutes)",
        shown="`60.0` (a minute)",
        table="frontier",
    ),
    Setting(
        "FRONTIER_WAIT_FOR_RETRIES",
        0.0,
        Seconds(0.0, TEN_YEARS, "a number of seconds >= 0 (e.g. 600)", low_open=False),
        "seconds a worker with nothing else to do stays open for a page to try again "
        "(`FRONTIER_RETRY_DELAY`) that comes due within them, or within "
        "`SCHEDULER_IDLE_BEFORE_CLOSE` if longer; pages due later are left in Redis for the "
        "next run, said at the close, and `dedup-info` calls such a crawl finished",
        table="frontier",
    ),
)
