"""Buckets that split as the filter grows (linear hashing): the layout of a ``compact``
filter created without a capacity (DEDUP_COMPACT_CAPACITY = 0).

As in the sized layout, a fingerprint's SHA1 chooses its group (its first
BUCKET_BYTES d: d modulo the groups; in a filter converted from a sized one of B buckets,
d modulo B modulo the groups, the group its sized bucket was in) and its field (the next
FIELD_BYTES). Each group is
a table of its own in its slot: its level record (``lua/grow.lua``: level L, split
pointer s, fields written n) and its buckets 0 .. 2^L + s - 1. The field's last four
bytes, h, choose its bucket: h mod 2^L, or h mod 2^(L+1) below s. A group starts as
one bucket; once it averages more than ``load`` fields a bucket, the call that adds
the field splits bucket s into s and s + 2^L. So a small filter is a few keys, a huge
one buckets of a few hundred fields, always in the server's compact encoding, and
nothing is sized in advance.

The level and pointer are read by the script that checks and adds, so every worker
sees every split at its next call. Each worker keeps what it last learnt of them
(:attr:`Growing.known`) to name the keys a call may touch: per group, the bucket each
fingerprint is in as it knows them and the buckets of the next splits. A call that
needs other keys writes nothing for that group and answers the level and pointer
(:meth:`Growing.learn`), and the group is sent again: when another worker split first
a bucket the call names, or one the call would have to split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..exceptions import FilterMismatchError
from ..server import scripts
from ..server.answers import GREW, MORE
from .keys import META, grow_keys, shard_key, slot_sibling
from .layout import BUCKET_BYTES, FIELD_BYTES, Layout

#: An answer's room for the split pointer (``grow_again`` in lua/grow.lua).
POINTER_ROOM = 2**32


def h_of(field: bytes) -> int:
    """What chooses a field's bucket: its last four bytes."""
    return int.from_bytes(field[4:8], "big")


def bucket_of(h: int, level: int, split: int) -> int:
    """The bucket of ``h`` in a group at ``level`` with split pointer ``split``."""
    bucket = h % (1 << level)
    return h % (1 << (level + 1)) if bucket < split else bucket


def parse_level(raw: bytes | str | None) -> tuple[int, int, int] | None:
    """A level record's level, pointer and count (0, 0, 0 when missing); None when
    it is not one (the script refuses such a group)."""
    if raw is None:
        return 0, 0, 0
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    parts = text.split(" ")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    level, split, count = (int(p) for p in parts)
    return (level, split, count) if level <= 31 and split < (1 << level) else None


def advanced(level: int, split: int, splits: int) -> tuple[int, int]:
    """The level and pointer ``splits`` splits after ``level`` and ``split``."""
    split += splits
    while split >= 1 << level:
        split -= 1 << level
        level += 1
    return level, split


