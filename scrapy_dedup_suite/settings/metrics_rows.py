"""The metrics extension's settings (``DedupMetrics``): its part of the one settings
table (:mod:`.table`), listed in the documentation's metrics page."""

from __future__ import annotations

from .kinds import TEN_YEARS, Ports, Seconds, Setting, Text, Url

METRICS_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DEDUP_METRICS_PORT",
        None,
        Ports(),
        "`DedupMetrics`: serve Prometheus metrics over HTTP at `/metrics` on this port, or "
        "the first free one of a range such as `[9410, 9420]` (several workers on one "
        "host); `0`: any free port (said in the log)",
        table="metrics",
    ),
    Setting(
        "DEDUP_METRICS_HOST",
        "127.0.0.1",
        Text("an address to listen on, such as '127.0.0.1' or '0.0.0.0'"),
        '`DedupMetrics`: the address the metrics are served on; `"0.0.0.0"` to let a '
        "Prometheus on another host scrape them",
        table="metrics",
    ),
    Setting(
        "DEDUP_METRICS_PUSHGATEWAY",
        None,
        Url(),
        "`DedupMetrics`: a Prometheus Pushgateway's URL (`http://host:9091`) to push the "
        "metrics to every `DEDUP_METRICS_INTERVAL` and at the close, grouped by spider and "
        "worker",
        table="metrics",
    ),
    Setting(
        "DEDUP_METRICS_INTERVAL",
        15.0,
        Seconds(1.0, TEN_YEARS, "a number of seconds >= 1 (e.g. 15)", low_open=False),
        "`DedupMetrics`: the most often the frontier's queue is read from Redis for the "
        "metrics (a scrape in between is answered from the last read), and how often they "
        "are pushed",
        table="metrics",
    ),
    Setting(
        "DEDUP_METRICS_FILTER_EVERY",
        0.0,
        Seconds(0.0, TEN_YEARS, "a number of seconds >= 0 (0: never)", low_open=False),
        "`DedupMetrics`: how often the filter's memory and fingerprints are counted for "
        "the bytes-per-fingerprint metric (the census `dedup-info` makes, a call per "
        "1,000 buckets: enable it on one worker); 0: never",
        table="metrics",
    ),
)
