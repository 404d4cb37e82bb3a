"""``scrapy convert-hash-layout``: a hash filter of layout 1 (shards) into buckets, in
place (hash_layout.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any, ClassVar

from scrapy.exceptions import UsageError

from ..backends import dupefilter_key
from ..operations.migrations.hash_layout import HashLayoutConversion
from ..operations.migrations.migration_report import Progress
from ..server.connection import get_redis
from ..settings.options import HashOptions
from . import DedupCommand, add_target_options, spider_settings


class Command(DedupCommand):
    name = "convert-hash-layout"
    doing = "for the conversion"
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "INFO"}

    def syntax(self) -> str:
        return "(--spider NAME | --key KEY) [options]"

    def short_desc(self) -> str:
        return "Convert a hash filter of layout 1 (shards) into buckets, about a sixth the memory"

    def long_desc(self) -> str:
        return (
            "A hash filter created by an earlier version of this package keeps whole "
            "fingerprints in DEDUP_HASH_SHARDS hashes, about 105 bytes a fingerprint; new "
            "filters keep "
            "8 bytes of each in small buckets, about 18. This converts one in place, at the "
            "same key: it switches the filter's record and stamps to the buckets (sized from "
            "DEDUP_COMPACT_CAPACITY, which the crawl then uses too), copies every unexpired "
            "fingerprint with its expiry, verifies, and with --delete-source removes what "
            "was copied. Stop the filter's crawlers and janitor first: a worker left "
            "running on the old layout is refused from the switch on. Interrupted, it goes "
            "on where it stopped when run again. Exit codes: 0 done (or nothing to convert), "
            "1 error, 2 usage, 3 no hash filter of layout 1 at the key, 4 refused (other "
            "settings, too small a capacity), 5 verification failed, 6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_target_options(parser)
        group = parser.add_argument_group(title="How")
        group.add_argument(
            "--dry-run", action="store_true", help="report what it would do; write nothing"
        )
        group.add_argument(
            "--batch", type=int, default=1000, metavar="N", help="fields per HSCAN call"
        )
        group.add_argument(
            "--verify",
            choices=("sample", "all"),
            default="sample",
            help="check a random sample of the shards' fields (default) or all of them",
        )
        group.add_argument("--sample", type=int, default=10_000, metavar="N", help="sample size")
        group.add_argument(
            "--delete-source",
            action="store_true",
            help="after verification passes, delete from the shards every field the buckets "
            "hold or that has expired (a field with no expiry in it stays)",
        )
        group.add_argument(
            "--force",
            action="store_true",
            help="convert even if the shards hold more than DEDUP_COMPACT_CAPACITY",
        )
        group.add_argument("--json", action="store_true", help="print the report as JSON")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        self.no_arguments(args)
        if not opts.spider and not opts.key:
            raise UsageError("Say which filter: --spider NAME, or --key KEY")
        self.at_least_one(opts, "batch", "sample")
        settings = spider_settings(self.settings, opts.spider)
        server = None
        with self.refusals(settings, lambda: server):
            options = HashOptions.from_settings(settings)
            key = opts.key or dupefilter_key(settings, "hash", opts.spider)
            server = get_redis(settings)
            conversion = HashLayoutConversion(
                server,
                key,
                options,
                batch=opts.batch,
                verify=opts.verify,
                sample=opts.sample,
                force=opts.force,
                progress=Progress(name=self.name),
            )
            if opts.dry_run:
                plan = conversion.plan()
                self._out(opts, {"dry_run": True, "plan": plan.__dict__}, plan.describe())
                return
            report = conversion.run(delete_source=opts.delete_source)
            self._out(opts, report.as_dict(), report.summary())

    def _out(self, opts: argparse.Namespace, data: dict[str, Any], text: str) -> None:
        print(json.dumps(data, default=str) if opts.json else text, flush=True)
