"""Every setting the package reads, in one table: its name, default, the values it
accepts and one line of help.

The table gives the defaults (:func:`default`), the checked values the options
objects are built from (:func:`read`, :func:`check`), and the documentation's settings
reference (docs/settings.md, and the janitor's in docs/operations.md, written by
:mod:`..operations.settings_docs`; a test fails when they and the table differ). What a setting
accepts is one of the kinds of :mod:`.kinds`. Settings that belong to Scrapy
or scrapy-redis (``REDIS_URL``, ``DUPEFILTER_DEBUG``...) are listed with ``owner`` so
the docs name them; their defaults stay their owner's.
"""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings

from ..core.fingerprint import FINGERPRINTERS
from .frontier_rows import FRONTIER_SETTINGS
from .kinds import (
    HUNDRED_YEARS,
    TEN_YEARS,
    Checked,
    Flag,
    FlagOrAuto,
    HttpCodes,
    OneOf,
    Seconds,
    Setting,
    Text,
    Whole,
    WholeOrAuto,
    WholeOrZero,
)
from .metrics_rows import METRICS_SETTINGS
from .server_rows import SERVER_SETTINGS

#: The most immediate retries of one failed call (DEDUP_ON_ERROR='raise').
MAX_RETRIES = 10
#: The largest local cache (DEDUP_LOCAL_CACHE), in fingerprints.
MAX_LOCAL_CACHE = 100_000_000
#: The largest batch BatchDedupMiddleware sends in one call.
MAX_BATCH_SIZE = 10_000
#: The most batches in flight at once (threads, each with its own connection).
MAX_BATCH_THREADS = 64
#: The most hashes a hash filter spreads its fields over.
MAX_SHARDS = 4096
#: A new filter's groups when DEDUP_HASH_SHARDS is unset: on a Cluster, a group is a
#: slot, and 16 spread a filter over up to 16 masters.
GROUPS = 16
#: ... and a new growing filter's on one server, where groups spread nothing and each
#: costs its stamp and level record (3.6 B a fingerprint at 1,000 with 16 groups).
GROWING_GROUPS = 4
#: The most fingerprints a compact filter is sized for (3.9 * 10^9 buckets of 256, below
#: the 2^32 its 4 digest bytes can choose).
MAX_COMPACT_CAPACITY = 10**12
#: What DEDUP_ON_ERROR may be.
ON_ERROR = ("allow", "raise")


