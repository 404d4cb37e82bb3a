"""How a migration's members reach the target: one writer per way.

- :class:`BitsWriter` (``bulk``): a round of members hashed with numpy into a local
  bitmap per block, uploaded beside the block and OR-ed in with one Lua call
  (lua/merge_or.lua); for a Bloom target (``capabilities.bulk_bits``) the migration sizes.
- :class:`LayeredBitsWriter` (``bulk-layered``): the same into the first layer of a
  scalable filter the migration creates (sized for the whole set), adding each
  block's count to its layer record once per round.
- :class:`ScriptWriter` (``script``): the target's own check-and-add, in batches:
  an existing scalable filter, whose layers must count and grow as a crawler's do.

Each also checks every member afterwards (``--verify all``) in its own way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from ...backends.keys import as_str, block_prefix, layers_key, migrating_key
from ...core.bloom_math import SCHEME_PRIME, BloomParams, is_hex_fingerprint
from ...server import scripts
from .migration_report import Report
from .source import SetSource

#: Bytes per SETRANGE when uploading a round's bitmap (each call stays short).
UPLOAD_CHUNK = 4 << 20


def tmp_key(key: str, block: int) -> str:
    """Where a round's bitmap for ``block`` is uploaded: in the block's hash tag, so
    the merge is one call on one cluster slot."""
    return migrating_key(block_prefix(key, block))


class Writer(ABC):
    """Writes rounds of ``source``'s members into ``target`` and checks them all
    afterwards. ``accepts``: the members the target can hold (others are skipped);
    ``progress(done, total)``: called as members are read."""

    #: The name a migration records for --resume (see WRITERS).
    mode: ClassVar[str]

    def __init__(
        self,
        target: Any,
        source: SetSource,
        *,
        round_size: int,
        accepts: Callable[[str], bool],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.target = target
        self.server = target.server
        self.source = source
        self.round_size = round_size
        self.accepts = accepts
        self.progress = progress

    @abstractmethod
    def round(self, cursor: int, report: Report, token: str) -> tuple[int, int]:
        """Read up to a round of members from ``cursor`` and write them; returns the
        next cursor and the members read. ``token`` names the round (see merge_or.lua)."""

    @abstractmethod
    def verify_all(self, report: Report) -> tuple[list[str], int]:
        """Every source member checked against the target: (missing, checked)."""

    def _progress(self, report: Report, read: int) -> None:
        if self.progress is not None:
            self.progress(report.migrated + read, report.plan.members)


class ScriptWriter(Writer):
    mode = "script"

    def round(self, cursor: int, report: Report, token: str) -> tuple[int, int]:
        read = 0
        for next_cursor, batch in self.source.scan(cursor, self.round_size):
            cursor = next_cursor
            read += len(batch)
            members = [as_str(m) for m in batch]
            accepts = self.accepts
            good = [m for m in members if accepts(m)]
            report.skipped += [m for m in members if not accepts(m)]
            self.target.add_many(good)
            self._progress(report, read)
        return cursor, read

    def verify_all(self, report: Report) -> tuple[list[str], int]:
        """Every member checked with the target's own membership script."""
        missing: list[str] = []
        checked = 0
        for _, batch in self.source.scan(0):
            members = [m for m in (as_str(x) for x in batch) if self.accepts(m)]
            found = self.target.contains_many(members)
            missing += [m for m, ok in zip(members, found) if not ok]
            checked += len(members)
        return missing, checked


