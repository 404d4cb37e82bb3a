"""``scrapy dedup-janitor``: run janitor passes as a service, or one pass (``--once``)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
from typing import Any, ClassVar

from scrapy.exceptions import UsageError
from scrapy.utils.log import configure_logging

from ..core import config
from ..operations.janitor import Janitor, make_scheduler
from ..operations.janitor_report import JanitorReport
from ..server.connection import UNREACHABLE, redis_source, unreachable
from ..settings.options import JanitorOptions
from . import DedupCommand, add_target_options, settings_value, target_backend

logger = logging.getLogger(__name__)


class Command(DedupCommand):
    name = "dedup-janitor"
    doing = "for the janitor"
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "INFO"}

    def syntax(self) -> str:
        return "--spider NAME [--once] [--interval SECONDS | --cron EXPR] [options]"

    def short_desc(self) -> str:
        return "Purge expired fingerprints (hash backend) and report on Bloom filters"

    def long_desc(self) -> str:
        return (
            "Runs janitor passes on a dupefilter: deletes the fingerprints of the hash backend "
            "whose expiry has passed, in small batches and never one a crawler refreshed; "
            "reports fill and false-positive rate of the Bloom backends and restores lost "
            "bucket expiries of windowed-bloom. Runs every DEDUP_JANITOR_INTERVAL seconds "
            "(or on DEDUP_JANITOR_CRON) until stopped, or once with --once (for cron or a "
            "Kubernetes CronJob). Only one pass runs at a time per dupefilter. Exit codes: 0 "
            "done, 1 error, 2 usage, 6 Redis unreachable (with --once; a running janitor logs "
            "it and tries again at the next pass)."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_target_options(parser)
        group = parser.add_argument_group(title="Janitor")
        group.add_argument("--once", action="store_true", help="run one pass and exit")
        group.add_argument(
            "--interval", type=float, metavar="SECONDS", help="seconds between passes"
        )
        group.add_argument(
            "--cron", metavar="EXPR", help='crontab expression instead, e.g. "*/10 * * * *"'
        )
        group.add_argument(
            "--batch",
            type=int,
            metavar="N",
            # No colon in help texts: Scrapy's help formatter takes a line that ends
            # with one for a heading.
            help="hash fields per Redis call (default DEDUP_JANITOR_BATCH, 200)",
        )
        group.add_argument("--json", action="store_true", help="print each report as JSON")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        self.no_arguments(args)
        backend = None
        with self.refusals(self.settings, lambda: backend.server if backend is not None else None):
            settings, backend = target_backend(self.settings, opts)
            janitor = Janitor(
                backend,
                batch=settings_value(settings, "DEDUP_JANITOR_BATCH", opts.batch),
                lock_timeout=settings_value(settings, "DEDUP_JANITOR_LOCK_TIMEOUT", None),
            )
            if opts.once:
                report = janitor.run_pass()
                self._print(report, opts)
                return
            self._serve(janitor, settings, opts)

    def _print(self, report: JanitorReport, opts: argparse.Namespace) -> None:
        if opts.json:
            print(json.dumps(report.as_dict()), flush=True)
        else:
            print(report.summary(), flush=True)
            for warning in report.warnings:
                print(f"warning: {warning}", flush=True)

    def _serve(self, janitor: Janitor, settings: Any, opts: argparse.Namespace) -> None:
        # A service's log: Scrapy's format (timestamps) and LOG_LEVEL, as a crawl's (Scrapy
        # configures logging for the commands that crawl only).
        configure_logging(settings)
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.interval import IntervalTrigger

        cron = opts.cron if opts.cron is not None else JanitorOptions.from_settings(settings).cron
        if cron:
            try:
                trigger = CronTrigger.from_crontab(cron, timezone="UTC")
            except ValueError as exc:
                raise UsageError(
                    f"--cron / DEDUP_JANITOR_CRON {cron!r} is not valid: {exc}"
                ) from None
            when = f"on cron {cron!r} (UTC)"
        else:
            interval = config.check_float(
                "DEDUP_JANITOR_INTERVAL",
                settings_value(settings, "DEDUP_JANITOR_INTERVAL", opts.interval),
                low=0.0,
                high=10 * 365 * 86400.0,
                low_open=True,
                high_open=False,
                allowed="a number of seconds > 0",
            )
            trigger = IntervalTrigger(seconds=interval)
            when = f"every {interval:g} s"
        scheduler = make_scheduler(blocking=True)

        def run_pass() -> None:
            try:
                self._print(janitor.run_pass(), opts)
            except UNREACHABLE as exc:
                error = unreachable(
                    janitor.backend.server, exc, redis_source(settings), "for a janitor pass"
                )
                logger.error("%s The next pass will try again.", error)
            except Exception:
                logger.exception("Janitor pass failed; the next one will try again")

        def stop(signum: int, frame: Any) -> None:
            janitor.stop()
            scheduler.shutdown(wait=False)

        scheduler.add_job(run_pass, trigger, id="dedup-janitor")
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        logger.info(
            "Janitor for %r running %s; stop with Ctrl-C or SIGTERM", janitor.backend.key, when
        )
        run_pass()
        scheduler.start()
