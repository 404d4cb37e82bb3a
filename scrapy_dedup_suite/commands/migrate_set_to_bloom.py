"""``scrapy migrate-set-to-bloom``: a scrapy-redis fingerprint set into Bloom filter bits."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, ClassVar

from scrapy.exceptions import UsageError

from ..backends import MIGRATION_TARGETS, build_backend, dupefilter_key, get_backend_class
from ..backends.keys import read_hash
from ..operations.migrations.migration import SetMigration
from ..operations.migrations.migration_report import Progress
from ..settings.table import read
from . import DedupCommand, spider_settings

logger = logging.getLogger(__name__)

TARGETS = MIGRATION_TARGETS


class Command(DedupCommand):
    name = "migrate-set-to-bloom"
    doing = "for the migration"
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "INFO"}

    def syntax(self) -> str:
        return "(--spider NAME | --source KEY --target KEY) [options]"

    def short_desc(self) -> str:
        return "Convert a scrapy-redis fingerprint set into a Bloom filter (or the hash backend)"

    def long_desc(self) -> str:
        return (
            "Reads every fingerprint of a scrapy-redis dupefilter set and sets its bits in the "
            "Bloom filter the bloom (or windowed-bloom) backend will use, with the parameters "
            "of the project's settings (DEDUP_BLOOM_CAPACITY, DEDUP_BLOOM_ERROR_RATE, ...), so "
            "that the crawl filters everything the set recorded; with --to hash, into the hash "
            "backend instead (each fingerprint then stays seen for DEDUP_EXPIRE from the "
            "migration on); with --to native-bloom, into the server's own Bloom filters (BF.*: "
            "Redis 8, RedisBloom, valkey-bloom), through BF.INSERT in batches. Crawlers may keep "
            "running. "
            "Exit codes: 0 done, 1 error, 2 usage, 3 source missing or not a set, 4 target "
            "refused (other type, other parameters, too small), 5 verification failed, "
            "6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="What to migrate")
        group.add_argument(
            "--spider",
            metavar="NAME",
            help="source and target are this spider's: its set (the set backend's key) and the "
            "filter the chosen backend will use; inside a project its custom_settings apply",
        )
        group.add_argument("--source", metavar="KEY", help="the fingerprint set to read")
        group.add_argument("--target", metavar="KEY", help="the Bloom filter's base key")
        group.add_argument(
            "--to",
            choices=TARGETS,
            help="target backend (default DEDUP_BACKEND if it is one of these, else bloom); "
            "windowed-bloom fills the current bucket, hash gives each fingerprint DEDUP_EXPIRE, "
            "native-bloom writes the server's own Bloom filters (BF.*)",
        )
        group.add_argument(
            "--capacity",
            type=int,
            metavar="N",
            help="the target's capacity: DEDUP_BLOOM_CAPACITY, or DEDUP_COMPACT_CAPACITY for "
            "compact and hash",
        )
        group.add_argument(
            "--error-rate", type=float, metavar="P", help="DEDUP_BLOOM_ERROR_RATE for the target"
        )
        group = parser.add_argument_group(title="How")
        group.add_argument(
            "--dry-run",
            action="store_true",
            help="report the source, the filter it would create and the resulting "
            "false-positive rate; write nothing",
        )
        group.add_argument(
            "--batch", type=int, default=10_000, metavar="N", help="members per SSCAN call"
        )
        group.add_argument(
            "--round",
            type=int,
            default=10_000_000,
            metavar="N",
            help="members merged (and checkpointed) per round",
        )
        group.add_argument(
            "--resume", action="store_true", help="continue an interrupted run from its checkpoint"
        )
        group.add_argument(
            "--verify",
            choices=("sample", "all"),
            default="sample",
            help="check a random sample of source members (default) or all of them",
        )
        group.add_argument("--sample", type=int, default=10_000, metavar="N", help="sample size")
        group.add_argument(
            "--delete-source",
            action="store_true",
            help="after verification passes, remove from the source set every member the "
            "target is checked to hold (what was not migrated stays)",
        )
        group.add_argument(
            "--force", action="store_true", help="migrate even if the source exceeds the capacity"
        )
        group.add_argument("--json", action="store_true", help="print the report as JSON")

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        overrides = {
            "DEDUP_BLOOM_CAPACITY": opts.capacity,
            "DEDUP_COMPACT_CAPACITY": opts.capacity,  # (the target reads the one it has)
            "DEDUP_BLOOM_ERROR_RATE": opts.error_rate,
        }
        for name, given in overrides.items():
            if given is not None:
                self.settings.set(name, given, priority="cmdline")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        self.no_arguments(args)
        if not opts.spider and not (opts.source and opts.target):
            raise UsageError("Say what to migrate: --spider NAME, or --source KEY and --target KEY")
        self.at_least_one(opts, "batch", "round", "sample")
        bar = Progress()
        migration = None
        try:
            with self.refusals(
                self.settings, lambda: migration.server if migration is not None else None
            ):
                migration = self._migration(opts, bar)
                plan = migration.plan()
                if opts.dry_run:
                    text = f"target backend {self.chosen}\n{plan.describe()}"
                    self._out(opts, {"dry_run": True, "plan": plan.__dict__}, text)
                    if plan.capacity and plan.items_already + plan.new_members > plan.capacity:
                        print(
                            "warning: the source exceeds the target's capacity; the real run "
                            "refuses it without --force (set --capacity)",
                            file=sys.stderr,
                        )
                    return
                # The plan, where a person sees it (the output may be JSON): what is written,
                # where, and a word about sizing when the target is far larger than the set.
                print(f"{self.name}: target backend {self.chosen}", file=sys.stderr)
                print(plan.describe(), file=sys.stderr, flush=True)
                report = migration.run(resume=opts.resume, delete_source=opts.delete_source)
                bar(report.migrated, report.plan.members, final=True)
                self._out(opts, report.as_dict(), report.summary())
        except KeyboardInterrupt:
            self.fail(self._interrupted(migration), 130)

    def _migration(self, opts: argparse.Namespace, progress: Progress) -> SetMigration:
        assert self.settings is not None
        settings = spider_settings(
            self.settings, opts.spider, "or name the set and the filter with --source and --target"
        ).copy()
        configured = read(settings, "DEDUP_BACKEND")
        get_backend_class(configured)  # a misspelt DEDUP_BACKEND is refused, as by the crawl
        to = opts.to or (configured if configured in TARGETS else "bloom")
        self.chosen = (
            f"--to {to}"
            if opts.to
            else f"{to}: the project's DEDUP_BACKEND (--to names another)"
            if to == configured
            else f"{to}: the default of --to (the project's DEDUP_BACKEND is {configured})"
        )
        settings.set("DEDUP_BACKEND", to, priority="cmdline")
        spider = opts.spider or ""
        source = opts.source or dupefilter_key(settings, "set", spider)
        target = build_backend(settings, spider, key=opts.target)
        return SetMigration(
            target,
            source,
            batch=opts.batch,
            round_size=opts.round,
            force=opts.force,
            verify=opts.verify,
            sample=opts.sample,
            progress=progress,
        )

    @staticmethod
    def _interrupted(migration: SetMigration | None) -> str:
        """What Ctrl-C left: how far the saved checkpoint is, and how to go on."""
        saved: dict[str, str] = {}
        if migration is not None:
            try:
                saved = read_hash(migration.server, migration.state_key)
            except Exception:  # (Redis gone too: say what is known)
                saved = {}
        if migration is None or not saved:
            return "interrupted before anything was written; run the same command again"
        done = int(saved.get("migrated", 0) or 0)
        stage = "all read, not yet verified" if saved.get("scanned") else "read so far"
        return (
            f"interrupted: {done:,} fingerprints {stage}, saved in {migration.state_key!r}; "
            "run the same command with --resume to go on from there"
        )

    def _out(self, opts: argparse.Namespace, data: dict[str, Any], text: str) -> None:
        print(json.dumps(data, default=str) if opts.json else text, flush=True)
