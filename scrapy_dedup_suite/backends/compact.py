"""``compact``: exact dedup that never expires, in small hash buckets: about 13 bytes a
fingerprint where scrapy-redis's set takes 62-88.

Each fingerprint string is hashed (SHA1, whatever fingerprinter made it): the first 4
bytes of the digest choose one of ``buckets`` hashes, the next 8 bytes are the field
there, with an empty value. Redis keeps a hash of up to ``hash-max-listpack-entries``
small fields (512 by default, also on managed servers that do not let it be changed) as
one compact listpack, about 10 bytes a field; past it, the hash becomes a hashtable of
about 60 bytes a field. So the bucket count is fixed when the filter is created, from
DEDUP_COMPACT_CAPACITY and the server's limit (read then): buckets average half the limit
at capacity. Past capacity answers stay exact; buckets leave the listpack encoding
one by one, and a WARNING (at open, and in ``scrapy dedup-info``) says so.

Exact in the sense users mean: a new fingerprint is taken as seen only when its bucket
and its 64 field bits both equal a stored fingerprint's, about
``n / (buckets * 2**64)`` for ``n`` stored (below 10**-16 per request at 10**9
fingerprints in 2**22 buckets).

The buckets are spread over DEDUP_HASH_SHARDS groups; bucket ``b`` is in group
``b % shards`` and its key is ``{<key>:<group>}:<b>``, so a page's links touch at most
``shards`` cluster slots, and each group has a stamp in its slot (lua/stamp.lua). The
parameter record is ``<key>:meta``. A request is one call of ``compact_add.lua`` (HEXISTS,
then the stamp and HSET), as scrapy-redis's is one SADD; a batch is one such call per
slot. There are too many
buckets to list at every open: open checks the record and the stamps, and
:meth:`CompactBackend.bucket_keys` lists the buckets for ``clear()`` and ``count()``.
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, fields, replace
from typing import Any

from scrapy.settings import BaseSettings

from ..exceptions import DedupConfigError
from ..server import scripts
from ..server.cluster import is_cluster, nodes_of
from ..settings.options import CompactOptions
from ..settings.table import GROUPS, check, default
from . import admission
from .base import DedupBackend
from .compact_growing import CompactKind, GrowingCompactBackend, held_buckets
from .forget import remove
from .groups import groups_for, stored_shape
from .keys import BATCH, as_str, chunks, keys_held, memory_usage, meta_key, scan_keys
from .layout import BUCKET_BYTES, FIELD_BYTES, Buckets
from .listpack import BYTES_PER_FINGERPRINT, UNKNOWN_LISTPACK_ENTRIES, listpack_limits
from .meta import stored_parameters
from .reports import CompactBuckets, Contents, FilterInfo, Holding

logger = logging.getLogger(__name__)

#: The most buckets (what BUCKET_BYTES can choose from).
MAX_BUCKETS = 2 ** (8 * BUCKET_BYTES)
#: Buckets sampled at open and by ``dedup-info`` to estimate the fill and the memory.
SAMPLE = 256


def bucket_count(capacity: int, entries: int, shards: int) -> int:
    """Buckets so that ``capacity`` fingerprints average half of ``entries`` a bucket."""
    per_bucket = max(1, entries // 2)
    return int(max(shards, min(MAX_BUCKETS, math.ceil(capacity / per_bucket))))


class Again(Iterable[list[str]]):
    """What ``listed()`` yields, listed anew at each iteration."""

    def __init__(self, listed: Callable[[], Iterator[list[str]]]) -> None:
        self.listed = listed

    def __iter__(self) -> Iterator[list[str]]:
        return self.listed()


class EmptyFields(Buckets):
    """compact's layout: the fields' values are empty (the check-and-add of a request and
    of a batch: one call that writes the stamp beside what it records)."""

    add_script = scripts.COMPACT_ADD
    contains_script = scripts.COMPACT_CONTAINS


class CompactBackend(CompactKind):
    capabilities = CompactKind.CAPABILITIES

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        capacity: int = default("DEDUP_COMPACT_CAPACITY"),
        shards: int = GROUPS,
        buckets: int | None = None,
    ) -> None:
        """``buckets``: None for the count the stored filter was created with, or (a new
        filter) the count ``capacity`` and the server's listpack limit give."""
        super().__init__(server, key)
        self.capacity = check("DEDUP_COMPACT_CAPACITY", capacity)
        if self.capacity == 0:  # (from_settings builds the growing layout for it)
            raise DedupConfigError(
                f"{type(self).__name__} is the {self.name} backend's sized layout and "
                "DEDUP_COMPACT_CAPACITY = 0 has none: build it from settings (the growing "
                "layout), or set DEDUP_COMPACT_CAPACITY = 10000000 (or the crawl's size, from 1000)"
            )
        self.shards = check("DEDUP_HASH_SHARDS", shards)
        self.meta_key = meta_key(key)
        self.layout: Buckets = self.make_layout()
        self.layout.buckets = buckets or 0
        self.stamp_keys = self.layout.stamp_keys
        self._prefixes = self.layout.prefixes
        #: The server's listpack limits (entries, value), read once an open (None: CONFIG
        #: refused), and whether they have been read.
        self.limits: tuple[int, int] | None = None
        self._limits_read = False

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> DedupBackend:
        """DEDUP_COMPACT_CAPACITY 0: the growing layout for a new filter; a capacity: the
        sized layout. A stored filter keeps its layout, as its record (else its stamps)
        says: sized with its capacity when the setting is 0, growing whatever the
        setting (converted, ``scrapy convert-to-growing``, under a running crawl), and
        its groups where DEDUP_HASH_SHARDS is unset (:mod:`.groups`). No Redis (a
        settings check): the settings are checked only."""
        options = CompactOptions.from_settings(settings)
        capacity = options.capacity
        stored = None
        if cls is CompactBackend and server is not None:
            stored = stored_shape(server, key, options.shards)
            if stored is not None and (stored.capacity == 0 or capacity == 0):
                capacity = stored.capacity
        shards = groups_for(server, options.shards, stored, capacity == 0)
        if capacity == 0 and cls is CompactBackend:
            return GrowingCompactBackend(server, key, shards=shards)
        return cls(server, key, capacity=capacity, shards=shards)

    def with_key(self, key: str) -> DedupBackend:
        return CompactBackend(self.server, key, capacity=self.capacity, shards=self.shards)

    def make_layout(self) -> Buckets:
        """Where the fingerprints live (the bucket count found at the first use)."""
        return EmptyFields(self.key, self.shards, self.resolve_buckets)

    # -- the layout --------------------------------------------------------------------

    def read_limits(self) -> tuple[int, int] | None:
        self.limits = listpack_limits(self.server)
        self._limits_read = True
        return self.limits

    @property
    def listpack_entries(self) -> int | None:
        """The server's ``hash-max-listpack-entries`` (None: unknown)."""
        if not self._limits_read:
            self.read_limits()
        return self.limits[0] if self.limits is not None else None

    @property
    def buckets(self) -> int:
        """How many buckets (see :meth:`resolve_buckets`, at the first use)."""
        return self.layout.buckets or self.resolve_buckets()

    def locate(self, fingerprint: str) -> tuple[int, bytes]:
        """The bucket that holds ``fingerprint`` and its field there."""
        return self.layout.locate(fingerprint)

    def bucket_key(self, bucket: int) -> str:
        return self.layout.bucket_key(bucket)

    def bucket_keys(self) -> Iterator[list[str]]:
        """The keys of the buckets that may exist, in lists of up to BATCH, each within
        one group (slot): every bucket by number, or, for a filter sized for more buckets
        than its server holds keys, the buckets that exist (found by SCAN), so that
        ``clear()`` and ``count()`` cost what exists, not what a capacity allows."""
        if self.buckets <= keys_held(self.server):
            for group in range(self.shards):
                yield from chunks(
                    (self.bucket_key(b) for b in range(group, self.buckets, self.shards)), BATCH
                )
            return
        found: list[list[str]] = [[] for _ in range(self.shards)]
        shared = os.path.commonprefix(self._prefixes)  # noqa: RUF071 - key names, not paths
        for key in scan_keys(self.server, shared):
            number = self.bucket_of(key)
            if number is not None:
                found[number % self.shards].append(key)
        for keys in found:
            yield from chunks(sorted(keys), BATCH)

    def bucket_of(self, key: str) -> int | None:
        """The number of the bucket at ``key``, or None if ``key`` is not one of its buckets."""
        for prefix in self._prefixes:
            rest = key[len(prefix) :]
            if key.startswith(prefix) and rest.isdigit():
                number = int(rest)
                if number < self.buckets and self._prefixes[number % self.shards] == prefix:
                    return number
        return None

    def resolve_buckets(self) -> int:
        """The bucket count of the stored filter (its record, else its stamps) when it
        was sized for this capacity; else the count this capacity and the server's
        listpack limit give (a new filter, or one the record refuses at open)."""
        stored = stored_parameters(self.server, self.meta_key, self.stamp_keys)
        adopted = [
            int(said["buckets"])
            for said in stored
            if said.get("backend") == self.name
            and said.get("sized_for") == str(self.capacity)
            and said.get("buckets", "").isdigit()
        ]
        if adopted:
            buckets = adopted[0]
        else:
            entries = self.listpack_entries
            entries = entries if entries is not None else UNKNOWN_LISTPACK_ENTRIES
            buckets = bucket_count(self.capacity, entries, self.shards)
        if buckets != self.layout.buckets:
            self.layout.buckets = buckets
            self._stamp = None  # the stamp names the bucket count
        return buckets

    def shape(self) -> dict[str, str]:
        return {"sized_for": str(self.capacity), "buckets": str(self.buckets)}

    # -- life cycle ----------------------------------------------------------------------

    def _open(self) -> None:
        self.read_limits()  # once an open: the sizing of a new filter and _prepare's checks
        self.resolve_buckets()
        super()._open()

    def verify(self) -> bool:
        self.resolve_buckets()
        return super().verify()

    def _prepare(self) -> None:
        warning = self.encoding_warning(self.limits)
        if warning is None and self.held_data:
            warning = self.outgrown_warning(self.sample())
        elif warning is None:  # a new filter: can its server ever hold its capacity?
            needed = int(self.capacity * self.expected_bytes_per_fingerprint())
            warning = admission.room_warning(self, needed, "DEDUP_COMPACT_CAPACITY", self.capacity)
        if warning is not None:
            logger.warning("%s%s.", warning[0].upper(), warning[1:])

    def outgrown_warning(self, sample: CompactBuckets) -> str | None:
        """What to say at open when sampled buckets left the compact encoding, else None."""
        return sample.warning(self.key, self.name)

    def encoding_warning(self, limits: tuple[int, int] | None) -> str | None:
        """What to say when the server's listpack limits cannot hold this filter's
        buckets (changed since it was created, or another server), else None."""
        if limits is None:
            return None
        entries, value = limits
        if value < FIELD_BYTES:
            return (
                f"the Redis server's hash-max-listpack-value is {value}: the compact filter "
                f"at {self.key!r} keeps {FIELD_BYTES}-byte fields, so every bucket is a "
                "hashtable (about 5x the memory). Set hash-max-listpack-value to 64 (the "
                "default) on the server"
            )
        per_bucket = self.capacity / self.buckets
        if per_bucket > entries * 0.75:
            return (
                f"the Redis server's hash-max-listpack-entries is {entries}, and the compact "
                f"filter at {self.key!r} was sized for buckets of {per_bucket:,.0f} "
                "fingerprints at capacity: its fuller buckets will be hashtables (about 5x "
                "the memory). Raise hash-max-listpack-entries to 512 (the default), or "
                "create a new filter on this server (another SCHEDULER_DUPEFILTER_KEY)"
            )
        return None

    def forget_many(self, fingerprints: Iterable[str]) -> int:
        located = (self.locate(fp) for fp in fingerprints)
        return remove(self.server, "HDEL", ((self.bucket_key(b), f) for b, f in located))

    def count(self) -> int:
        """The fields of every bucket that may exist (HLEN alone: :meth:`bucket_keys`)."""
        return sum(held_buckets(self.server, keys)[1] for keys in self.bucket_keys())

    def census(self) -> tuple[int, int, int]:
        """The buckets that exist, the fingerprints they hold and their memory: HLEN of
        every bucket that may exist (:meth:`bucket_keys`: what exists, at any capacity),
        then MEMORY USAGE of each that does (what exists, not what a capacity allows)."""
        buckets = fields_ = memory = 0
        for keys in self.bucket_keys():
            held, count = held_buckets(self.server, keys)
            buckets += len(held)
            fields_ += count
            memory += memory_usage(self.server, held)
        return buckets, fields_, memory

    # -- keys ------------------------------------------------------------------------------

    def owned_keys(self) -> list[str]:
        """The buckets, the stamps and the record (the buckets are too many to check at
        every open: :meth:`expected_types` is the record and the stamps)."""
        return [key for keys in self.bucket_keys() for key in keys] + [
            *self.stamp_keys,
            self.meta_key,
        ]

    def expected_types(self) -> dict[str, str]:
        return {**dict.fromkeys(self.stamp_keys, "string"), self.meta_key: "hash"}

    def fingerprint_types(self, fingerprint: str) -> dict[str, str]:
        bucket = self.locate(fingerprint)[0]
        return {self.stamp_keys[bucket % self.shards]: "string", self.bucket_key(bucket): "hash"}

    def stamp_of(self, data_key: str) -> str | None:
        if data_key in self.stamp_keys:
            return data_key
        for prefix, stamp in zip(self._prefixes, self.stamp_keys):
            if data_key.startswith(prefix) and data_key[len(prefix) :].isdigit():
                return stamp
        return None

    def buckets_to_clear(self) -> Iterable[list[str]]:
        return Again(self.bucket_keys)  # (too many, it may be, to keep: listed again)

    # -- reports ---------------------------------------------------------------------------

    def sample(self) -> CompactBuckets:
        """Up to SAMPLE random buckets measured (fields, MEMORY USAGE, encoding), and
        what they say of the whole filter."""
        picked = random.sample(range(self.buckets), min(SAMPLE, self.buckets))
        pipe = self.server.pipeline(transaction=False)
        for bucket in picked:
            key = self.bucket_key(bucket)
            pipe.hlen(key)
            pipe.execute_command("MEMORY USAGE", key, "SAMPLES", "0")
            pipe.execute_command("OBJECT", "ENCODING", key)
        answers = pipe.execute(raise_on_error=False)
        lengths = [int(n) for n in answers[0::3]]
        memory = [int(m) if isinstance(m, int) else 0 for m in answers[1::3]]
        encodings = [as_str(e) for e in answers[2::3] if isinstance(e, (bytes, str))]
        return CompactBuckets(
            buckets=self.buckets,
            shards=self.shards,
            capacity=self.capacity,
            listpack_entries=self.listpack_entries,
            sampled=len(picked),
            sampled_fields=sum(lengths),
            sampled_memory=sum(memory),
            occupied=sum(1 for n in lengths if n),
            hashtables=sum(1 for e in encodings if e == "hashtable"),
        )

    def expected_bytes_per_fingerprint(self) -> float:
        """Redis memory a fingerprint takes in buckets that stay listpacks (measured)."""
        return BYTES_PER_FINGERPRINT

    def holding(self) -> Holding:
        per = self.expected_bytes_per_fingerprint()
        return Holding(float(self.count()), self.shards, self.capacity, per)

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        info = self.info() if info is None else info
        return [CompactBuckets(**{f.name: info[f.name] for f in fields(CompactBuckets)})]

    def info(self) -> FilterInfo:
        """As every backend's: the buckets that exist counted and measured (their
        fingerprints, MEMORY USAGE), their encoding read on a sample."""
        buckets, held, buckets_memory = self.census()
        sample = replace(
            self.sample(), counted_buckets=buckets, counted_fields=held, memory=buckets_memory
        )
        small = [*self.stamp_keys, self.meta_key]
        memory = memory_usage(self.server, small) + buckets_memory
        # On a cluster, which master holds how many groups of buckets (their stamps' slots).
        nodes = nodes_of(self.server, self.stamp_keys) if is_cluster(self.server) else None
        details = {
            "fields": held,
            "expected_bytes_per_fingerprint": self.expected_bytes_per_fingerprint(),
            **asdict(sample),  # buckets, shards, capacity, what was sampled
        }
        return FilterInfo(self.name, self.key, len(small) + buckets, memory, nodes, details)
