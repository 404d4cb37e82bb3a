"""Typed reports of a Bloom filter's fill, and the one place they are put in words.

A backend that declares ``report_fill`` returns a :class:`FilterFill` per filter
(the whole filter, or each time bucket) from ``filter_reports()``; the janitor,
``scrapy dedup-info`` and the closing summary read its fields and print
:meth:`FilterFill.describe`, instead of each probing a dict for keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Union

from .growing_report import GrowingBuckets

#: What a layer's report keeps of a scalable filter's layer report.
LAYER_FIELDS = ("layer", "capacity", "items", "fill_ratio", "estimated_error_rate", "blocks_using")


@dataclass(frozen=True)
class LayerFill:
    """One layer of a scalable filter (over its blocks)."""

    layer: int
    capacity: int
    items: int
    fill_ratio: float
    estimated_error_rate: float
    blocks_using: int

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> LayerFill:
        return cls(**{name: report[name] for name in LAYER_FIELDS})

    def describe(self) -> str:
        return (
            f"layer {self.layer} holds {self.items:,} of {self.capacity:,} items "
            f"({self.fill_ratio:.0%} of its bits set)"
        )


@dataclass(frozen=True)
class FilterFill:
    """One Bloom filter: how full it is and the false-positive rate that implies,
    against what it was sized for (``capacity`` at ``error_rate``)."""

    fill_ratio: float
    estimated_items: float
    estimated_error_rate: float
    over_capacity: bool
    capacity: int
    error_rate: float
    #: A time bucket's label ("" for a filter without buckets) and its expiry in ms.
    label: str = ""
    ttl_ms: int | None = None
    #: A scalable filter's layers in use (empty for a fixed filter).
    layers: tuple[LayerFill, ...] = ()

    @classmethod
    def of(
        cls, report: Mapping[str, Any], capacity: int, error_rate: float, **where: Any
    ) -> FilterFill:
        """From a shape's or a server filter's report (``fill_report`` and the like)."""
        return cls(
            fill_ratio=report["fill_ratio"],
            estimated_items=report["estimated_items"],
            estimated_error_rate=report["estimated_error_rate"],
            over_capacity=bool(report["over_capacity"]),
            capacity=capacity,
            error_rate=error_rate,
            layers=tuple(LayerFill.of(layer) for layer in report.get("layers", ())),
            **where,
        )

    @property
    def past_capacity(self) -> bool:
        """Fuller than it was sized for: new requests may be taken for duplicates."""
        return self.over_capacity or self.estimated_error_rate > self.error_rate

    def describe(self) -> str:
        """One line: what it holds and its false-positive rate now."""
        label = f" bucket {self.label}" if self.label else ""
        if self.ttl_ms is not None and self.ttl_ms >= 0:
            label += f" (expires in {self.ttl_ms / 1000:,.0f} s)"
        if self.layers:
            layers = ", ".join(layer.describe() for layer in self.layers)
            return (
                f"scalable filter{label}: about {self.estimated_items:,.0f} items in "
                f"{len(self.layers)} layer(s) ({layers}), false-positive rate now "
                f"{self.estimated_error_rate:.3g}"
            )
        return (
            f"filter{label}: fill {self.fill_ratio:.2%}, about {self.estimated_items:,.0f} "
            f"items, false-positive rate now {self.estimated_error_rate:.3g}"
        )

    def warning(self, key: str) -> str:
        """What to tell an operator when it is :attr:`past_capacity`."""
        where = f" (bucket {self.label})" if self.label else ""
        return (
            f"the Bloom filter at {key!r}{where} holds about {self.estimated_items:,.0f} "
            f"items, past its capacity of {self.capacity:,}: its false-positive rate is now "
            f"about {self.estimated_error_rate:.3g} (designed {self.error_rate}); new requests "
            "are being filtered as duplicates. Size a new filter with a larger "
            "DEDUP_BLOOM_CAPACITY"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Holding:
    """What a filter holds and how it is laid out (``DedupBackend.holding()``): what a
    migration into it plans with."""

    #: Fingerprints held: counted (an exact filter) or estimated (a Bloom filter).
    fingerprints: float
    #: The keys (shards, blocks, groups of buckets) they are spread over.
    keys: int
    #: What the filter was sized for; 0: no capacity (it grows, or has no size).
    capacity: int = 0
    #: Redis memory a fingerprint is expected to take there, when it is known.
    bytes_per_fingerprint: float | None = None
    #: The false-positive rate it was designed for (0: an exact filter).
    error_rate: float = 0.0
    #: Redis memory the whole filter takes once allocated (0: it grows with what it holds).
    memory_bytes: int = 0
    #: How a Bloom filter of the server's grows ("expansion 2", "NONSCALING"), if it is one.
    growth: str = ""
    #: A Bloom filter's false-positive rate once it holds n fingerprints.
    rate_at: Callable[[float], float] | None = None


@dataclass
class FilterInfo(Mapping[str, Any]):
    """What an operator wants to know of a filter (``DedupBackend.info()``): what every
    backend says, typed (what the summary and ``dedup-info`` read), and ``details``, the
    backend's own figures (its parameters, counts, fill), shown as they are. Read by
    attribute; also a mapping of both, as ``dedup-info --json`` prints it."""

    backend: str
    key: str
    #: How many Redis keys the filter takes now, its record included ("keys").
    key_count: int
    #: Their memory (MEMORY USAGE, or estimated from a sample where they are too many).
    memory_bytes: int
    #: On a cluster, how many of those keys each master holds.
    nodes: dict[str, int] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Both, as printed: what every backend says first; ``details`` cannot shadow it."""
        out: dict[str, Any] = {"backend": self.backend, "key": self.key, "keys": self.key_count}
        out["memory_bytes"] = self.memory_bytes
        if self.nodes is not None:
            out["nodes"] = self.nodes
        out.update((name, value) for name, value in self.details.items() if name not in out)
        return out

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


