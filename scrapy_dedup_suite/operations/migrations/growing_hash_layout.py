"""Convert a sized ``hash`` filter (its buckets, the janitor's expiry) into the growing
layout at the same key, in place: ``scrapy convert-to-growing`` on a hash filter.

As compact's (growing_layout.py), with each field's expiry kept: a sized bucket's value
is the field's expiry in Unix seconds, and the copy gives the growing filter each
fingerprint's seconds from now by the server's clock (read with each pipeline of
buckets), so that it stores the same second. A field whose expiry has passed is not
copied (the janitor would have purged it), and ``--delete-source`` deletes it with what
was copied. A filter whose fields the server expires itself (hash-field expiry) has
no expiry to read in its values: it is refused, as the growing layout takes the
janitor's expiry only.
"""

from __future__ import annotations

from typing import Any

from ...backends.expiry import BY_SERVER
from ...backends.growing import field_name
from ...backends.hash_buckets import HashBucketsBackend
from ...backends.hash_growing import BYTES_PER_FINGERPRINT, GrowingHashBackend
from ...backends.layout import FIELD_BYTES
from ...settings.options import HashOptions
from .errors import TargetError
from .growing_layout import Entries, GrowingConversion

#: Milliseconds taken off a field's time left, so that the growing filter, which rounds
#: an expiry up to the second from its own (later) clock, stores the same second.
ROUNDING_MS = 999


class GrowingHashConversion(GrowingConversion):
    """Convert the sized hash filter at ``key`` into the growing layout."""

    backend = "hash"
    bytes_per_fingerprint = BYTES_PER_FINGERPRINT

    def __init__(self, server: Any, key: str, options: HashOptions, **how: Any) -> None:
        super().__init__(server, key, options, **how)
        self.expire = options.expire

    def sized(self, capacity: int, buckets: int | None) -> HashBucketsBackend:
        backend = HashBucketsBackend(
            self.server,
            self.key,
            expire=self.expire,
            capacity=capacity or 1_000,
            shards=self.shards,
            buckets=buckets,
        )
        if backend.resolve_expiry() is BY_SERVER:
            raise TargetError(
                f"The hash filter at {self.key!r} lets the server expire its fields (hash-field "
                "expiry), and buckets that split keep each expiry as the field's value for the "
                "janitor: it cannot be converted. Keep it sized, or start a new filter at "
                "another SCHEDULER_DUPEFILTER_KEY with DEDUP_COMPACT_CAPACITY = 0."
            )
        return backend

    def growing(self, grouped_by: int | None = None) -> GrowingHashBackend:
        return GrowingHashBackend(
            self.server, self.key, expire=self.expire, shards=self.shards, grouped_by=grouped_by
        )

    def entries(self, group: int, fields: dict[bytes, bytes], now_ms: int) -> Entries:
        """Each 8-byte field whose value is an expiry not passed, with its seconds left;
        the expired ones; the others (set aside, as the janitor leaves them)."""
        out = Entries([], [], [], 0)
        for field, value in fields.items():
            if len(field) != FIELD_BYTES or not value.isdigit():
                out.others += 1
            elif int(value) * 1000 <= now_ms:
                out.expired.append(field)
            else:
                out.names.append(field_name(group, field))
                left = int(value) * 1000 - now_ms - ROUNDING_MS
                out.expires.append(max(1, left) / 1000)
        return out