class BitsWriter(Writer):
    mode = "bulk"
    #: Whether each block's count goes to a scalable first layer's record.
    counts = False

    @property
    def params(self) -> BloomParams:
        params: BloomParams = self.target.params
        return params

    @staticmethod
    def delete_temporaries(target: Any) -> None:
        """Remove what an interrupted round left beside each block of ``target``."""
        for block in range(target.params.blocks):
            key = tmp_key(target.key, block)
            scripts.DELETE_IF_TYPE(target.server, [key], ["string"])

    def round(self, cursor: int, report: Report, token: str) -> tuple[int, int]:
        """Read up to a round of members into local bitmaps (each SSCAN batch hashed as
        it arrives while the reader thread fetches the next one), then merge them."""
        import numpy as np

        p = self.params
        maps: dict[int, Any] = {}
        counts: dict[int, int] = {}
        read = 0
        for next_cursor, batch in self.source.scan(cursor, self.round_size):
            cursor = next_cursor
            read += len(batch)
            for block, offsets in positions(batch, p, report.skipped):
                counts[block] = counts.get(block, 0) + offsets.shape[0]
                bitmap = maps.get(block)
                if bitmap is None:
                    bitmap = maps[block] = np.zeros((p.block_bits + 7) // 8, np.uint8)
                flat = offsets.ravel()
                masks = np.uint8(0x80) >> (flat & np.uint64(7)).astype(np.uint8)
                np.bitwise_or.at(bitmap, flat >> np.uint64(3), masks)
            self._progress(report, read)
        self._merge(maps, counts if self.counts else None, token)
        return cursor, read

    def _merge(self, maps: dict[int, Any], counts: dict[int, int] | None, token: str) -> None:
        """OR each block's bitmap into the target; ``counts``: members per block to add
        to the count of a scalable target's first layer, in the same call, once per
        ``token`` (the round): a round merged again after a resume adds no count."""
        for block, bitmap in maps.items():
            key, ttl = self.target.bulk_target(block)
            tmp = tmp_key(self.target.key, block)
            data = bitmap.tobytes()
            # Allocate the temporary string at full size first: no piecemeal growth.
            pipe = self.server.pipeline(transaction=False)
            pipe.setrange(tmp, len(data) - 1, b"\0")
            for offset in range(0, len(data), UPLOAD_CHUNK):
                chunk = data[offset : offset + UPLOAD_CHUNK]
                if chunk.count(0) != len(chunk):
                    pipe.setrange(tmp, offset, chunk)
            pipe.execute()
            keys = [self.target.block_stamp(block), key, tmp]
            args = [self.target.stamp, self.params.block_bits, ttl]
            if counts is not None:
                keys.append(layers_key(key))
                args += [counts.get(block, 0), token]
            scripts.MERGE_OR(self.server, keys, args)

    def verify_all(self, report: Report) -> tuple[list[str], int]:
        """Every member checked against the target's bits, read back from Redis."""
        import numpy as np

        p = self.params
        stored = {}
        for block in range(p.blocks):
            key, _ = self.target.bulk_target(block)
            size = (p.block_bits + 7) // 8
            data = bytearray()
            for offset in range(0, size, UPLOAD_CHUNK):
                data += self.server.getrange(key, offset, min(size, offset + UPLOAD_CHUNK) - 1)
            stored[block] = np.frombuffer(bytes(data.ljust(size, b"\0")), np.uint8)
        missing: list[str] = []
        checked = 0
        for _, members in self.source.scan(0):
            skipped: list[str] = []
            for block, offsets, chosen in positions(members, p, skipped, with_members=True):
                bits = stored[block][offsets >> np.uint64(3)] & (
                    np.uint8(0x80) >> (offsets & np.uint64(7)).astype(np.uint8)
                )
                bad = ~(bits != 0).all(axis=1)
                missing += [as_str(m) for m, b in zip(chosen, bad) if b]
                checked += len(chosen)
        return missing, checked


class LayeredBitsWriter(BitsWriter):
    mode = "bulk-layered"
    counts = True


#: Each writer by the mode the migration records in its progress (for --resume).
WRITERS: dict[str, type[Writer]] = {
    w.mode: w for w in (BitsWriter, LayeredBitsWriter, ScriptWriter)
}


def positions(
    members: list[bytes], params: BloomParams, skipped: list[str], with_members: bool = False
) -> Iterator[Any]:
    """Vectorised ``BloomParams.positions``: yields (block, offsets[n, k]) per block.

    Members that are not hex digests of >= 16 bytes are appended to ``skipped``.
    The arithmetic is the scheme's, in uint64 (all values < 2^53).
    """
    import numpy as np

    if members and not isinstance(members[0], bytes):  # a client with decode_responses
        members = [m.encode() for m in members]
    lengths = set(map(len, members))
    by_length: dict[int, list[bytes]] = {}
    if len(lengths) == 1:
        by_length[lengths.pop()] = members
    else:
        for m in members:
            by_length.setdefault(len(m), []).append(m)
    m_bits = np.uint64(params.block_bits)
    steps = np.arange(params.hashes, dtype=np.uint64)
    prime = params.scheme == SCHEME_PRIME  # layers of scalable filters
    for length, group in by_length.items():
        try:
            if length < 32 or length % 2:
                raise ValueError("not an even number of hex digits")
            # bytes.fromhex checks every character of every member at once.
            digest = np.frombuffer(bytes.fromhex(b"".join(group).decode("ascii")), np.uint8)
            digest = digest.reshape(len(group), length // 2)[:, :16]
        except (ValueError, UnicodeDecodeError):
            # Slow path: an odd length, or some member is not hex. The offsets
            # depend on the first 32 digits only.
            good = [g for g in group if is_hex_fingerprint(as_str(g))]
            skipped += [as_str(g) for g in group if not is_hex_fingerprint(as_str(g))]
            group = good
            if not group:
                continue
            digest = np.frombuffer(
                bytes.fromhex(b"".join(g[:32] for g in group).decode()), np.uint8
            )
            digest = digest.reshape(len(group), 16)
        h1 = _big_endian(digest, 0, 6)
        h2 = _big_endian(digest, 6, 12)
        step = np.uint64(1) + h2 % (m_bits - np.uint64(1)) if prime else h2 % m_bits
        offsets = (h1 % m_bits)[:, None] + step[:, None] * steps
        offsets %= m_bits
        if params.blocks == 1:
            yield (0, offsets, group) if with_members else (0, offsets)
            continue
        block = _big_endian(digest, 12, 16) % np.uint64(params.blocks)
        for b in np.unique(block):
            sel = block == b
            if with_members:
                yield int(b), offsets[sel], [g for g, s in zip(group, sel) if s]
            else:
                yield int(b), offsets[sel]


def _big_endian(digest: Any, start: int, stop: int) -> Any:
    import numpy as np

    out = np.zeros(digest.shape[0], np.uint64)
    for col in range(start, stop):
        out = (out << np.uint64(8)) | digest[:, col].astype(np.uint64)
    return out