# -- what a filter holds, for dedup-info (DedupBackend.contents) -------------------------


@dataclass(frozen=True)
class Fingerprints:
    """An exact set of fingerprints."""

    count: int

    def describe(self) -> list[str]:
        return [f"{self.count:,} fingerprints (exact)"]


@dataclass(frozen=True)
class ExpirySample:
    """Of ``sampled`` random fields (each holding its expiry), how many have expired,
    and in how many seconds the last of them expires."""

    sampled: int
    expired: int
    last_expiry_s: float


@dataclass(frozen=True)
class HashFields:
    """Fingerprints as hash fields, each with its expiry, over ``shards`` hashes."""

    fields: int
    shards: int
    expired_by: str  # "server" (hash-field expiry) or "janitor"
    expire: float  # seconds new fields get (DEDUP_EXPIRE as configured now)
    sample: ExpirySample | None = None  # (where the janitor purges them)
    in_buckets: bool = False  # the bucket layout: ``fields`` is estimated from a sample
    counted: bool = False  # (in buckets) every bucket counted: ``fields`` is exact

    def describe(self) -> list[str]:
        freed = (
            "the server frees expired ones itself (hash-field expiry)"
            if self.expired_by == "server"
            else "the janitor purges expired ones"
        )
        about = "" if self.counted else "about "
        where = (
            f"{about}{self.fields:,} fields in buckets over {self.shards} group(s)"
            if self.in_buckets or self.counted
            else f"{self.fields:,} fields in {self.shards} shard(s)"
        )
        lines = [f"{where} ({freed})"]
        if self.sample is not None and self.sample.sampled:
            lines.append(
                f"of {self.sample.sampled:,} sampled, {self.sample.expired:,} expired; the "
                f"last expires in {self.sample.last_expiry_s:,.0f} s"
            )
        lines.append(
            f"each field keeps the expiry it was written with; new ones get {self.expire:g} s "
            "(DEDUP_EXPIRE as configured now, or meta['dedup_expire'])"
        )
        return lines


@dataclass(frozen=True)
class BloomSizing:
    """What a Bloom filter (per time bucket, in a windowed one) was sized for."""

    capacity: int
    error_rate: float
    blocks: int
    per_bucket: bool = False

    def describe(self) -> list[str]:
        each = " per bucket" if self.per_bucket else ""
        return [
            f"capacity {self.capacity:,}{each} at error rate {self.error_rate:.3g}, "
            f"{self.blocks} block(s)"
        ]


@dataclass(frozen=True)
class ServerFilters:
    """The server's own Bloom filters (BF.*): their growth and present room."""

    expansion: int  # 0: NONSCALING
    sub_filters: int  # the most any block has
    capacity_now: int

    def describe(self) -> list[str]:
        growth = f"expansion {self.expansion}" if self.expansion else "NONSCALING"
        return [
            f"the server's own Bloom filters (BF.*), {growth}: up to {self.sub_filters} "
            f"sub-filter(s) per block, room for {self.capacity_now:,} items"
        ]


@dataclass(frozen=True)
class TimeWindow:
    """A windowed filter's buckets."""

    count: int
    window: str  # "hour", "day", "month" or "<n>s"
    tz: str

    def describe(self) -> list[str]:
        return [f"{self.count} buckets of one {self.window} ({self.tz})"]


