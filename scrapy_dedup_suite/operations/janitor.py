"""The janitor: purges expired fingerprints from the hash backend, and reports on the others.

One pass (:meth:`Janitor.run_pass`) does what the backend declares it can do
(``DedupBackend.capabilities``: purge expired entries, report fill, restore lost
expiries, count entries), so a custom backend gets what it declares. For the
built-in backends:

- **hash**: walks the backend's purge units in order, one step at a time, and deletes
  the fields whose expiry has passed by the Redis server's clock (backends/purge.py):
  in shards (layout 1), ``HSCAN`` of ``DEDUP_JANITOR_BATCH`` fields then a Lua
  compare-and-delete, so a field a crawler refreshed in the meantime is kept; in
  buckets, one script reads consecutive buckets of a slot whole and deletes their
  expired fields, until it has read a batch. No single call holds Redis for more than
  about a millisecond. Progress (unit and cursor) is saved in ``<key>:janitor`` after
  every step: a pass killed at any point is finished by the next one.
- **bloom / windowed-bloom**: fill ratio (BITCOUNT in short ranges), estimated
  number of items and the false-positive rate that fill implies, with a warning
  past the designed capacity. For windowed-bloom it also gives every bucket key
  that lost its expiry (e.g. restored from a backup) its expiry back.

Only one pass runs at a time per dedup key: a lock ``<key>:janitor:lock`` (a
token with a lifetime, renewed while the pass runs) makes any other janitor skip
its pass; a crashed janitor's lock expires after ``DEDUP_JANITOR_LOCK_TIMEOUT``.

:class:`JanitorExtension` runs passes every ``DEDUP_JANITOR_INTERVAL`` seconds
while a spider runs (APScheduler); ``scrapy dedup-janitor`` runs them as a
service or once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import LockError
from scrapy import signals
from scrapy.exceptions import NotConfigured

from ..backends import DedupBackend, admission, build_backend
from ..backends.keys import as_str, janitor_lock_key, janitor_state_key, read_hash
from ..backends.purge import OnScan
from ..dedup.crawl_checks import check_crawl_settings
from ..settings.options import JanitorOptions
from ..settings.table import check, default
from .janitor_report import JanitorReport

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler
    from scrapy import Spider
    from scrapy.crawler import Crawler

#: Named by its public path (:mod:`scrapy_dedup_suite.janitor`), as its log lines always were.
logger = logging.getLogger("scrapy_dedup_suite.janitor")

#: Passes whose growth is compared before warning that the janitor falls behind.
GROWTH_PASSES = 3


class Janitor:
    """Runs janitor passes for one backend. Thread-safe to :meth:`stop`."""

    def __init__(
        self,
        backend: DedupBackend,
        *,
        batch: int = default("DEDUP_JANITOR_BATCH"),
        lock_timeout: float = default("DEDUP_JANITOR_LOCK_TIMEOUT"),
        on_scan: OnScan | None = None,
    ) -> None:
        self.backend = backend
        self.server = backend.server
        self.batch = check("DEDUP_JANITOR_BATCH", batch)
        self.lock_timeout = check("DEDUP_JANITOR_LOCK_TIMEOUT", lock_timeout)
        #: Called with (hash key, expired fields found) after each scan, before they are
        #: purged (a bucket step reads and deletes in one call: none in between).
        self.on_scan = on_scan
        self.state_key = janitor_state_key(backend.key)
        self.lock_key = janitor_lock_key(backend.key)
        self._stop = threading.Event()
        # redis-py's Lock: SET NX PX with a token; extended and released only by its holder.
        self._lock = backend.server.lock(
            self.lock_key, timeout=self.lock_timeout, blocking=False, thread_local=False
        )

    @classmethod
    def from_settings(cls, backend: DedupBackend, settings: Any) -> Janitor:
        options = JanitorOptions.from_settings(settings)
        return cls(backend, batch=options.batch, lock_timeout=options.lock_timeout)

    def stop(self) -> None:
        """Ask a running pass to stop after its current batch (it resumes next time)."""
        self._stop.set()

    # -- the pass ----------------------------------------------------------------------

    def run_pass(self) -> JanitorReport:
        report = JanitorReport(self.backend.name, self.backend.key)
        started = time.monotonic()
        self._stop.clear()
        if not self._acquire():
            report.skipped = True
            return report
        try:
            warning = admission.eviction_warning(self.backend)
            if warning is not None:
                report.warnings.append(warning)
            if not self.backend.verify():
                report.exists = False
                report.completed = True
            else:
                self._by_capability(report)
        finally:
            self._release()
            report.seconds = time.monotonic() - started
        for warning in report.warnings:
            logger.warning("Janitor: %s", warning)
        return report

    def _by_capability(self, report: JanitorReport) -> None:
        """What the backend declares it can do (``DedupBackend.capabilities``)."""
        backend = self.backend
        capabilities = backend.capabilities
        note = backend.janitor_note()
        if note is not None:
            report.notes.append(note)
        if capabilities.restore_expiry:
            report.restored_expiry = backend.restore_expiry()
            if report.restored_expiry:
                report.warnings.append(
                    f"{len(report.restored_expiry)} key(s) of {backend.key!r} had lost their "
                    "expiry; restored: " + ", ".join(report.restored_expiry)
                )
        purge = backend.purge_units() if capabilities.purge_expired else []
        if purge:  # (none where the server expires a hash filter's fields itself)
            report.purged = True
            self._purge(purge, report)
        if capabilities.report_fill:
            report.filters = backend.filter_reports()
            report.warnings += [f.warning(backend.key) for f in report.filters if f.past_capacity]
        if capabilities.count:
            report.remaining = backend.count()

    # -- one pass at a time ---------------------------------------------------------------

    def _acquire(self) -> bool:
        return bool(self._lock.acquire(blocking=False))

    def _keep_lock(self) -> bool:
        """Extend the lock to a full DEDUP_JANITOR_LOCK_TIMEOUT; False if it was lost."""
        try:
            return bool(self._lock.reacquire())
        except LockError:  # expired, or taken by another pass meanwhile
            return False

    def _release(self) -> None:
        # Expired, or another pass holds it now: not ours to delete.
        with contextlib.suppress(LockError):
            self._lock.release()

    # -- the purge ------------------------------------------------------------------------

    def _purge(self, units: list[str], report: JanitorReport) -> None:
        """Walk the backend's purge units in order, one step at a time (the layout's:
        backends/purge.py), saving (unit, cursor) after each step."""
        state = read_hash(self.server, self.state_key)
        try:
            unit = int(state.get("shard", 0))
            cursor = int(state.get("cursor", 0))
            report.resumed = "shard" in state
            if not 0 <= unit < len(units) or cursor < 0:
                raise ValueError(f"shard {unit}, cursor {cursor}")
        except ValueError as exc:
            # A progress record that cannot be read (edited, or written by something
            # else) must not stop every later pass: start over from the first unit.
            report.warnings.append(
                f"the progress record {self.state_key!r} could not be read ({exc}); this pass "
                "starts from the first shard"
            )
            self.server.hdel(self.state_key, "shard", "cursor")
            unit, cursor, report.resumed = 0, 0, False
        invalid = 0
        while unit < len(units):
            while True:
                if self._stop.is_set():
                    report.warnings.append("pass stopped on request; the next one resumes it")
                    return self._finish_purge(report, done=False)
                if not self._keep_lock():
                    report.warnings.append(
                        "lost the janitor lock (a pass took longer than "
                        "DEDUP_JANITOR_LOCK_TIMEOUT); stopped, the next pass resumes"
                    )
                    return self._finish_purge(report, done=False)
                step = self.backend.purge_step(unit, cursor, self.batch, self.on_scan)
                report.scanned += step.scanned
                report.removed += step.removed
                report.calls += len(step.call_ms)
                report.slowest_call_ms = max(report.slowest_call_ms, *step.call_ms, 0.0)
                invalid += step.invalid
                cursor = step.cursor
                if cursor == 0:
                    break
                self.server.hset(self.state_key, mapping={"shard": unit, "cursor": cursor})
            unit += 1
            cursor = 0
            if unit < len(units):
                self.server.hset(self.state_key, mapping={"shard": unit, "cursor": 0})
        if invalid:
            report.warnings.append(
                f"{invalid} field(s) of {self.backend.key!r} hold no expiry timestamp; left "
                "untouched"
            )
        self._finish_purge(report, done=True)

    def _finish_purge(self, report: JanitorReport, done: bool) -> None:
        report.remaining = self.backend.purge_remaining()
        report.completed = done
        if not done:
            return
        history = [
            int(x)
            for x in as_str(self.server.hget(self.state_key, "history") or "").split(",")
            if x
        ]
        history = [*history, report.remaining][-(GROWTH_PASSES + 1) :]
        self.server.hdel(self.state_key, "shard", "cursor")
        self.server.hset(
            self.state_key,
            mapping={"history": ",".join(map(str, history)), "last_pass": int(time.time())},
        )
        growth = [b - a for a, b in zip(history, history[1:])]
        if len(growth) == GROWTH_PASSES and all(g > 0 for g in growth):
            report.warnings.append(
                f"{self.backend.key!r} grew in each of the last {GROWTH_PASSES} passes "
                f"({', '.join(f'+{g:,}' for g in growth)} fields) while this pass removed "
                f"{report.removed:,}; if the crawl is not simply discovering new pages, "
                "run the janitor more often (DEDUP_JANITOR_INTERVAL) or lower DEDUP_EXPIRE"
            )


# -- the Scrapy extension -----------------------------------------------------------------------


def make_scheduler(blocking: bool) -> BaseScheduler:
    """APScheduler with one worker thread; its own INFO lines (job added, running,
    executed: two per pass) are left out unless the project sets its logger's level,
    since every pass logs its own report."""
    quiet = logging.getLogger("apscheduler")
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.WARNING)
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.schedulers.blocking import BlockingScheduler

    cls = BlockingScheduler if blocking else BackgroundScheduler
    return cls(
        executors={"default": ThreadPoolExecutor(1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=timezone.utc,
    )


class JanitorExtension:
    """Runs a janitor pass every ``DEDUP_JANITOR_INTERVAL`` seconds while the spider runs.

    Enable with ``EXTENSIONS = {"scrapy_dedup_suite.janitor.JanitorExtension": 500}``.
    The first pass runs when the spider opens. Passes run in APScheduler's
    background thread with their own Redis client, never on the reactor; on
    close the running pass stops after its batch and the scheduler shuts down.
    """

    #: Where projects name it (its code lives in this module).
    public_path: ClassVar[str] = "scrapy_dedup_suite.janitor.JanitorExtension"

    def __init__(self, crawler: Crawler, interval: float) -> None:
        self.crawler = crawler
        self.interval = interval
        self.janitor: Janitor | None = None
        self.scheduler: BaseScheduler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> JanitorExtension:
        check_crawl_settings(crawler.settings, crawler.spidercls)  # before the engine starts
        interval = JanitorOptions.from_settings(crawler.settings).interval
        if interval == 0:
            raise NotConfigured("DEDUP_JANITOR_INTERVAL is 0")
        ext = cls(crawler, interval)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        from apscheduler.triggers.interval import IntervalTrigger

        settings = self.crawler.settings
        backend = build_backend(settings, spider.name)
        can = backend.capabilities
        if not (can.purge_expired or can.report_fill or can.restore_expiry):
            logger.info(
                "Janitor: nothing to do for the %s dupefilter (no expiry to purge or "
                "restore, no fill to report): no passes scheduled",
                backend.name,
            )
            return
        self.janitor = Janitor.from_settings(backend, settings)
        self.scheduler = make_scheduler(blocking=False)
        self.scheduler.add_job(
            self.run_pass,
            IntervalTrigger(seconds=self.interval),
            id="dedup-janitor",
            next_run_time=datetime.now(timezone.utc),
        )
        self.scheduler.start()
        # A forced shutdown (a second Ctrl-C) stops the reactor without spider_closed:
        # the pass running then stops after its batch rather than hold the process.
        from twisted.internet import reactor  # the one Scrapy installed

        triggers: Any = reactor  # (IReactorCore's stub takes the phase for self)
        triggers.addSystemEventTrigger("before", "shutdown", self._stop)
        logger.info(
            "Janitor: a pass every %s s on the %s dupefilter at %r",
            self.interval,
            backend.name,
            backend.key,
        )

    def run_pass(self) -> JanitorReport | None:
        assert self.janitor is not None
        try:
            report = self.janitor.run_pass()
        except Exception:
            logger.exception("Janitor pass failed; the next one will try again")
            self._stats().inc_value("dedup/janitor/errors")
            return None
        record(report, self._stats())
        logger.info("Janitor: %s", report.summary())
        return report

    def _stats(self) -> Any:
        return self.crawler.stats

    def spider_closed(self, spider: Spider, reason: str) -> None:
        self._stop(wait=True)

    def _stop(self, wait: bool = False) -> None:
        """The running pass stops after its batch; the scheduler shuts down (waiting
        for that pass, at the spider's close)."""
        if self.janitor is not None:
            self.janitor.stop()
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
        self.scheduler = None


def record(report: JanitorReport, stats: Any) -> None:
    """Put a pass's figures in the crawl stats (``dedup/janitor/...``)."""
    if report.skipped:
        stats.inc_value("dedup/janitor/skipped")
        return
    stats.inc_value("dedup/janitor/passes")
    stats.inc_value("dedup/janitor/scanned", report.scanned)
    stats.inc_value("dedup/janitor/removed", report.removed)
    stats.set_value("dedup/janitor/last_pass_seconds", round(report.seconds, 3))
    stats.max_value("dedup/janitor/slowest_call_ms", round(report.slowest_call_ms, 3))
    if report.purged:
        stats.set_value("dedup/janitor/remaining", report.remaining)
    if report.restored_expiry:
        stats.inc_value("dedup/janitor/restored_expiry", len(report.restored_expiry))
    if report.filters:
        newest = report.filters[0]
        stats.set_value("dedup/janitor/fill_ratio", round(newest.fill_ratio, 6))
        stats.set_value("dedup/janitor/estimated_items", round(newest.estimated_items))
        stats.set_value("dedup/janitor/estimated_error_rate", newest.estimated_error_rate)
    if report.warnings:
        stats.inc_value("dedup/janitor/warnings", len(report.warnings))
