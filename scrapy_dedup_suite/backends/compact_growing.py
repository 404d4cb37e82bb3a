"""``compact`` with nothing to size: its buckets split as the filter grows
(:mod:`.growing`), chosen by DEDUP_COMPACT_CAPACITY = 0.

A new filter is one bucket per group (DEDUP_HASH_SHARDS groups), so a crawl of a few
hundred pages costs a few dozen keys, and a crawl of billions buckets of about
``load`` fields. ``load`` is fixed when the filter is created (kept in its record and
stamps): :data:`NEW_LOAD`, or less where the server's ``hash-max-listpack-entries``
(read then) asks for it: a bucket not yet split at its level holds up to twice the
load, which stays under the limit by five standard deviations, so every bucket keeps
the compact encoding.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from scrapy.settings import BaseSettings

from ..exceptions import DedupBackendError
from ..server import scripts
from ..server.cluster import is_cluster, nodes_of
from ..settings.options import CompactOptions
from ..settings.table import GROUPS, check
from .base import LAYOUT_VERSION, DedupBackend
from .capabilities import Capabilities
from .clearing import delete_if_type
from .groups import groups_for, stored_shape
from .growing import FieldNames, Growing, parse_level
from .growing_report import GrowingBuckets
from .keys import BATCH, as_str, chunks, memory_usage, meta_key, scan_keys
from .layout import FIELD_BYTES
from .listpack import BYTES_PER_FINGERPRINT, UNKNOWN_LISTPACK_ENTRIES, listpack_limits
from .meta import MetaSpec, stored_parameters
from .reports import Contents, FilterInfo, Holding

logger = logging.getLogger(__name__)


#: Fields a bucket of a new filter averages before its group splits one, where the
#: server's listpack limit allows as many (:func:`split_load`: 205 at Redis's default of
#: 512). A new fingerprint costs two scans of its bucket and its share of a split (which
#: writes a bucket's fields anew), both growing with the load, while a key's own
#: overhead shrinks with it: measured (``python -m bench.request_seen``, ``python -m
#: bench.growing``), at 96 new fingerprints in batches run at a median of 0.96x a sized
#: filter's speed (``hash`` 0.94x; 0.90x at 205) for about 0.5 B a fingerprint more.
NEW_LOAD = 96


def new_load(entries: int) -> int:
    """The load of a new filter on a server that keeps up to ``entries`` fields a hash
    compact: :data:`NEW_LOAD`, or :func:`split_load` where the limit is lower."""
    return min(NEW_LOAD, split_load(entries))


def split_load(entries: int) -> int:
    """Fields a bucket averages before its group splits one, for a server that keeps
    up to ``entries`` fields a hash compact: a bucket not yet split holds about twice
    this, which plus five standard deviations (a Poisson count) stays within
    ``entries``."""
    root = (-5 + math.sqrt(25 + 4 * entries)) / 2
    return max(1, int(root * root / 2))


@dataclass(frozen=True)
class GroupLevel:
    """One group of a growing filter: its level, split pointer and fields written."""

    level: int
    split: int
    written: int

    @property
    def buckets(self) -> int:
        return (1 << self.level) + self.split


def held_buckets(server: Any, keys: list[str]) -> tuple[list[str], int]:
    """Of the buckets ``keys`` (one pipeline), those that hold a field, and how many
    fields they hold."""
    pipe = server.pipeline(transaction=False)
    for key in keys:
        pipe.hlen(key)
    lengths = [int(n) for n in pipe.execute()]
    return [key for key, n in zip(keys, lengths) if n], sum(lengths)


class CompactKind(DedupBackend):
    """What both of compact's layouts are to a user (its name, key, what it can do) and
    how a filter of buckets is cleared."""

    name = "compact"
    default_key = "%(spider)s:dedup-compact"
    spread_setting = "DEDUP_HASH_SHARDS"
    #: What both layouts can do (each class declares it: it defines the methods).
    CAPABILITIES = Capabilities(count=True, stable_answers=True, forget=True)

    meta_key: str
    shards: int

    def shape(self) -> dict[str, str]:
        """What its record says of the layout: its capacity, and its buckets (sized) or
        its load (growing); compared at every open."""
        raise NotImplementedError

    def meta_spec(self) -> MetaSpec:
        shape = self.shape()
        return MetaSpec(
            self.meta_key,
            {
                "backend": self.name,
                "layout": LAYOUT_VERSION,
                "shards": str(self.shards),
                **shape,
                "field_bytes": str(FIELD_BYTES),
                "created": str(int(time.time())),
            },
            ("layout", "shards", *shape, "field_bytes"),
        )

    def buckets_to_clear(self) -> Iterable[list[str]]:
        """The keys of the buckets that may exist, in lists within one slot, read before
        the record goes and iterable twice."""
        raise NotImplementedError

    def clear(self) -> int:
        """Every bucket's type is checked before anything is deleted; then the record and
        the stamps go (as for every backend), then the buckets, a slot's BATCH at a time.
        A worker that writes meanwhile leaves buckets the next open adopts, as it
        would have written them after the clear."""
        buckets = self.buckets_to_clear()
        for keys in buckets:
            self.check_types(dict.fromkeys(keys, "hash"))
        deleted = super().clear()
        for keys in buckets:
            deleted += delete_if_type(self, keys, dict.fromkeys(keys, "hash"))
        return deleted


class GrowingCompactBackend(CompactKind):
    """compact's growing layout (see the module). Built by :class:`~.compact.CompactBackend`'s
    ``from_settings`` when DEDUP_COMPACT_CAPACITY is 0."""

    capabilities = CompactKind.CAPABILITIES

    #: Where fingerprints live (a conversion's copy feeds fields: :class:`.growing.FieldNames`).
    layout_class: type[Growing] = Growing

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        shards: int = GROUPS,
        load: int | None = None,
        grouped_by: int | None = None,
    ) -> None:
        """``load``: None for the stored filter's, or (a new filter) what the server's
        listpack limit gives; a number to create it with that load (tests, benches).
        ``grouped_by``: None for the stored filter's, or (a new filter) the groups; a
        conversion gives the bucket count of the sized filter it converts."""
        super().__init__(server, key)
        self.shards = check("DEDUP_HASH_SHARDS", shards)
        self.meta_key = meta_key(key)
        self.asked_load = load
        self.asked_grouping = grouped_by
        self.layout: Growing = self.layout_class(
            key, self.shards, load or 0, grouped_by or 0, self.resolve_stored
        )
        self.stamp_keys = self.layout.stamp_keys
        self.capacity = 0
        self._resolved = False

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> DedupBackend:
        asked = CompactOptions.from_settings(settings).shards
        stored = stored_shape(server, key, asked) if server is not None else None
        return cls(server, key, shards=groups_for(server, asked, stored, True))

    def with_key(self, key: str) -> DedupBackend:
        return GrowingCompactBackend(
            self.server,
            key,
            shards=self.shards,
            load=self.asked_load,
            grouped_by=self.asked_grouping,
        )

    def fed_fields(self) -> GrowingCompactBackend:
        """This filter fed fields named by :func:`.growing.field_name`, not fingerprints
        (a conversion's copy)."""
        return GrowingFields(
            self.server, self.key, shards=self.shards, load=self.load, grouped_by=self.grouped_by
        )

    # -- the layout --------------------------------------------------------------------

    @property
    def load(self) -> int:
        if not self._resolved:
            self.resolve_stored()
        return self.layout.load

    @property
    def grouped_by(self) -> int:
        """The modulus a fingerprint's group is chosen by before the groups' (see
        :mod:`.growing`): the groups, or a converted filter's sized bucket count."""
        if not self._resolved:
            self.resolve_stored()
        return self.layout.grouped_by

    def resolve_stored(self) -> int:
        """The stored filter's load and grouping (its record, else a stamp), else the
        ones asked for, else (a new filter) what the server's listpack limit gives and
        the groups. Returns the load."""
        stored = stored_parameters(self.server, self.meta_key, self.stamp_keys)
        adopted = [
            said
            for said in stored
            if said.get("backend") == self.name
            and said.get("sized_for") == "0"
            and said.get("load", "").isdigit()
            and int(said["load"]) > 0
        ]
        if adopted:
            load = int(adopted[0]["load"])
            grouping = adopted[0].get("grouped_by", "")
            grouped_by = int(grouping) if grouping.isdigit() and int(grouping) > 0 else self.shards
        else:
            grouped_by = self.asked_grouping or self.shards
            if self.asked_load:
                load = self.asked_load
            else:
                limits = listpack_limits(self.server)
                load = new_load(limits[0] if limits is not None else UNKNOWN_LISTPACK_ENTRIES)
        if (load, grouped_by) != (self.layout.load, self.layout.grouped_by):
            self.layout.load, self.layout.grouped_by = load, grouped_by
            self._stamp = None  # the stamp names them
        self._resolved = True
        return load

    def levels(self) -> list[GroupLevel]:
        """Each group's level record as stored now (a group never written: level 0).
        A record that is not one is refused, as the scripts refuse it."""
        pipe = self.server.pipeline(transaction=False)
        for key in self.layout.level_keys:
            pipe.get(key)
        answers = pipe.execute(raise_on_error=False)
        if any(isinstance(raw, Exception) for raw in answers):  # (a key of another type)
            self.check_types(dict.fromkeys(self.layout.level_keys, "string"))
            raise next(raw for raw in answers if isinstance(raw, Exception))
        out = []
        for key, raw in zip(self.layout.level_keys, answers):
            parsed = parse_level(raw)
            if parsed is None:
                raise DedupBackendError(
                    f"The level record {key!r} of the compact filter at {self.key!r} holds "
                    f"{as_str(raw)[:40]!r}, not 'level split count': restore it, or delete the "
                    "filter (a crawl with SCHEDULER_FLUSH_ON_START = True) if its fingerprints "
                    "may be lost"
                )
            out.append(GroupLevel(*parsed))
        return out

    def shape(self) -> dict[str, str]:
        return {"sized_for": "0", "load": str(self.load), "grouped_by": str(self.grouped_by)}

    def _open(self) -> None:
        self.resolve_stored()
        super()._open()
        self.layout.known = [(g.level, g.split) for g in self.levels()]

    def verify(self) -> bool:
        self.resolve_stored()
        return super().verify()

    # -- keys --------------------------------------------------------------------------

    def bucket_keys(self, levels: list[GroupLevel] | None = None) -> Iterator[list[str]]:
        """The keys of the buckets each group has now, in lists of up to BATCH within
        one group (slot): what exists, read from the level records."""
        for group, state in enumerate(levels if levels is not None else self.levels()):
            yield from chunks(
                (self.layout.bucket_key(group, b) for b in range(state.buckets)), BATCH
            )

    def owned_keys(self) -> list[str]:
        return [key for keys in self.bucket_keys() for key in keys] + [
            *self.layout.level_keys,
            *self.stamp_keys,
            self.meta_key,
        ]

    def expected_types(self) -> dict[str, str]:
        return {
            **dict.fromkeys(self.stamp_keys, "string"),
            **dict.fromkeys(self.layout.level_keys, "string"),
            self.meta_key: "hash",
        }

    def fingerprint_types(self, fingerprint: str) -> dict[str, str]:
        """Its stamp and the two buckets it may be in at the level last learnt (read
        nothing: the level record may be what failed)."""
        group, field = self.layout.locate(fingerprint)
        buckets = self.layout.candidates(group, field, self.layout.known[group][0])
        return {self.stamp_keys[group]: "string", **dict.fromkeys(buckets, "hash")}

    def stamp_of(self, data_key: str) -> str | None:
        if data_key in self.stamp_keys:
            return data_key
        for group, record in enumerate(self.layout.level_keys):
            if data_key == record or data_key.startswith(self.layout.prefixes[group]):
                return self.stamp_keys[group]
        return None

    def buckets_to_clear(self) -> Iterable[list[str]]:
        """Those the level records say, or, where one is damaged, those found by SCAN
        (what exists)."""
        try:
            return list(self.bucket_keys())
        except DedupBackendError:
            found = (scan_keys(self.server, prefix) for prefix in self.layout.prefixes)
            return [keys for group in found for keys in chunks(sorted(group), BATCH)]

    # -- operations --------------------------------------------------------------------

    def forget_many(self, fingerprints: Iterable[str]) -> int:
        """Delete each fingerprint's field from both buckets it may be in at its group's
        level, and count it off the group's level record in the same call
        (lua/grow_forget.lua), so that the group splits by what it holds: a call per
        group and BATCH fields, pipelined. A group found at another level deleted
        nothing and is sent again at the level it answered (a few times at most)."""
        layout = self.layout
        by_group: dict[int, list[bytes]] = {}
        for fingerprint in fingerprints:
            group, field = layout.locate(fingerprint)
            by_group.setdefault(group, []).append(field)
        todo = [(group, part) for group, held in by_group.items() for part in chunks(held)]
        removed = 0
        for _ in range(layout.retries + 1):
            if not todo:
                return removed
            calls = [layout.forget_call(group, part) for group, part in todo]
            answers = scripts.run_many(self.server, layout.forget_script, calls)
            again = []
            for (group, part), answer in zip(todo, answers):
                if layout.again(answer):
                    layout.learn_group(group, answer)
                    again.append((group, part))
                else:
                    removed += int(answer)
            todo = again
        if todo:
            raise layout.again_error(self.name, self.key)
        return removed

    def count(self) -> int:
        """The fields of every bucket the level records say exists (HLEN alone)."""
        return sum(held_buckets(self.server, keys)[1] for keys in self.bucket_keys())

    def census(self) -> GrowingBuckets:
        """Every bucket the level records say exists: HLEN, then MEMORY USAGE and
        OBJECT ENCODING of each that holds a field (what exists, a BATCH at a time)."""
        levels = self.levels()
        buckets = fields_ = memory = hashtables = 0
        for keys in self.bucket_keys(levels):
            held, count = held_buckets(self.server, keys)
            buckets += len(held)
            fields_ += count
            if held:
                pipe = self.server.pipeline(transaction=False)
                for key in held:
                    pipe.execute_command("MEMORY USAGE", key, "SAMPLES", "0")
                    pipe.object("encoding", key)
                answers = pipe.execute()
                memory += sum(int(m or 0) for m in answers[0::2])
                hashtables += sum(as_str(e) == "hashtable" for e in answers[1::2])
        return GrowingBuckets(
            fields=fields_,
            buckets=buckets,
            shards=self.shards,
            load=self.load,
            levels=[(g.level, g.split, g.buckets) for g in levels],
            memory=memory,
            hashtables=hashtables,
        )

    # -- reports -----------------------------------------------------------------------

    def holding(self) -> Holding:
        return Holding(float(self.count()), self.shards, 0, BYTES_PER_FINGERPRINT)

    def info(self) -> FilterInfo:
        """As every backend's, with every bucket counted and measured (:meth:`census`)."""
        census = self.census()
        small = [*self.stamp_keys, *self.layout.level_keys, self.meta_key]
        memory = memory_usage(self.server, small) + census.memory
        nodes = nodes_of(self.server, self.stamp_keys) if is_cluster(self.server) else None
        details = {"layout": "growing", **asdict(census)}
        return FilterInfo(self.name, self.key, len(small) + census.buckets, memory, nodes, details)

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        info = self.info() if info is None else info
        said = {f.name: info[f.name] for f in fields(GrowingBuckets)}
        said["levels"] = [tuple(level) for level in said["levels"]]
        return [GrowingBuckets(**said)]


class GrowingFields(GrowingCompactBackend):
    """A growing filter fed fields named by :func:`.growing.field_name` (see
    :class:`.growing.FieldNames`): what a conversion copies from sized buckets."""

    layout_class = FieldNames