@dataclass(frozen=True)
class CompactBuckets:
    """A compact filter's buckets, measured on a random sample of them."""

    buckets: int
    shards: int
    capacity: int  # fingerprints it was sized for (DEDUP_COMPACT_CAPACITY)
    listpack_entries: int | None  # the server's hash-max-listpack-entries (None: unknown)
    sampled: int
    sampled_fields: int
    sampled_memory: int  # MEMORY USAGE over the sampled buckets
    occupied: int  # sampled buckets that exist (hold a field)
    hashtables: int  # sampled buckets that left the listpack encoding
    #: The fingerprints and the buckets that hold them, counted (HLEN of every bucket
    #: that exists); None where only the sample was read.
    counted_fields: int | None = None
    counted_buckets: int | None = None
    #: MEMORY USAGE of every bucket that exists; None where only the sample was read.
    memory: int | None = None

    @property
    def estimated_fields(self) -> float:
        """The fingerprints held: counted, else estimated from the sample."""
        if self.counted_fields is not None:
            return float(self.counted_fields)
        return self.sampled_fields * self.buckets / self.sampled if self.sampled else 0.0

    @property
    def estimated_buckets(self) -> float:
        """How many buckets exist (a bucket is created by its first field)."""
        return self.occupied * self.buckets / self.sampled if self.sampled else 0.0

    @property
    def estimated_memory(self) -> float:
        """The buckets' memory: measured, else estimated from the sample."""
        if self.memory is not None:
            return float(self.memory)
        return self.sampled_memory * self.buckets / self.sampled if self.sampled else 0.0

    @property
    def bytes_per_fingerprint(self) -> float | None:
        """Bytes a fingerprint costs now: measured over every bucket where they were
        counted, else over the sample."""
        if self.memory is not None and self.counted_fields:
            return self.memory / self.counted_fields
        return self.sampled_memory / self.sampled_fields if self.sampled_fields else None

    @property
    def past_capacity(self) -> bool:
        return self.estimated_fields > self.capacity

    def describe(self) -> list[str]:
        limit = (
            f"the server keeps up to {self.listpack_entries} fields a hash compact"
            if self.listpack_entries is not None
            else "the server's hash-max-listpack-entries is unknown (CONFIG refused)"
        )
        if self.counted_fields is not None:
            held = (
                f"{self.counted_fields:,} fingerprints (counted) in {self.counted_buckets or 0:,} "
                f"of {self.buckets:,} buckets"
            )
        else:
            held = (
                f"about {self.estimated_fields:,.0f} fingerprints (estimated from "
                f"{self.sampled:,} sampled buckets) in {self.buckets:,} buckets"
            )
        lines = [f"{held} over {self.shards} shard(s), sized for {self.capacity:,} ({limit})"]
        per = self.bytes_per_fingerprint
        lines.append(
            f"of {self.sampled:,} sampled buckets, {self.hashtables:,} left the compact "
            "encoding"
            + (f"; {per:.1f} bytes a fingerprint (MEMORY USAGE" if per is not None else "")
            + (
                ""
                if per is None
                else ", every bucket)"
                if self.memory is not None
                else ", sampled)"
            )
        )
        if per is not None and self.estimated_fields < self.capacity / 10:
            lines.append(
                f"far below its capacity ({self.estimated_fields / self.capacity:.2%} full): "
                f"{per:.1f} B a fingerprint now, about 13-18 B near capacity, where each "
                "bucket holds many fingerprints"
            )
        return lines

    def warning(self, key: str, name: str = "compact") -> str | None:
        """What to tell an operator when buckets leave (or will leave) the compact
        encoding, else None."""
        if not self.past_capacity and not self.hashtables:
            return None
        return (
            f"the {name} filter at {key!r} holds about {self.estimated_fields:,.0f} "
            f"fingerprints (sized for {self.capacity:,}), and {self.hashtables} of "
            f"{self.sampled} sampled buckets have left the server's compact encoding: "
            "answers stay exact, but memory per fingerprint grows up to 5x. Create a new "
            "filter at another SCHEDULER_DUPEFILTER_KEY with a larger "
            "DEDUP_COMPACT_CAPACITY"
        )


#: What ``DedupBackend.contents()`` returns: each says itself in lines.
Contents = Union[
    Fingerprints, HashFields, BloomSizing, ServerFilters, TimeWindow, CompactBuckets, GrowingBuckets
]


def as_json(value: Any) -> Any:
    """A typed report as a JSON object (with its ``kind``); anything else as text."""
    if is_dataclass(value) and not isinstance(value, type):
        return {"kind": type(value).__name__, **asdict(value)}
    return str(value)
