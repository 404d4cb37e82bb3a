"""What :class:`~.metrics.DedupMetrics` exposes, as Prometheus metric families.

- **The worker's stats** (its own, labelled ``spider`` and ``worker``): every stat of
  the package (``dedup/*``, ``frontier/*``: docs/stats.md) as ``scrapy_dedup_<name>``,
  a counter (``_total``) unless it is set rather than added to (a gauge: memory, fill,
  the janitor's last pass); the stats counted by reason or kind (``dedup/failed/<reason>``,
  ``dedup/errors/<kind>``, ``frontier/failed_calls/<kind>``) as one family with that
  label; and a few of Scrapy's own under Scrapy's names (``scrapy_items_scraped_total``...).
- **The worker's frontier** (the scheduler's, read on the reactor's thread without a
  call): requests taken and not handed out, in flight, and done but not yet
  acknowledged, with how long the oldest has waited.
- **The crawl's queue** (the same for every worker: aggregate with ``max``), read from
  Redis at most every DEDUP_METRICS_INTERVAL (:mod:`..frontier.figures`, three round
  trips a shard): requests waiting, leased, set aside, to try again, bad members, per
  shard; leases reclaimed; memory and bytes per request held; workers seen; the status
  (one series per status, 1 for the current one).
- **The filter** (only with DEDUP_METRICS_FILTER_EVERY): its memory, fingerprints and
  bytes per fingerprint.

Names follow Prometheus's conventions: base units (``_bytes``, ``_seconds``),
``_total`` for counters, snake case.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

# (Without the [metrics] extra the names stay undefined: DedupMetrics says so, and is off.)
with contextlib.suppress(ImportError):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

PREFIX = "scrapy_dedup_"

#: Stats that are set rather than added to: gauges, with their unit converted to the
#: base unit where it is not (name, factor).
GAUGES: dict[str, tuple[str, float]] = {
    "dedup/redis_memory_bytes": ("redis_memory_bytes", 1.0),
    "dedup/fill_ratio": ("fill_ratio", 1.0),
    "dedup/estimated_error_rate": ("estimated_error_rate", 1.0),
    "dedup/janitor/remaining": ("janitor_remaining_fields", 1.0),
    "dedup/janitor/last_pass_seconds": ("janitor_last_pass_seconds", 1.0),
    "dedup/janitor/slowest_call_ms": ("janitor_slowest_call_seconds", 0.001),
    "dedup/janitor/fill_ratio": ("janitor_fill_ratio", 1.0),
    "dedup/janitor/estimated_items": ("janitor_estimated_items", 1.0),
    "dedup/janitor/estimated_error_rate": ("janitor_estimated_error_rate", 1.0),
}
#: Stats counted by a label (the part after the prefix).
LABELLED = {"dedup/failed/": "reason", "dedup/errors/": "kind", "frontier/failed_calls/": "kind"}
#: Scrapy's stats exported under Scrapy's names (counters).
SCRAPY = {
    "downloader/request_count": "scrapy_downloader_requests",
    "downloader/response_count": "scrapy_downloader_responses",
    "response_received_count": "scrapy_responses_received",
    "item_scraped_count": "scrapy_items_scraped",
    "scheduler/enqueued/redis": "scrapy_dedup_scheduler_enqueued",
    "scheduler/dequeued/redis": "scrapy_dedup_scheduler_dequeued",
}
#: The same count under another name (Scrapy's, the Bloom dupefilters'), or not a number.
SKIPPED = frozenset({"dupefilter/filtered", "bloomfilter/filtered", "dedup/backend"})
#: Counted from the start, at 0 until the first (so that a rate has a start).
ALWAYS = ("dedup/added", "dedup/filtered", "dedup/errors")
#: The statuses ``dedup-info`` gives a crawl (:func:`..frontier.figures.crawl_status`).
STATUSES = ("finished", "running", "stalled", "retrying", "waiting")

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(stat: str) -> str:
    """``dedup/janitor/passes`` -> ``scrapy_dedup_janitor_passes``; ``frontier/leased``
    -> ``scrapy_dedup_frontier_leased`` (counters get ``_total`` from their family)."""
    rest = stat[len("dedup/") :] if stat.startswith("dedup/") else stat
    return PREFIX + _UNSAFE.sub("_", rest.replace("/", "_"))


def stat_families(stats: Mapping[str, Any], labels: dict[str, str]) -> Iterator[Metric]:
    """The families of the worker's stats (see the module), labelled ``labels``."""
    names, values = list(labels), list(labels.values())
    by_label = {  # (each family declared, if empty)
        start: CounterMetricFamily(
            f"{metric_name(start.rstrip('/'))}_by_{label}",
            f"the stat {start}<{label}>",
            labels=[*names, label],
        )
        for start, label in LABELLED.items()
    }
    stats = {**dict.fromkeys(ALWAYS, 0), **stats}
    for stat, value in sorted(stats.items()):
        if stat in SKIPPED or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        family: Metric
        if stat in SCRAPY:
            family = CounterMetricFamily(SCRAPY[stat], f"Scrapy's stat {stat}", labels=names)
            family.add_metric(values, value)
            yield family
            continue
        if not stat.startswith(("dedup/", "frontier/")):
            continue
        prefix = next((p for p in LABELLED if stat.startswith(p)), None)
        if prefix is not None:
            by_label[prefix].add_metric([*values, stat[len(prefix) :]], value)
        elif stat in GAUGES:
            renamed, factor = GAUGES[stat]
            family = GaugeMetricFamily(PREFIX + renamed, f"the stat {stat}", labels=names)
            family.add_metric(values, value * factor)
            yield family
        else:
            family = CounterMetricFamily(metric_name(stat), f"the stat {stat}", labels=names)
            family.add_metric(values, value)
            yield family
    yield from by_label.values()


