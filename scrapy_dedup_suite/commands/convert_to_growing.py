"""``scrapy convert-to-growing``: a sized compact or hash filter into buckets that split
as it grows, in place (growing_layout.py, growing_hash_layout.py)."""

from __future__ import annotations

from typing import Any

from scrapy.settings import Settings

from ..backends.groups import stored_shape
from ..operations.migrations.growing_hash_layout import GrowingHashConversion
from ..operations.migrations.growing_layout import GrowingConversion
from ..settings.options import CompactOptions, HashOptions
from ..settings.table import read
from . import ConversionCommand


class Command(ConversionCommand):
    name = "convert-to-growing"
    backend = "compact"
    verifies = "the sized buckets' fields"
    deletes = "from the sized buckets every field the growing ones hold"

    def short_desc(self) -> str:
        return (
            "Convert a compact or hash filter sized for a capacity into buckets that split as "
            "it grows"
        )

    def long_desc(self) -> str:
        return (
            "A compact or hash filter created with DEDUP_COMPACT_CAPACITY has as many buckets "
            "as that "
            "capacity needs from the start: far below it, a key per fingerprint; past it, "
            "buckets that leave the server's compact encoding. This converts one in place, "
            "at the same key, into the layout DEDUP_COMPACT_CAPACITY = 0 creates: it switches "
            "the filter's record and stamps (a worker running the sized layout opens it "
            "again as growing and goes on), copies every fingerprint, verifies, and with "
            "--delete-source removes what was copied. A worker that opens it before the copy "
            "passed a fingerprint fetches its page once more. Interrupted, it goes on where "
            "it stopped when run again. A hash filter keeps each fingerprint's expiry (one "
            "whose fields the server expires is refused). Exit codes: 0 done (or nothing to "
            "convert), 1 error, 2 usage, 3 no compact or hash filter at the key, 4 refused "
            "(other settings, or the filter refused the copy), 5 verification failed, 6 "
            "Redis unreachable."
        )

    def backend_for(self, settings: Settings) -> str:
        """hash where DEDUP_BACKEND says so, else compact."""
        return "hash" if read(settings, "DEDUP_BACKEND") == "hash" else "compact"

    def conversion(self, server: Any, key: str, settings: Settings, **how: Any) -> Any:
        """The hash filter's conversion where the key holds one (or, holding nothing,
        where DEDUP_BACKEND says hash), else compact's."""
        options = HashOptions.from_settings(settings)
        stored = stored_shape(server, key, options.shards, "hash")
        if stored is not None:
            return GrowingHashConversion(server, key, options, found=stored, **how)
        stored = stored_shape(server, key, options.shards)
        if stored is None and self.backend_for(settings) == "hash":
            return GrowingHashConversion(server, key, options, **how)
        compact = CompactOptions.from_settings(settings)
        return GrowingConversion(server, key, compact, found=stored, **how)
