"""What varies between Bloom filters: a fixed size, or scalable layers.

A shape owns the scripts that check and add, the keys a call touches (all of
them in KEYS), the arguments, what the answers mean, its fields in the
parameter record and its fill report. The bloom and windowed-bloom backends
only say where their filters live: one filter per block, or one per time bucket
of each block; a call names, per block, the filters to check (the first one
receives new fingerprints) and the block's stamp.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ..core.bloom_math import BloomParams, Layer, Scaling
from ..exceptions import FilterMismatchError
from ..server import scripts
from ..server.answers import FULL, GREW, layers_needed, sent_again
from .keys import layer_key, layers_key
from .stored import LAYOUT_VERSION

logger = logging.getLogger(__name__)

#: Bytes one BITCOUNT call counts when measuring fill (keeps each call short).
_BITCOUNT_CHUNK = 1 << 20

#: Record fields that must match for the stored bits to mean the same thing.
COMPARED = ("layout", "scheme", "block_bits", "hashes", "blocks")
#: ... and for a scalable filter, its growth.
SCALING_COMPARED = ("scaling", "expansion", "tightening", "max_layers", "compound_error_rate")


def bitmap_fill(server: Any, key: str, bits: int) -> int:
    """Number of set bits in ``key``, counted in short BITCOUNT calls."""
    size = math.ceil(bits / 8)
    total = 0
    for start in range(0, size, _BITCOUNT_CHUNK * 8):
        pipe = server.pipeline(transaction=False)
        for chunk in range(start, min(size, start + _BITCOUNT_CHUNK * 8), _BITCOUNT_CHUNK):
            pipe.bitcount(key, chunk, min(size, chunk + _BITCOUNT_CHUNK) - 1)
        total += sum(int(v) for v in pipe.execute())
    return total


def fill_report(params: BloomParams, set_bits: int) -> dict[str, Any]:
    """Fill ratio, estimated items and the false-positive rate that fill implies."""
    m = params.total_bits
    ratio = set_bits / m if m else 0.0
    k = params.hashes
    # (max: an empty filter is 0 items, not -0.)
    estimated = max(0.0, -m / k * math.log(1 - ratio)) if ratio < 1 else float("inf")
    return {
        "set_bits": set_bits,
        "fill_ratio": ratio,
        "estimated_items": estimated,
        "estimated_error_rate": ratio**k,
        "over_capacity": estimated > params.capacity,
    }


class Shape(ABC):
    """A Bloom filter's shape. ``params``: the filter, or a scalable one's first layer."""

    add_script: scripts.LuaScript
    contains_script: scripts.LuaScript

    def __init__(self, params: BloomParams) -> None:
        self.params = params

    @property
    @abstractmethod
    def error_rate(self) -> float:
        """The designed false-positive rate (a scalable filter: the compound bound)."""

    @abstractmethod
    def meta(self, backend: str) -> tuple[dict[str, str], tuple[str, ...]]:
        """The parameter record's fields, and those that must match at open."""

    @abstractmethod
    def group(self, stamp_key: str, filters: Sequence[str]) -> list[str]:
        """The keys a call touches for one block: its stamp, then what each of its
        ``filters`` (the first receives new fingerprints) needs."""

    @abstractmethod
    def add_header(self, stamp: str, ttl_ms: int, filters: int) -> list[Any]:
        """The arguments of :attr:`add_script` before the fingerprints (``ttl_ms``: the
        expiry keys the call creates must carry, 0 for none)."""

    @abstractmethod
    def contains_call(self, filters: Sequence[str], fp: str) -> tuple[list[str], list[Any]]:
        """Keys and arguments of :attr:`contains_script` for one fingerprint."""

    @abstractmethod
    def filter_types(self, base: str) -> dict[str, str]:
        """Every key a filter at ``base`` may have, with its Redis type."""

    @abstractmethod
    def alloc_keys(self, stamp_key: str, base: str) -> list[str]:
        """The keys of lua/bitmap_alloc.lua that create the filter at ``base``."""

    @abstractmethod
    def report(self, server: Any, bases: Sequence[str]) -> dict[str, Any]:
        """Fill and estimates of one filter made of the blocks at ``bases``."""

    def again(self, answer: int) -> bool:
        """Whether a script's answer asks for the call to be made again with more."""
        return False

    def learn(self, answers: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """Act on answers that asked for more (:meth:`again`) before calling again."""

    #: How many times a call may be made again (each time with more).
    retries = 0

    def grown(self, answer: int, backend: str) -> None:  # noqa: B027 - optional hook
        """A fingerprint was added with a negative answer (a scalable filter grew)."""


class Fixed(Shape):
    """A filter of one size: k bits per fingerprint in an m-bit bitmap per block."""

    add_script = scripts.FILTER_ADD
    contains_script = scripts.BLOOM_CONTAINS

    def __init__(self, params: BloomParams) -> None:
        super().__init__(params)
        self._m = str(params.block_bits)
        self._k = str(params.hashes)
        self._header: tuple[tuple[str, int, int], list[Any]] = (("", 0, 0), [])

    @property
    def error_rate(self) -> float:
        return self.params.error_rate

    def meta(self, backend: str) -> tuple[dict[str, str], tuple[str, ...]]:
        return {"backend": backend, "layout": LAYOUT_VERSION, **self.params.as_meta()}, COMPARED

    def group(self, stamp_key: str, filters: Sequence[str]) -> list[str]:
        return [stamp_key, *filters]

    def add_header(self, stamp: str, ttl_ms: int, filters: int) -> list[Any]:
        # The same for every call of a bloom filter (the per-request path): kept.
        made, header = self._header
        if made != (stamp, ttl_ms, filters):
            header = [stamp, self._m, self._k, filters, ttl_ms]
            self._header = ((stamp, ttl_ms, filters), header)
        return header

    def contains_call(self, filters: Sequence[str], fp: str) -> tuple[list[str], list[Any]]:
        return list(filters), [fp, self._m, self._k]

    def filter_types(self, base: str) -> dict[str, str]:
        return {base: "string"}

    def alloc_keys(self, stamp_key: str, base: str) -> list[str]:
        return [stamp_key, base]

    def report(self, server: Any, bases: Sequence[str]) -> dict[str, Any]:
        bits = sum(bitmap_fill(server, key, self.params.block_bits) for key in bases)
        return fill_report(self.params, bits)


class Scalable(Shape):
    """Layers added as each fills (Almeida et al., 2007), per block; lua/layers.lua.

    Each call sends the layers known to be in use and one more; an answer below
    ``answers.MORE`` says a block uses (or is about to add) layer
    ``answers.layers_needed(answer)``, and the call is made again with more
    (:meth:`learn`)."""

    add_script = scripts.SCALABLE_ADD
    contains_script = scripts.SCALABLE_CONTAINS

    def __init__(self, first: BloomParams, scaling: Scaling, where: str = "") -> None:
        super().__init__(first)
        self.scaling = scaling
        self.where = where
        self.layers: list[Layer] = scaling.layers(first)
        self.retries = len(self.layers)
        self._schedule: list[str] = []
        for layer in self.layers:
            self._schedule += [str(layer.block_bits), str(layer.hashes), str(layer.block_capacity)]
        self._total = str(len(self.layers))
        self.layers_added = 0
        self._full_warned = False
        self._known = 1
        self._sent = 1
        self._know(1)

    @property
    def error_rate(self) -> float:
        return self.scaling.compound_error_rate(self.params)

    def meta(self, backend: str) -> tuple[dict[str, str], tuple[str, ...]]:
        fields = {"backend": backend, "layout": LAYOUT_VERSION, **self.params.as_meta()}
        fields.update(self.scaling.as_meta(), compound_error_rate=repr(self.error_rate))
        return fields, (*COMPARED, *SCALING_COMPARED)

    def _know(self, layers: int) -> None:
        """Some block uses ``layers`` layers: send that many and one more from now on."""
        if layers > len(self.layers):
            raise FilterMismatchError(
                f"A block of the scalable filter at {self.where!r} uses {layers} layers; these "
                f"settings allow {len(self.layers)}. It was grown with another "
                "DEDUP_BLOOM_MAX_LAYERS; use the settings it was created with."
            )
        self._known = max(self._known, layers)
        self._sent = min(len(self.layers), self._known + 1)

    def layer_keys(self, base: str) -> list[str]:
        """Keys of every layer a filter at ``base`` may have (the first is ``base``)."""
        return [layer_key(base, j) for j in range(len(self.layers))]

    def group(self, stamp_key: str, filters: Sequence[str]) -> list[str]:
        keys = [stamp_key]
        for base in filters:
            keys.append(layers_key(base))
            keys += self.layer_keys(base)[: self._sent]
        return keys

    def add_header(self, stamp: str, ttl_ms: int, filters: int) -> list[Any]:
        return [stamp, ttl_ms, filters, self._total, self._sent, *self._schedule[: 3 * self._sent]]

    def contains_call(self, filters: Sequence[str], fp: str) -> tuple[list[str], list[Any]]:
        keys = self.group("", filters)[1:]
        return keys, [fp, self._total, *self._schedule[: 3 * self._sent]]

    def filter_types(self, base: str) -> dict[str, str]:
        types = dict.fromkeys(self.layer_keys(base), "string")
        types[layers_key(base)] = "hash"
        return types

    def alloc_keys(self, stamp_key: str, base: str) -> list[str]:
        return [stamp_key, base, layers_key(base)]

    def again(self, answer: int) -> bool:
        return sent_again(answer)

    def learn(self, answers: Sequence[int]) -> None:
        self._know(max(layers_needed(answer) for answer in answers))

    def grown(self, answer: int, backend: str) -> None:
        if answer == GREW:
            self.layers_added += 1
            logger.info("The scalable %s filter at %r added a layer", backend, self.where)
        elif answer == FULL and not self._full_warned:
            self._full_warned = True
            last = self.layers[-1]
            logger.warning(
                "The scalable %s filter at %r is past its last layer (%d layers, the last for "
                "%s fingerprints at %.2g): its false-positive rate now grows. Raise "
                "DEDUP_BLOOM_MAX_LAYERS or DEDUP_BLOOM_BLOCKS for a new filter, or move to a "
                "larger one.",
                backend,
                self.where,
                len(self.layers),
                f"{last.capacity:,}",
                last.error_rate,
            )

    def layer_report(self, server: Any, bases: Sequence[str]) -> list[dict[str, Any]]:
        """Per layer: size, how many blocks use it, items counted, fill."""
        pipe = server.pipeline(transaction=False)
        for base in bases:
            pipe.hmget(layers_key(base), "n", "count")
        states = [(int(n or 1), int(c or 0)) for n, c in pipe.execute()]
        out = []
        for layer in self.layers:
            j = layer.index
            using = [(base, n, c) for base, (n, c) in zip(bases, states) if n > j]
            if not using:
                break
            items = sum(c if n == j + 1 else layer.block_capacity for _, n, c in using)
            keys = [self.layer_keys(base)[j] for base, _, _ in using]
            set_bits = sum(bitmap_fill(server, k, layer.block_bits) for k in keys)
            params = layer.as_params(self.params.blocks)
            fill = fill_report(params, set_bits)
            # Only the last layer the schedule allows can be over its capacity: the
            # others hand over to the next layer when full.
            fill["over_capacity"] = fill["over_capacity"] and j == len(self.layers) - 1
            out.append(
                {
                    "layer": j,
                    "capacity": layer.capacity,
                    "error_rate": layer.error_rate,
                    "bits": params.total_bits,
                    "hashes": layer.hashes,
                    "blocks_using": len(using),
                    "items": items,
                    **fill,
                }
            )
        return out

    def report(self, server: Any, bases: Sequence[str]) -> dict[str, Any]:
        layers = self.layer_report(server, bases)
        # Every block uses the first layer: its bits are counted there once.
        return {
            **fill_report(self.params, layers[0]["set_bits"]),
            "layers": layers,
            # Over the layers in use, the rate their fill implies, summed.
            "estimated_error_rate": min(1.0, sum(x["estimated_error_rate"] for x in layers)),
            "estimated_items": sum(x["estimated_items"] for x in layers),
            "over_capacity": layers[-1]["layer"] == len(self.layers) - 1
            and layers[-1]["over_capacity"],
        }


def make_shape(params: BloomParams, scaling: Scaling | None, where: str = "") -> Shape:
    """A fixed filter, or with ``scaling`` a scalable one whose first layer is ``params``."""
    return Fixed(params) if scaling is None else Scalable(params, scaling, where)