TABLE: tuple[Setting, ...] = (
    Setting(
        "DEDUP_BACKEND",
        "set",
        Checked("backends.get_backend_class"),
        "which storage records fingerprints: {backends}",
    ),
    Setting(
        "DEDUP_FINGERPRINTER",
        "scrapy-redis",
        OneOf(FINGERPRINTERS),
        '`"scrapy-redis"`: exactly scrapy-redis\'s fingerprint (sha1 of method, canonical URL, '
        'body), so existing sets are recognised; `"scrapy"`: `crawler.request_fingerprinter` '
        "(honours `REQUEST_FINGERPRINTER_CLASS`)",
    ),
    Setting(
        "SCHEDULER_DUPEFILTER_KEY",
        None,
        Checked("backends.dupefilter_key"),
        "base key; the set backend uses it as is, the others derive their keys from it",
        shown="{default_keys}",
        owner="scrapy-redis",
    ),
    Setting(
        "DEDUP_EXPIRE",
        7 * 24 * 3600,
        Seconds(0.0, HUNDRED_YEARS, "a number of seconds > 0 (e.g. 604800 for 7 days)"),
        "hash: seconds a fingerprint stays seen; keep it longer than a crawl: once a crawl has "
        "run longer, the pages it saw first are new again and a site whose pages link to each "
        "other is crawled over and over (a WARNING says so, once). A request's "
        '`meta["dedup_expire"]` overrides it',
        shown="`604800` (7 days)",
    ),
    Setting(
        "DEDUP_HASH_SHARDS",
        None,
        WholeOrAuto(
            1,
            MAX_SHARDS,
            f"a whole number of hashes from 1 to {MAX_SHARDS:,} (each is checked at open and "
            "scanned by the janitor), or None for the filter's own",
        ),
        "compact, and hash filters in buckets: number of hash-tagged groups of buckets (on a "
        "cluster, each group is one slot); hash filters of layout 1: number of hashes; fixed "
        "when created. Unset: an existing filter's; a new one gets "
        f"{GROUPS}, or {GROWING_GROUPS} when it grows (DEDUP_COMPACT_CAPACITY = 0) on one "
        "server, where groups spread nothing and each costs its own keys",
        shown=f"`None` (the filter's; new: {GROUPS}, growing on one server {GROWING_GROUPS})",
    ),
    Setting(
        "DEDUP_HASH_FIELD_EXPIRY",
        None,
        FlagOrAuto(),
        "hash: who expires fingerprints. Auto: a new filter lets the server expire its fields "
        "where that keeps its buckets compact (Redis >= 7.4; not Valkey 9, where they would "
        "be hashtables), else the janitor; an existing filter keeps its way. `True`/`False` "
        "require one way",
        shown="`None` (auto)",
    ),
    Setting(
        "DEDUP_COMPACT_CAPACITY",
        10_000_000,
        WholeOrZero(
            1_000,
            MAX_COMPACT_CAPACITY,
            "0 (no capacity: the buckets split as the filter grows), or a whole number "
            f"of fingerprints from 1,000 to {MAX_COMPACT_CAPACITY:,}",
        ),
        "compact and hash: fingerprints a new filter is sized for, fixed when created; its "
        "buckets keep "
        "the server's compact encoding up to about this many (past it answers stay exact, "
        "memory per fingerprint grows, and a WARNING says so). 0: a filter with nothing to "
        "size, whose buckets split as it grows (docs/backends.md; hash: with the janitor's "
        "expiry). A stored filter keeps its layout; `scrapy convert-to-growing` converts a "
        "sized compact one",
    ),
    Setting(
        "DEDUP_BLOOM_CAPACITY",
        10_000_000,
        Whole(1, None, "a whole number of fingerprints >= 1"),
        "bloom: fingerprints the filter is sized for; windowed-bloom: per bucket",
    ),
    Setting(
        "DEDUP_BLOOM_ERROR_RATE",
        0.001,
        Seconds(
            0.0,
            1.0,
            "a false-positive rate strictly between 0 and 1 (e.g. 0.001)",
            high_open=True,
        ),
        "false-positive rate at capacity, strictly between 0 and 1",
    ),
    Setting(
        "DEDUP_BLOOM_BLOCKS",
        0,
        Whole(0, None, "0 (automatic) or a number of blocks >= 1"),
        "number of blocks (keys); automatic keeps each under 512 MB; on a cluster a few times "
        "the masters",
        shown="`0` (automatic)",
    ),
    Setting(
        "DEDUP_BLOOM_SCALING",
        False,
        Flag(),
        "bloom, and each windowed-bloom bucket: a scalable filter that adds layers past "
        "`DEDUP_BLOOM_CAPACITY` and keeps the false-positive rate at or below "
        "`DEDUP_BLOOM_ERROR_RATE` (see [scalable Bloom filters]"
        "(backends.md#scalable-bloom-filters-dedup-bloom-scaling))",
    ),
    Setting(
        "DEDUP_BLOOM_EXPANSION",
        2,
        Whole(1, None, "a whole factor >= 1 (2 doubles each new layer)"),
        "each new layer holds this many times the last one's fingerprints; setting it turns "
        "scaling on",
    ),
    Setting(
        "DEDUP_BLOOM_TIGHTENING",
        0.5,
        Seconds(0.0, 1.0, "a ratio strictly between 0 and 1 (e.g. 0.5)", high_open=True),
        "ratio r of the error rates of two successive layers (layer j: p (1 - r) r^j)",
    ),
    Setting(
        "DEDUP_BLOOM_MAX_LAYERS",
        16,
        Whole(1),
        "most layers a filter may have (fewer if a block of the next one would pass 512 MB)",
    ),
    Setting(
        "BLOOMFILTER_BIT",
        30,
        Whole(3, None, "a whole number from 3 to 40 (m = 2^BIT)"),
        "scrapy-redis-bloomfilter's sizing (m = 2^BIT bits), accepted instead of "
        "`DEDUP_BLOOM_CAPACITY`",
        shown="unset",
    ),
    Setting(
        "BLOOMFILTER_HASH_NUMBER",
        6,
        Whole(1, None, "a whole number from 1 to 64"),
        "scrapy-redis-bloomfilter's number of hashes, with `BLOOMFILTER_BIT`",
        shown="unset",
    ),
    Setting(
        "DEDUP_WINDOW",
        "day",
        Checked("core.windows.WindowSpec.parse"),
        'windowed-bloom: bucket length, `"hour"`, `"day"`, `"month"` or seconds',
    ),
    Setting(
        "DEDUP_WINDOW_COUNT",
        7,
        Checked("core.windows.WindowSpec.parse"),
        "windowed-bloom: live buckets",
    ),
    Setting(
        "DEDUP_WINDOW_TZ",
        "UTC",
        Checked("core.windows.WindowSpec.parse"),
        "windowed-bloom: IANA zone of the calendar",
    ),
    Setting(
        "DEDUP_ON_ERROR",
        "allow",
        OneOf(ON_ERROR),
        "when a dedup call fails (Redis unreachable, timeout, full memory, busy script, "
        'cluster down, read-only, a key damaged mid-crawl): `"allow"` lets the request '
        "through at once, each page once (crawled, counted in `dedup/errors`; no request is "
        'lost), `"raise"` retries at once, then stops the crawl (reason `dedup_error`; '
        "outside a crawl it raises `DedupBackendError`; see [what can go wrong]"
        "(operations.md#what-can-go-wrong))",
    ),
    Setting(
        "DEDUP_SOCKET_TIMEOUT",
        5.0,
        Seconds(0.0, 3600.0, "a number of seconds > 0 and <= 3600 (e.g. 5)"),
        'seconds one dedup call waits for Redis\'s answer (`REDIS_PARAMS["socket_timeout"]`, '
        "30 s by scrapy-redis's defaults, still applies to its queue): a server that accepts "
        "connections but never answers holds a request at most this long per attempt",
        shown="`5`",
    ),
    Setting(
        "DEDUP_ERROR_RETRIES",
        3,
        Whole(
            0,
            MAX_RETRIES,
            f"a whole number from 0 to {MAX_RETRIES} (each retry may wait DEDUP_SOCKET_TIMEOUT)",
        ),
        'with `"raise"`: immediate retries before raising (no pause: the reactor never sleeps)',
    ),
    *SERVER_SETTINGS,
    Setting(
        "DUPEFILTER_DEBUG",
        False,
        Flag(),
        "log every filtered request, not only the first",
        shown="`False`",
        owner="scrapy",
    ),
    Setting(
        "DEDUP_BATCH_SIZE",
        500,
        Whole(
            1,
            MAX_BATCH_SIZE,
            f"a whole number of requests from 1 to {MAX_BATCH_SIZE:,} (one call holds the server "
            "for the whole batch)",
        ),
        "`BatchDedupMiddleware`, and the frontier scheduler's batches: most requests checked "
        f"in one call (1 to {MAX_BATCH_SIZE:,})",
    ),
    Setting(
        "DEDUP_BATCH_THREADS",
        4,
        Whole(1, MAX_BATCH_THREADS, f"a whole number of threads from 1 to {MAX_BATCH_THREADS}"),
        "`BatchDedupMiddleware`: batches in flight at once, each on a thread with its own "
        f"connection (1 to {MAX_BATCH_THREADS})",
    ),
    Setting(
        "DEDUP_BATCH_OUTAGE_WAIT",
        0.0,
        Seconds(
            0.0,
            3600.0,
            "a number of seconds from 0 to 3600 (e.g. 30; 0: do not wait)",
            low_open=False,
        ),
        "`BatchDedupMiddleware`: seconds a batch whose call failed (Redis restarting, a failover "
        "under way) keeps trying in its thread, with growing pauses, before `DEDUP_ON_ERROR` "
        "applies; the crawl goes on meanwhile. 0: at once",
        shown="`0`",
    ),
    Setting(
        "DEDUP_LOCAL_CACHE",
        0,
        Whole(
            0,
            MAX_LOCAL_CACHE,
            f"a whole number of fingerprints from 0 (off) to {MAX_LOCAL_CACHE:,}",
        ),
        "fingerprints per process known to be recorded, answered without Redis (set and bloom "
        "only; about 150 bytes of crawler memory each)",
        shown="`0` (off)",
    ),
    Setting(
        "DEDUP_FORGET_FAILED",
        True,
        Flag(),
        "`FailedPagesMiddleware`: forget, when the spider closes, the pages whose download "
        "failed for good in this run, so that the next run downloads them again (exact "
        "backends; docs/failures.md)",
    ),
    Setting(
        "DEDUP_FAILED_EXPIRE",
        3600.0,
        Seconds(
            0.0,
            TEN_YEARS,
            "a number of seconds >= 0 (e.g. 3600; 0: until the close)",
            low_open=False,
        ),
        "`FailedPagesMiddleware`, `hash`: seconds a page that failed for good stays seen "
        "within the run; then its next link downloads it again (once an expiry at most)",
        shown="`3600.0` (an hour)",
    ),
    Setting(
        "DEDUP_FAILED_HTTP_CODES",
        None,
        HttpCodes(),
        "`FailedPagesMiddleware`: HTTP codes that mean a download failed for good once "
        "RetryMiddleware gave up (404 and 410 are answers, not failures)",
        shown="`RETRY_HTTP_CODES`",
    ),
    Setting(
        "DEDUP_SUMMARY_JSON",
        None,
        Checked("summary.DedupSummary"),
        "`DedupSummary`: a file the closing summary is also written to, as JSON",
    ),
    Setting(
        "DEDUP_JANITOR_INTERVAL",
        300,
        Seconds(
            0.0,
            TEN_YEARS,
            "a number of seconds >= 0 (0 disables the janitor extension)",
            low_open=False,
        ),
        "seconds between passes (extension and command)",
        table="janitor",
    ),
    Setting(
        "DEDUP_JANITOR_CRON",
        "",
        Text("a cron expression such as '*/10 * * * *'", empty=True),
        "crontab expression for the command instead of the interval",
        table="janitor",
    ),
    Setting(
        "DEDUP_JANITOR_BATCH",
        200,
        Whole(1, None, "a whole number of fields >= 1"),
        "hash fields per Redis call (read by one HSCAN, or by one call over whole buckets)",
        table="janitor",
    ),
    Setting(
        "DEDUP_JANITOR_LOCK_TIMEOUT",
        60,
        Seconds(0.0, 86400.0, "a number of seconds > 0"),
        "seconds a crashed janitor's lock outlives it",
        table="janitor",
    ),
)

TABLE += FRONTIER_SETTINGS + METRICS_SETTINGS

SETTINGS: dict[str, Setting] = {setting.name: setting for setting in TABLE}


def default(name: str) -> Any:
    """The package's default for ``name``."""
    return SETTINGS[name].default


def read(settings: BaseSettings | dict[str, Any], name: str) -> Any:
    """``name`` from the project's settings (or its default), checked."""
    return SETTINGS[name].read(settings)


def check(name: str, value: Any, label: str = "") -> Any:
    """A value given by hand (a constructor's argument) checked as the setting would be;
    ``label`` names it in the error instead (e.g. ``request.meta['dedup_expire']``)."""
    setting = SETTINGS[name]
    return setting.accepts(label, value) if label else setting.check(value)


def given_settings(settings: BaseSettings | dict[str, Any]) -> list[str]:
    """The package's own settings (not Scrapy's or scrapy-redis's) the project gave."""
    return [s.name for s in TABLE if not s.owner and settings.get(s.name) is not None]


def check_given(settings: BaseSettings | dict[str, Any]) -> None:
    """Each setting of the table the project gave, checked (the first refused raises)."""
    for setting in TABLE:
        if settings.get(setting.name) is not None:
            setting.read(settings)
