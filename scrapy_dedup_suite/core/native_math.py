"""The sizing of the server's own Bloom filters (RedisBloom's and valkey-bloom's
BF.* type), for the native-bloom backends: how many keys a filter is split into,
and the false-positive rate a filter has at a given fill."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .bloom_math import (
    MAX_BLOCKS,
    SizingError,
    _check_capacity_and_rate,
    _whole,
    false_positive_rate,
)

#: The most items one server-side Bloom filter (BF.*) is given: RedisBloom's cap on
#: a filter's capacity ...
NATIVE_MAX_CAPACITY = 2**30
#: ... and valkey-bloom's default limit on one filter object's memory
#: (bloom-memory-usage-limit), with room for its own overhead.
NATIVE_MAX_BYTES = 120 * 2**20


def native_bits_per_item(error_rate: float) -> float:
    """Bits per item of a server-side Bloom filter (RedisBloom and valkey-bloom both
    size a filter as -ln p / (ln 2)^2 bits per item)."""
    return -math.log(error_rate) / math.log(2) ** 2


def native_error_rate(capacity: int, error_rate: float, expansion: int, items: float) -> float:
    """About the false-positive rate of a server-side Bloom filter created for
    ``capacity`` items at ``error_rate`` that holds ``items``: a NONSCALING filter
    (expansion 0) past its capacity by the Bloom formula; a scalable one makes its
    first sub-filter at half ``error_rate`` and each next one ``expansion`` times
    larger at half the last's rate (as RedisBloom does), so that together they stay
    at or below ``error_rate``."""
    if items <= 0:
        return 0.0
    bits = capacity * native_bits_per_item(error_rate)
    hashes = max(1, math.ceil(-math.log2(error_rate)))
    if not expansion:
        return false_positive_rate(round(bits), hashes, items)
    rate, left, size, layer_rate = 0.0, items, capacity, error_rate / 2
    while left > 0:
        held = min(left, size)
        layer_bits = size * native_bits_per_item(layer_rate)
        layer_hashes = max(1, math.ceil(-math.log2(layer_rate)))
        rate += false_positive_rate(round(layer_bits), layer_hashes, held)
        left -= held
        size *= expansion
        layer_rate /= 2
    return min(1.0, rate)


@dataclass(frozen=True)
class NativeParams:
    """A filter of the server's own Bloom type, split into ``blocks`` filters (keys)
    of ``block_capacity`` items each, so that no key passes what a server allows
    one filter (NATIVE_MAX_CAPACITY, NATIVE_MAX_BYTES) and a cluster spreads them.
    ``expansion`` 0: NONSCALING (full at its capacity); else each block grows by
    sub-filters ``expansion`` times larger."""

    capacity: int
    error_rate: float
    blocks: int
    expansion: int

    @classmethod
    def create(cls, capacity: int, error_rate: float, blocks: int, expansion: int) -> NativeParams:
        """Raises :class:`SizingError`. ``blocks`` 0: as few as fit."""
        _check_capacity_and_rate(capacity, error_rate)
        if not _whole(blocks) or not 0 <= blocks <= MAX_BLOCKS:
            raise SizingError(
                f"{{blocks}} must be 0 (automatic) or a number of blocks from 1 to "
                f"{MAX_BLOCKS:,}, got {blocks!r}"
            )
        if not _whole(expansion) or expansion < 0:
            raise SizingError(f"{{expansion}} must be a whole factor >= 1, got {expansion!r}")
        # A scalable filter's first sub-filter is made at half the rate (by the server).
        first_rate = error_rate / 2 if expansion else error_rate
        per_block = min(
            NATIVE_MAX_CAPACITY, int(NATIVE_MAX_BYTES * 8 / native_bits_per_item(first_rate))
        )
        needed = max(1, math.ceil(capacity / per_block))
        if needed > MAX_BLOCKS:
            raise SizingError(
                f"{{capacity}}={capacity:,} at {{error_rate}}={error_rate} needs {needed:,} "
                f"server-side Bloom filters of at most {per_block:,} items; a filter may have "
                f"{MAX_BLOCKS:,}. Lower {{capacity}}, or let it scale from a smaller one"
            )
        if blocks == 0:
            blocks = needed
        elif blocks < needed:
            raise SizingError(
                f"{{blocks}}={blocks} is too few: one server-side Bloom filter holds at most "
                f"{per_block:,} items at error rate {error_rate} (RedisBloom's capacity cap of "
                f"{NATIVE_MAX_CAPACITY:,}, valkey-bloom's 128 MB per filter), and {capacity:,} "
                f"need {needed}; use {needed} or more, or 0 for automatic"
            )
        return cls(capacity, error_rate, blocks, expansion)

    @property
    def block_capacity(self) -> int:
        """Each block's capacity: its share, and room for the spread of a hash."""
        share = self.capacity / self.blocks
        if self.blocks == 1:
            return self.capacity
        return math.ceil(share + 6 * math.sqrt(share) + 1)

    @property
    def block_bytes(self) -> int:
        """About the memory one block's first filter takes (allocated at creation)."""
        first_rate = self.error_rate / 2 if self.expansion else self.error_rate
        return math.ceil(self.block_capacity * native_bits_per_item(first_rate) / 8)

    def designed_rate(self, items: float) -> float:
        """About the false-positive rate once ``items`` are spread over the blocks."""
        return native_error_rate(
            self.block_capacity, self.error_rate, self.expansion, items / self.blocks
        )