class Growing(Layout):
    """Where a growing filter's fingerprints live (see the module). A call's group is
    a group and the bucket a fingerprint has at the level known: ``group + shards *
    bucket``."""

    add_script = scripts.GROW_COMPACT_ADD
    contains_script = scripts.GROW_COMPACT_CONTAINS
    forget_script = scripts.GROW_FORGET
    #: Calls made again while other workers split first (each learns the state anew).
    retries = 8

    def __init__(
        self,
        key: str,
        shards: int,
        load: int,
        grouped_by: int = 0,
        resolve: Callable[[], object] | None = None,
    ) -> None:
        """``grouped_by``: the modulus a fingerprint's d is taken by before the groups',
        the bucket count of the sized filter it was converted from, or the groups; 0:
        found by ``resolve`` (the backend's: the stored filter's) at the first use."""
        groups = [shard_key(key, g) for g in range(shards)]
        self.shards = shards
        self.grouped_by = grouped_by
        self._find_grouping = resolve
        #: Fields a bucket averages before the group splits one (the record's).
        self.load = load
        self.stamp_keys = [slot_sibling(group, META) for group in groups]
        grown = [grow_keys(group) for group in groups]
        self.level_keys = [record for record, _ in grown]
        self.prefixes = [prefix for _, prefix in grown]
        #: Per group, the level and split pointer last learnt.
        self.known: list[tuple[int, int]] = [(0, 0)] * shards
        #: Per group, the keys :meth:`section_keys` last named, and for what.
        self._sections: dict[int, tuple[tuple[int, int, int], list[str]]] = {}

    def locate(self, fingerprint: str) -> tuple[int, bytes]:
        """The group of ``fingerprint`` and its field."""
        digest = hashlib.sha1(fingerprint.encode("utf-8")).digest()
        by = self.grouped_by or self.grouping()
        group = int.from_bytes(digest[:BUCKET_BYTES], "big") % by % self.shards
        return group, digest[BUCKET_BYTES : BUCKET_BYTES + FIELD_BYTES]

    def grouping(self) -> int:
        """:attr:`grouped_by`, found (the stored filter's) at the first use."""
        if not self.grouped_by and self._find_grouping is not None:
            self._find_grouping()
        self.grouped_by = self.grouped_by or self.shards
        return self.grouped_by

    def bucket_key(self, group: int, bucket: int) -> str:
        return f"{self.prefixes[group]}{bucket}"

    def header(self, context: Any, stamp: str) -> list[Any]:
        return [stamp, self.load]

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        """A call's group: the bucket the fingerprint is in at the level and pointer
        known (``group + shards * bucket``); its argument: its field."""
        group, field = self.locate(fingerprint)
        bucket = bucket_of(h_of(field), *self.known[group])
        return group + self.shards * bucket, [field]

    def keys(self, group: int, context: Any) -> list[str]:
        return [self.bucket_key(group % self.shards, group // self.shards)]

    def pack(
        self,
        groups: Sequence[int],
        keys: Mapping[int, list[str]],
        placed: Sequence[tuple[int, list[Any]]],
        header: list[Any],
    ) -> tuple[list[str], list[Any]]:
        """One call as lua/grow_check.lua takes it: per group of the filter the
        call touches (a section), its stamp, its level record and the next ``pairs``
        splits to come as known (each the bucket split and the new one), then the
        buckets its fingerprints are in as known; in ARGV per section the index of its
        first key, its ``pairs`` and the level and pointer known (``level * 2^32 +
        split``); per fingerprint the index of its bucket's key and its arguments (its
        field, then any the layout adds). A call
        may split once per fingerprint it writes: ``pairs`` is one, and one more per
        ``load`` fingerprints of the section."""
        shards = self.shards
        sections: dict[int, list[int]] = {}
        for group in groups:
            sections.setdefault(group % shards, []).append(group)
        count = dict.fromkeys(sections, 0)
        for group, _ in placed:
            count[group % shards] += 1
        out: list[str] = []
        table: list[Any] = [*header, len(sections)]
        index: dict[int, int] = {}
        for number, buckets in sections.items():
            level, split = self.known[number]
            pairs = 1 + count[number] // self.load
            table += (len(out) + 1, pairs, level * POINTER_ROOM + split)
            out += self.section_keys(number, level, split, pairs)
            for group in buckets:
                index[group] = len(out) + 1
                out += keys[group]
        for group, more in placed:
            table.append(index[group])
            table += more
        return out, table

    def section_keys(self, number: int, level: int, split: int, pairs: int) -> list[str]:
        """Group ``number``'s stamp, level record and the buckets of its next ``pairs``
        splits after ``level`` and ``split`` (kept while they are the ones to come)."""
        said = self._sections.get(number)
        if said is None or said[0] != (level, split, pairs):
            keys = [self.stamp_keys[number], self.level_keys[number]]
            prefix = self.prefixes[number]
            at, then = level, split
            for _ in range(pairs):
                keys += [f"{prefix}{then}", f"{prefix}{then + (1 << at)}"]
                at, then = advanced(at, then, 1)
            said = self._sections[number] = ((level, split, pairs), keys)
        return said[1]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        group, field = self.locate(fingerprint)
        level = self.known[group][0]
        return [self.level_keys[group], *self.candidates(group, field, level)], [field, level]

    def candidates(self, group: int, field: bytes, level: int) -> list[str]:
        """The two buckets ``field`` of ``group`` may be in at ``level``, whatever the
        pointer: ``h mod 2^level`` and ``2^level`` more (a split moves fields between
        those two alone)."""
        low = h_of(field) % (1 << level)
        return [self.bucket_key(group, low), self.bucket_key(group, low + (1 << level))]

    def forget_call(self, group: int, fields: Sequence[bytes]) -> tuple[list[str], list[Any]]:
        """Keys and arguments of lua/grow_forget.lua for ``fields`` of ``group``, at the
        level known: each field's two :meth:`candidates`."""
        level = self.known[group][0]
        keys = [self.level_keys[group], self.stamp_keys[group]]
        for field in fields:
            keys += self.candidates(group, field, level)
        return keys, [level, *fields]

    def again(self, answer: Any) -> bool:
        return isinstance(answer, int) and answer < MORE

    def learn(self, answers: Sequence[Any], fingerprints: Sequence[str]) -> None:
        for answer, fingerprint in zip(answers, fingerprints):
            self.learn_group(self.locate(fingerprint)[0], answer)

    def learn_group(self, group: int, answer: int) -> None:
        """What an answer below ``MORE`` says of ``group``: its level and pointer."""
        self.known[group] = divmod(MORE - 1 - answer, POINTER_ROOM)

    def grown(self, answer: int, fingerprint: str) -> None:
        """A call split the group of ``fingerprint`` once more, from the state this
        worker knew (else it would have refused): it moves on by one."""
        if answer == GREW:
            group = self.locate(fingerprint)[0]
            self.known[group] = advanced(*self.known[group], 1)

    def again_error(self, name: str, key: str) -> Exception:
        return FilterMismatchError(
            f"The {name} filter at {key!r} split faster than this worker could follow "
            f"({self.retries} calls in a row found it split again); this passes by itself "
            "as the filter grows: the call is made again later"
        )


def field_name(group: int, field: bytes) -> str:
    """What :class:`FieldNames` takes for ``field`` of ``group``: ``<group>:<hex>``."""
    return f"{group}:{field.hex()}"


class FieldNames(Growing):
    """The layout of a growing filter fed fields, not fingerprints: each named by its
    group and its bytes (:func:`field_name`), as a conversion copies them from the
    sized buckets, where no fingerprint is kept."""

    def locate(self, fingerprint: str) -> tuple[int, bytes]:
        group, _, field = fingerprint.partition(":")
        return int(group), bytes.fromhex(field)
