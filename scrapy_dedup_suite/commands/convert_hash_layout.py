"""``scrapy convert-hash-layout``: a hash filter of layout 1 (shards) into buckets, in
place (hash_layout.py)."""

from __future__ import annotations

import argparse
from typing import Any

from scrapy.settings import Settings

from ..operations.migrations.hash_layout import HashLayoutConversion
from ..settings.options import HashOptions
from . import ConversionCommand


class Command(ConversionCommand):
    name = "convert-hash-layout"
    backend = "hash"
    verifies = "the shards' fields"
    deletes = (
        "from the shards every field the buckets hold or that has expired (a field with no "
        "expiry in it stays)"
    )

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
            "settings, too small a capacity, or the filter refused the copy), 5 verification "
            "failed, 6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        self.how.add_argument(
            "--force",
            action="store_true",
            help="convert even if the shards hold more than DEDUP_COMPACT_CAPACITY",
        )

    def conversion(self, server: Any, key: str, settings: Settings, **how: Any) -> Any:
        options = HashOptions.from_settings(settings)
        return HashLayoutConversion(server, key, options, force=self.opts.force, **how)
