"""Bloom filter sizing and the bit-position scheme shared by every code path.

The scheme (named ``dh48-v1`` in the filter's stored parameters) maps a
fingerprint, a hex digest of at least 16 bytes, to one block and k bit offsets
in it by double hashing (Kirsch and Mitzenmacher, 2006)::

    h1    = int(fp[0:12], 16)            # 48 bits
    h2    = int(fp[12:24], 16)           # 48 bits
    block = int(fp[24:32], 16) mod B     # 32 bits
    p_0   = h1 mod m
    p_i   = (p_(i-1) + (h2 mod m)) mod m,  i = 1 .. k-1

where m (< 2^32 + 1) is the number of bits in one block. Every value stays
below 2^53, so the Lua scripts (which compute with doubles), this module's
pure-Python reference and the vectorised bulk path of the migration compute the
same integers exactly. Offsets are Redis bit offsets (SETBIT/GETBIT: offset 0
is the most significant bit of byte 0).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from ..exceptions import InvalidFingerprintError

SCHEME = "dh48-v1"

#: The scheme of scalable filters' layers: the same double hashing, with m a
#: prime and the step drawn from 1 .. m-1 (``1 + h2 mod (m - 1)``), so the k
#: offsets of every fingerprint are distinct even in a small layer (with
#: dh48-v1, a step of 0 or one sharing a large factor with m collapses them,
#: which costs nothing at the sizes fixed filters have but dominates the error
#: of a first layer of a few hundred bits).
SCHEME_PRIME = "dh48p-v1"

#: One Redis string holds at most 512 MB = 2^32 bits.
MAX_BLOCK_BITS = 2**32

#: The most blocks a filter may have: each is allocated (and checked) at open,
#: so a million of them would hang start-up; 4,096 blocks of 512 MB are 2 TiB.
MAX_BLOCKS = 4096

#: Fewest hex characters a fingerprint must have (16 bytes).
MIN_FINGERPRINT_HEX = 32


class SizingError(ValueError):
    """Parameters no Bloom filter here can have. The message names them in braces
    (``{capacity}``, ``{error_rate}``, ``{blocks}``, ``{bit}``, ``{hashes}``,
    ``{expansion}``, ``{tightening}``, ``{max_layers}``): ``str()`` gives plain words,
    :meth:`named` the names the caller knows them by (settings, options)."""

    PLAIN: dict[str, str] = {
        "capacity": "capacity",
        "error_rate": "error rate",
        "blocks": "blocks",
        "bit": "bit exponent",
        "hashes": "hashes",
        "expansion": "expansion",
        "tightening": "tightening",
        "max_layers": "max layers",
    }

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.named(self.PLAIN))

    def named(self, names: dict[str, str]) -> str:
        return self.template.format_map({**self.PLAIN, **names})


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rate(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1


def _check_capacity_and_rate(capacity: object, error_rate: object) -> None:
    if not _whole(capacity) or capacity < 1:  # type: ignore[operator]
        raise SizingError(
            f"{{capacity}} must be a whole number of fingerprints >= 1, got {capacity!r}"
        )
    if not _rate(error_rate):
        raise SizingError(
            "{error_rate} must be a false-positive rate strictly between 0 and 1 "
            f"(e.g. 0.001), got {error_rate!r}"
        )


def optimal_bits(capacity: int, error_rate: float) -> int:
    """m = ceil(-n ln p / (ln 2)^2)."""
    return math.ceil(-capacity * math.log(error_rate) / (math.log(2) ** 2))


def optimal_hashes(bits: int, capacity: int) -> int:
    """k = round(m / n * ln 2), at least 1."""
    return max(1, round(bits / capacity * math.log(2)))


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def next_prime(n: int) -> int:
    """The smallest prime >= n."""
    while not _is_prime(n):
        n += 1
    return n


def false_positive_rate(bits: int, hashes: int, items: float) -> float:
    """Expected false-positive rate of an m-bit, k-hash filter holding ``items``."""
    if items <= 0:
        return 0.0
    return (1.0 - math.exp(-hashes * items / bits)) ** hashes


@dataclass(frozen=True)
class BloomParams:
    """The shape of one Bloom filter: what is stored beside its bits."""

    capacity: int
    error_rate: float
    block_bits: int
    hashes: int
    blocks: int
    scheme: str = SCHEME

    @classmethod
    def from_capacity(cls, capacity: int, error_rate: float, blocks: int = 0) -> BloomParams:
        """The smallest filter for ``capacity`` fingerprints at ``error_rate``, in
        ``blocks`` blocks (0: as few as fit). Raises :class:`SizingError`."""
        _check_capacity_and_rate(capacity, error_rate)
        if not _whole(blocks) or blocks < 0:
            raise SizingError(
                f"{{blocks}} must be 0 (automatic) or a number of blocks >= 1, got {blocks!r}"
            )
        if blocks > MAX_BLOCKS:
            raise SizingError(
                f"{{blocks}}={blocks:,} is more than the {MAX_BLOCKS:,} blocks a filter may "
                f"have (each is a key allocated at open); use {MAX_BLOCKS:,} or fewer"
            )
        total = optimal_bits(capacity, error_rate)
        hashes = optimal_hashes(total, capacity)
        needed = max(1, math.ceil(total / MAX_BLOCK_BITS))
        if needed > MAX_BLOCKS:
            largest = int(MAX_BLOCKS * MAX_BLOCK_BITS * math.log(2) ** 2 / -math.log(error_rate))
            raise SizingError(
                f"{{capacity}}={capacity:,} at {{error_rate}}={error_rate} needs "
                f"{total / 8 / 2**40:,.1f} TiB of bits in {needed:,} blocks; the largest filter "
                f"is {MAX_BLOCKS:,} blocks of 512 MB (2 TiB), about {largest:,} fingerprints at "
                "this error rate. Lower {capacity}, or use windowed-bloom or a scalable "
                "filter, which grow as needed"
            )
        if blocks == 0:
            blocks = needed
        elif blocks < needed:
            raise SizingError(
                f"{{blocks}}={blocks} is too few: a filter for {capacity:,} fingerprints at "
                f"error rate {error_rate} needs {total:,} bits, and one block (Redis string) holds "
                f"at most {MAX_BLOCK_BITS:,}; use {needed} or more, or 0 for automatic"
            )
        block_bits = max(8, math.ceil(total / blocks))
        return cls(capacity, error_rate, block_bits, hashes, blocks)

    @classmethod
    def from_bit_exponent(cls, bit: int, hashes: int, error_rate: float) -> BloomParams:
        """scrapy-redis-bloomfilter's ``BLOOMFILTER_BIT`` / ``BLOOMFILTER_HASH_NUMBER``:
        one filter of 2^bit bits and k hashes (split into blocks above 2^32 bits)."""
        if not _whole(bit) or not 3 <= bit <= 40:
            raise SizingError(
                f"{{bit}} must be a whole number from 3 to 40 (m = 2^bit), got {bit!r}"
            )
        if not _whole(hashes) or not 1 <= hashes <= 64:
            # Each is a GETBIT per request; past 64 the math underflows too.
            raise SizingError(f"{{hashes}} must be a whole number from 1 to 64, got {hashes!r}")
        if not _rate(error_rate):
            raise SizingError(
                "{error_rate} must be a false-positive rate strictly between 0 and 1, "
                f"got {error_rate!r}"
            )
        total = 2**bit
        blocks = max(1, total // MAX_BLOCK_BITS)
        # The capacity at which this m and k reach the requested error rate.
        capacity = max(1, int(-total / hashes * math.log(1 - error_rate ** (1 / hashes))))
        return cls(capacity, error_rate, total // blocks, hashes, blocks)

    @property
    def total_bits(self) -> int:
        return self.block_bits * self.blocks

    @property
    def memory_bytes(self) -> int:
        return math.ceil(self.block_bits / 8) * self.blocks

    def designed_rate(self, items: float | None = None) -> float:
        return false_positive_rate(
            self.total_bits, self.hashes, self.capacity if items is None else items
        )

    def as_meta(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}

    def block_of(self, fingerprint: str) -> int:
        if self.blocks == 1:
            return 0
        return int(fingerprint[24:32], 16) % self.blocks

    def positions(self, fingerprint: str) -> tuple[int, list[int]]:
        """Reference implementation: (block, k bit offsets) of a hex fingerprint."""
        check_fingerprint(fingerprint)
        m = self.block_bits
        pos = int(fingerprint[0:12], 16) % m
        if self.scheme == SCHEME_PRIME:
            step = 1 + int(fingerprint[12:24], 16) % (m - 1)
        else:
            step = int(fingerprint[12:24], 16) % m
        out = []
        for _ in range(self.hashes):
            out.append(pos)
            pos = (pos + step) % m
        return self.block_of(fingerprint), out


@dataclass(frozen=True)
class Layer:
    """One layer of a scalable filter: its size over the whole filter, and per block."""

    index: int
    capacity: int
    error_rate: float
    block_bits: int
    hashes: int
    block_capacity: int

    def as_params(self, blocks: int) -> BloomParams:
        return BloomParams(
            self.capacity, self.error_rate, self.block_bits, self.hashes, blocks, SCHEME_PRIME
        )


@dataclass(frozen=True)
class Scaling:
    """Scalable Bloom filter (Almeida, Baquero, Preguiça, Hutchison, 2007).

    Layer j holds ``capacity x expansion^j`` fingerprints at error rate
    ``p_0 x tightening^j`` with ``p_0 = P x (1 - tightening)``, so the compound
    false-positive rate stays below P (the sum of a geometric series) however
    many layers there are. A layer fills per block: block b adds its next layer
    when its newest one holds ``ceil(layer capacity / blocks)`` fingerprints
    (counted exactly by the script that adds them). Layers stop at
    ``max_layers``, or earlier where one block of the next layer would exceed
    one Redis string (512 MB); past the last layer the filter degrades like a
    fixed one and says so.
    """

    expansion: int = 2
    tightening: float = 0.5
    max_layers: int = 16

    def __post_init__(self) -> None:
        if not _whole(self.expansion) or self.expansion < 1:
            raise SizingError(
                "{expansion} must be a whole factor >= 1 (2 doubles each new layer), "
                f"got {self.expansion!r}"
            )
        if not _rate(self.tightening):
            raise SizingError(
                "{tightening} must be a ratio strictly between 0 and 1 (e.g. 0.5), "
                f"got {self.tightening!r}"
            )
        if not _whole(self.max_layers) or self.max_layers < 1:
            raise SizingError(
                f"{{max_layers}} must be a whole number >= 1, got {self.max_layers!r}"
            )

    def first_layer(self, capacity: int, error_rate: float, blocks: int = 0) -> BloomParams:
        """Layer 0, whose error rate leaves room for every layer after it."""
        if not _rate(error_rate):
            raise SizingError(
                "{error_rate} must be a false-positive rate strictly between 0 and 1 "
                f"(e.g. 0.001), got {error_rate!r}"
            )
        fixed = BloomParams.from_capacity(capacity, error_rate * (1 - self.tightening), blocks)
        block_bits = next_prime(max(fixed.block_bits, 3))
        if block_bits > MAX_BLOCK_BITS:  # only just under a block's limit: one block more
            return self.first_layer(capacity, error_rate, fixed.blocks + 1)
        return replace(fixed, block_bits=block_bits, scheme=SCHEME_PRIME)

    def compound_error_rate(self, first: BloomParams) -> float:
        """The bound P: the sum over all layers of their error rates."""
        return first.error_rate / (1 - self.tightening)

    def layers(self, first: BloomParams) -> list[Layer]:
        """Every layer the filter may have, layer 0 being ``first``."""
        out = [
            Layer(
                0,
                first.capacity,
                first.error_rate,
                first.block_bits,
                first.hashes,
                math.ceil(first.capacity / first.blocks),
            )
        ]
        for j in range(1, self.max_layers):
            capacity = first.capacity * self.expansion**j
            rate = first.error_rate * self.tightening**j
            total = optimal_bits(capacity, rate)
            block_bits = next_prime(max(8, math.ceil(total / first.blocks)))
            if block_bits > MAX_BLOCK_BITS:
                break
            hashes = optimal_hashes(total, capacity)
            out.append(
                Layer(j, capacity, rate, block_bits, hashes, math.ceil(capacity / first.blocks))
            )
        return out

    def as_meta(self) -> dict[str, str]:
        return {
            "scaling": "1",
            "expansion": str(self.expansion),
            "tightening": repr(float(self.tightening)),
            "max_layers": str(self.max_layers),
        }


_HEX = frozenset("0123456789abcdefABCDEF")


def is_hex_fingerprint(fingerprint: object) -> bool:
    """What the Lua scripts accept: only hex digits, at least 32 of them."""
    return (
        isinstance(fingerprint, str)
        and len(fingerprint) >= MIN_FINGERPRINT_HEX
        and _HEX.issuperset(fingerprint)
    )


def check_fingerprint(fingerprint: str) -> None:
    if not is_hex_fingerprint(fingerprint):
        raise InvalidFingerprintError(
            f"fingerprint {fingerprint!r} is not a hex digest of at least 16 bytes "
            f"({MIN_FINGERPRINT_HEX} hex characters); the Bloom backends hash the digest itself. "
            "Use DEDUP_FINGERPRINTER='scrapy-redis' or 'scrapy', or a REQUEST_FINGERPRINTER_CLASS "
            "that returns a cryptographic digest"
        )