def worker_families(scheduler: Any, labels: dict[str, str], now: float) -> Iterator[Metric]:
    """The worker's own frontier (the frontier scheduler ``scheduler``): read without a
    call, from another thread (lengths only)."""
    names, values = list(labels), list(labels.values())
    holdings = scheduler.holdings
    for name, help_, value in (
        ("frontier_taken_requests", "leased, not yet handed to the engine", len(holdings.taken)),
        ("frontier_in_flight_requests", "the engine is working on", len(holdings.in_flight)),
        ("frontier_acks_waiting", "done, not yet acknowledged", len(holdings.acks)),
    ):  # fmt: skip
        family = GaugeMetricFamily(PREFIX + name, help_, labels=names)
        family.add_metric(values, value)
        yield family
    since = holdings.acks.since
    family = GaugeMetricFamily(
        PREFIX + "frontier_oldest_ack_wait_seconds",
        "how long the oldest acknowledgement not yet sent has waited (0: none waits)",
        labels=names,
    )
    family.add_metric(values, max(0.0, now - since) if since is not None else 0.0)
    yield family


#: The queue's figures per shard: (the figures' field, metric, help, kind).
SHARD_FIGURES = (
    ("waiting", "frontier_waiting_requests", "requests waiting", "gauge"),
    ("held", "frontier_leased_requests", "requests leased, not yet acknowledged", "gauge"),
    ("aside", "frontier_set_aside_requests", "requests no worker could rebuild", "gauge"),
    ("later", "frontier_retry_later_requests", "failed pages to try again later", "gauge"),
    ("bad", "frontier_bad_members", "members of its keys not the frontier's", "gauge"),
    ("reclaimed", "frontier_reclaimed", "leases of dead workers given back", "counter"),
    ("memory_bytes", "frontier_memory_bytes", "its keys' memory (MEMORY USAGE)", "gauge"),
)  # fmt: skip


def queue_families(view: dict[str, Any], spider: str) -> Iterator[Metric]:
    """The crawl's queue, from :func:`..frontier.figures.crawl_figures` and its status."""
    for field, name, help_, kind in SHARD_FIGURES:
        cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        family = cls(PREFIX + name, f"the crawl's queue: {help_}", labels=["spider", "shard"])
        for shard in view["per_shard"]:
            family.add_metric([spider, shard["queue"]], shard[field])
        yield family
    per = view["bytes_per_request"]
    family = GaugeMetricFamily(
        PREFIX + "frontier_bytes_per_request",
        "the crawl's queue: memory per request held (waiting, leased, aside, later)",
        labels=["spider"],
    )
    if per is not None:
        family.add_metric([spider], per)
    yield family
    within = view["workers_seen_within"]
    family = GaugeMetricFamily(
        PREFIX + "frontier_workers_seen",
        f"workers whose last call to the queue is at most {within:.0f} s old",
        labels=["spider"],
    )
    family.add_metric([spider], view["workers_seen_lately"])
    yield family
    family = GaugeMetricFamily(
        PREFIX + "frontier_status",
        "the crawl's status as dedup-info says it: 1 for the current one",
        labels=["spider", "status"],
    )
    for status in STATUSES:
        family.add_metric([spider, status], 1.0 if view["status"] == status else 0.0)
    yield family


def filter_families(
    memory: int, count: float | None, spider: str, backend: str
) -> Iterator[Metric]:
    """The filter's memory and, when the backend counts them, its fingerprints."""
    labels = ["spider", "backend"]
    family = GaugeMetricFamily(
        PREFIX + "filter_memory_bytes", "the dupefilter's Redis memory", labels=labels
    )
    family.add_metric([spider, backend], memory)
    yield family
    if count:
        family = GaugeMetricFamily(
            PREFIX + "filter_fingerprints", "fingerprints the dupefilter holds", labels=labels
        )
        family.add_metric([spider, backend], count)
        yield family
        family = GaugeMetricFamily(
            PREFIX + "filter_bytes_per_fingerprint",
            "the dupefilter's Redis memory per fingerprint",
            labels=labels,
        )
        family.add_metric([spider, backend], memory / count)
        yield family


def redis_family(ok: bool, errors: int, spider: str) -> Iterator[Metric]:
    """Whether the last read of the queue from Redis worked, and reads that failed."""
    up = GaugeMetricFamily(
        PREFIX + "metrics_redis_up", "1 if the last read for the metrics worked", labels=["spider"]
    )
    up.add_metric([spider], 1.0 if ok else 0.0)
    yield up
    failed = CounterMetricFamily(
        PREFIX + "metrics_redis_read_errors", "reads for the metrics that failed", labels=["spider"]
    )
    failed.add_metric([spider], errors)
    yield failed
