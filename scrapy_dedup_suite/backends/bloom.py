"""``bloom``: a Bloom filter in Redis bitmaps, sized from capacity and error rate.

Layout for base key K: blocks ``{K:0}`` ... ``{K:B-1}`` (Redis strings of m
bits each; the hash tag keeps whatever one call touches in one cluster slot
while different blocks land in different slots) and the parameter record
``K:meta`` (a hash: capacity, error rate, m, k, blocks, hashing scheme),
checked every time the filter is opened, with a stamp ``{K:b}:meta`` per block in
the block's slot (lua/stamp.lua). All k bits of a fingerprint are in one block,
chosen from the fingerprint; a check-and-add is one Lua call (GETBIT x k, then
the stamp, STRLEN and SETBIT of the missing bits).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError
from scrapy.settings import BaseSettings

from .. import config, scripts
from ..bloom_math import BloomParams, Layer, Scaling, check_fingerprint
from ..exceptions import FilterMismatchError
from ..options import BloomOptions
from .base import (
    BULK_TARGET,
    LAYOUT_VERSION,
    REPORT_FILL,
    DedupBackend,
    MetaSpec,
    as_str,
    migration_state_key,
)

logger = logging.getLogger(__name__)

#: Bytes one BITCOUNT call counts when measuring fill (keeps each call short).
_BITCOUNT_CHUNK = 1 << 20

#: Meta fields that must match for the stored bits to mean the same thing.
COMPARED = ("layout", "scheme", "block_bits", "hashes", "blocks")
#: ... and for a scalable filter, its growth.
SCALING_COMPARED = ("scaling", "expansion", "tightening", "max_layers", "compound_error_rate")


def block_prefix(key: str, block: int) -> str:
    """Hash-tagged name shared by everything stored for one block."""
    return f"{{{key}:{block}}}"


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
    estimated = -m / k * math.log(1 - ratio) if ratio < 1 else float("inf")
    return {
        "set_bits": set_bits,
        "fill_ratio": ratio,
        "estimated_items": estimated,
        "estimated_error_rate": ratio**k,
        "over_capacity": estimated > params.capacity,
    }


def layer_summary(info: dict[str, Any]) -> dict[str, Any]:
    """Each layer's fill, for a scalable filter's report (nothing for a fixed one)."""
    if "layers" not in info:
        return {}
    keep = ("layer", "capacity", "items", "fill_ratio", "estimated_error_rate", "blocks_using")
    return {"layers": [{k: layer[k] for k in keep} for layer in info["layers"]]}


class Layered:
    """What the bloom and windowed-bloom backends share about scalable filters.

    ``self.params`` is the fixed filter, or the first layer of a scalable one
    (build it with :meth:`Scaling.first_layer`); ``self.scaling`` is None for a
    fixed filter.
    """

    server: Any
    key: str
    name: str
    meta_key: str
    params: BloomParams
    scaling: Scaling | None
    layers: list[Layer]
    _schedule: list[str]
    _full_warned: bool
    _stamp: str | None

    def _set_shape(self, params: BloomParams, scaling: Scaling | None) -> None:
        self.params = params
        self.scaling = scaling
        self._m = str(params.block_bits)
        self._k = str(params.hashes)
        self.layers_added = 0
        self._full_warned = False
        self._stamp = None
        if scaling is None:
            self.layers = []
            self._schedule = []
            return
        self.layers = scaling.layers(params)
        self._schedule = []
        for layer in self.layers:
            self._schedule += [str(layer.block_bits), str(layer.hashes), str(layer.block_capacity)]
        # Layers sent with each call: those known to be in use, and one more.
        self._known = 1
        self._sent = 1
        self._send: list[str] = []
        self._know(1)
        self.add_script = scripts.SCALABLE_ADD
        self.contains_script = scripts.SCALABLE_CONTAINS

    @property
    def error_rate(self) -> float:
        """The designed false-positive rate (for a scalable filter: the compound bound)."""
        if self.scaling is None:
            return self.params.error_rate
        return self.scaling.compound_error_rate(self.params)

    def shape_meta(self) -> tuple[dict[str, str], tuple[str, ...]]:
        fields = {"backend": self.name, "layout": LAYOUT_VERSION, **self.params.as_meta()}
        if self.scaling is None:
            return fields, COMPARED
        fields.update(self.scaling.as_meta(), compound_error_rate=repr(self.error_rate))
        return fields, (*COMPARED, *SCALING_COMPARED)

    def compare_meta(self, spec: MetaSpec, stored: Any) -> None:
        if stored.get("backend") == spec.fields["backend"]:
            kinds = {None: "fixed", "1": "scalable"}
            was, now = stored.get("scaling"), spec.fields.get("scaling")
            if was != now:
                raise FilterMismatchError(
                    f"The {self.name} filter at {self.key!r} was created as a "
                    f"{kinds.get(was, repr(was))} filter (scaling: stored {was!r}) and is opened "
                    f"as a {kinds.get(now, repr(now))} one. Set DEDUP_BLOOM_SCALING (or "
                    "DEDUP_BLOOM_EXPANSION) as when it was created, or point the dupefilter at "
                    "another key with SCHEDULER_DUPEFILTER_KEY."
                )
        super().compare_meta(spec, stored)  # type: ignore[misc]

    def _open(self) -> None:
        self.adopt_stored_first_layer()
        super()._open()  # type: ignore[misc]

    def verify(self) -> bool:
        self.adopt_stored_first_layer()
        return super().verify()  # type: ignore[misc]

    def adopt_stored_first_layer(self) -> None:
        """A scalable filter keeps the first layer it was created with.

        Its initial capacity is a creation-time choice (``scrapy
        migrate-set-to-bloom`` sizes it from the source set), so a crawler
        configured with another DEDUP_BLOOM_CAPACITY uses the stored one, as long
        as everything that decides the growth (error rate, expansion,
        tightening, layers, blocks, scheme) is the same; those are still checked.
        """
        if self.scaling is None:
            return
        stored = {as_str(k): as_str(v) for k, v in self.server.hgetall(self.meta_key).items()}
        if stored.get("scaling") != "1" or "capacity" not in stored:
            return
        try:
            capacity = int(stored["capacity"])
        except ValueError:
            return
        if capacity == self.params.capacity:
            return
        first = self.scaling.first_layer(capacity, self.error_rate, self.params.blocks)
        logger.info(
            "The scalable %s filter at %r was created with a first layer for %s fingerprints "
            "(DEDUP_BLOOM_CAPACITY here: %s); using the stored one",
            self.name,
            self.key,
            f"{capacity:,}",
            f"{self.params.capacity:,}",
        )
        self._set_shape(first, self.scaling)

    def _know(self, layers: int) -> None:
        """Some block uses ``layers`` layers: send that many and one more from now on."""
        if layers > len(self.layers):
            raise FilterMismatchError(
                f"A block of the scalable {self.name} filter at {self.key!r} uses {layers} "
                f"layers; these settings allow {len(self.layers)}. It was grown with another "
                "DEDUP_BLOOM_MAX_LAYERS; use the settings it was created with."
            )
        self._known = max(self._known, layers)
        self._sent = min(len(self.layers), self._known + 1)
        self._send = [str(len(self.layers)), *self._schedule[: 3 * self._sent]]

    def layer_group(self, base: str) -> list[str]:
        """The keys of the filter at ``base`` a call touches: its layer record, then
        the layers sent (layers.lua)."""
        return [f"{base}:layers", *self.layer_keys(base)[: self._sent]]

    def layered_call(
        self, bases: Sequence[str], stamp_key: str | None, fingerprint: str, ttl_ms: int
    ) -> tuple[list[str], list[Any]]:
        """Keys and arguments of the scalable scripts: with ``stamp_key`` the add
        (scalable_add.lua), without it the membership test (scalable_contains.lua)."""
        keys = [key for base in bases for key in self.layer_group(base)]
        if stamp_key is None:
            return keys, [fingerprint, *self._send]
        return [stamp_key, *keys], [self.stamp, fingerprint, ttl_ms, *self._send]

    def again(self, answer: Any) -> bool:
        return self.scaling is not None and answer <= -11

    def call(self, script: scripts.LuaScript, make: Any) -> Any:
        answer = super().call(script, make)  # type: ignore[misc]
        # A block uses (or is about to add) a layer this call was not sent: send
        # more. Each answer asks for more than the last, so this ends.
        for _ in range(len(self.layers)):
            if not self.again(answer):
                break
            self._know(-answer - 10)
            answer = super().call(script, make)  # type: ignore[misc]
        if not self.again(answer):
            return answer
        raise FilterMismatchError(
            f"The scalable {self.name} filter at {self.key!r} asked for more layers than "
            f"these settings allow ({len(self.layers)}); use the settings it was created with."
        )

    def on_grown(self, answer: int) -> None:
        if answer == -1:
            self.layers_added += 1
            logger.info("The scalable %s filter at %r added a layer", self.name, self.key)
        elif answer == -2 and not self._full_warned:
            self._full_warned = True
            last = self.layers[-1]
            logger.warning(
                "The scalable %s filter at %r is past its last layer (%d layers, the last for "
                "%s fingerprints at %.2g): its false-positive rate now grows. Raise "
                "DEDUP_BLOOM_MAX_LAYERS or DEDUP_BLOOM_BLOCKS for a new filter, or move to a "
                "larger one.",
                self.name,
                self.key,
                len(self.layers),
                f"{last.capacity:,}",
                last.error_rate,
            )

    def _place_blocks(self, blocks: int) -> None:
        """The stamp of each block, and how to tell a key of this filter's blocks."""
        self.stamp_keys = [self.block_stamp(b) for b in range(blocks)]
        self._block_re = re.compile("^" + re.escape("{" + self.key + ":") + r"([0-9]+)\}")

    def block(self, fingerprint: str) -> int:
        """The block that holds ``fingerprint``'s bits."""
        try:
            return self.params.block_of(fingerprint)
        except (ValueError, TypeError):
            check_fingerprint(fingerprint)
            raise

    def block_stamp(self, block: int) -> str:
        """The stamp of block ``block`` (lua/stamp.lua): in the block's hash tag."""
        return f"{block_prefix(self.key, block)}:meta"

    def stamp_of(self, data_key: str) -> str | None:
        match = self._block_re.match(data_key)
        return self.block_stamp(int(match.group(1))) if match else None

    def migration_keys(self) -> dict[str, str]:
        keys = {migration_state_key(self.key): "hash"}
        for block in range(self.params.blocks):
            keys[f"{block_prefix(self.key, block)}:migrating"] = "string"
        return keys

    def layer_keys(self, base: str) -> list[str]:
        """Keys of every layer a filter at ``base`` may have (the first is ``base``)."""
        return [base] + [f"{base}:L{j}" for j in range(1, len(self.layers))]

    def layer_report(self, bases: list[str]) -> list[dict[str, Any]]:
        """Per layer: size, how many blocks use it, items counted, fill."""
        pipe = self.server.pipeline(transaction=False)
        for base in bases:
            pipe.hmget(f"{base}:layers", "n", "count")
        states = [(int(n or 1), int(c or 0)) for n, c in pipe.execute()]
        out = []
        for layer in self.layers:
            j = layer.index
            using = [(base, n, c) for base, (n, c) in zip(bases, states) if n > j]
            if not using:
                break
            items = sum(c if n == j + 1 else layer.block_capacity for _, n, c in using)
            keys = [self.layer_keys(base)[j] for base, _, _ in using]
            set_bits = sum(bitmap_fill(self.server, k, layer.block_bits) for k in keys)
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


class BloomBackend(Layered, DedupBackend):
    name = "bloom"
    is_bloom = True
    capabilities = frozenset({REPORT_FILL, BULK_TARGET})
    spread_setting = "DEDUP_BLOOM_BLOCKS"
    add_script = scripts.BLOOM_ADD
    contains_script = scripts.BLOOM_CONTAINS

    def __init__(
        self,
        server: Any,
        key: str,
        params: BloomParams | None = None,
        scaling: Scaling | None = None,
    ) -> None:
        """``params``: the filter, or with ``scaling`` its first layer
        (``scaling.first_layer(capacity, error_rate)``)."""
        super().__init__(server, key)
        if params is None:
            params = BloomParams.from_capacity(
                config.default("DEDUP_BLOOM_CAPACITY"), config.default("DEDUP_BLOOM_ERROR_RATE")
            )
        self.meta_key = f"{key}:meta"
        self.block_keys = [block_prefix(key, b) for b in range(params.blocks)]
        self._place_blocks(params.blocks)
        self._set_shape(params, scaling)

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> BloomBackend:
        bloom = BloomOptions.from_settings(settings)
        return cls(server, key, bloom.params, bloom.scaling)

    def meta_spec(self) -> MetaSpec:
        fields, compared = self.shape_meta()
        return MetaSpec(self.meta_key, {**fields, "created": str(int(time.time()))}, compared)

    def with_key(self, key: str) -> BloomBackend:
        return BloomBackend(self.server, key, self.params, self.scaling)

    def _before_writing(self, found: dict[str, str]) -> None:
        missing = sum(found.get(block, "none") == "none" for block in self.block_keys)
        if missing:
            self.check_room(missing * ((self.params.block_bits + 7) // 8), "DEDUP_BLOOM_CAPACITY")

    def _prepare(self) -> None:
        for block, stamp in zip(self.block_keys, self.stamp_keys):
            keys = [stamp, block] if self.scaling is None else [stamp, block, f"{block}:layers"]
            try:
                scripts.BITMAP_ALLOC(self.server, keys, [self.stamp, self._m])
            except ResponseError as exc:
                if "dedup:" not in str(exc):
                    raise
                damage = str(exc).split("dedup: ", 1)[1].split(" script:")[0]
                raise FilterMismatchError(
                    f"The {self.name} filter at {self.key!r} is damaged: {damage}. Nothing was "
                    "changed. Rebuild it (scrapy migrate-set-to-bloom from a set, or a new "
                    "SCHEDULER_DUPEFILTER_KEY) and find what removed or rewrote its keys "
                    "(eviction, a manual DEL or SET)."
                ) from None

    def block_key(self, fingerprint: str) -> str:
        return self.block_keys[self.block(fingerprint)]

    def add_call(self, fingerprint: str, expire: float | None) -> tuple[list[str], list[Any]]:
        b = self.block(fingerprint)
        if self.scaling is not None:
            return self.layered_call([self.block_keys[b]], self.stamp_keys[b], fingerprint, 0)
        return [self.stamp_keys[b], self.block_keys[b]], [self.stamp, fingerprint, self._m, self._k]

    def contains_call(self, fingerprint: str) -> tuple[list[str], list[Any]]:
        if self.scaling is not None:
            return self.layered_call([self.block_key(fingerprint)], None, fingerprint, 0)
        return [self.block_key(fingerprint)], [fingerprint, self._m, self._k]

    def owned_keys(self) -> list[str]:
        return list(self.expected_types())

    def expected_types(self) -> dict[str, str]:
        types = dict.fromkeys(self.block_keys, "string")
        types.update(dict.fromkeys(self.stamp_keys, "string"))
        if self.scaling is not None:
            for block in self.block_keys:
                types.update(dict.fromkeys(self.layer_keys(block)[1:], "string"))
                types[f"{block}:layers"] = "hash"
        types[self.meta_key] = "hash"
        return types

    def bulk_target(self, block: int) -> tuple[str, int]:
        return self.block_keys[block], 0

    def bulk_fill(self) -> tuple[str, float]:
        return "", self.info()["estimated_items"]

    def filter_reports(self) -> list[dict[str, Any]]:
        info = self.info()
        keep = ("fill_ratio", "estimated_items", "estimated_error_rate", "over_capacity")
        return [
            {
                **{k: info[k] for k in keep},
                "capacity": info["capacity"],
                "error_rate": info["error_rate"],
                **layer_summary(info),
            }
        ]

    def info(self) -> dict[str, Any]:
        info = super().info()
        set_bits = sum(bitmap_fill(self.server, k, self.params.block_bits) for k in self.block_keys)
        info.update(
            capacity=self.params.capacity,
            error_rate=self.error_rate,
            bits=self.params.total_bits,
            hashes=self.params.hashes,
            blocks=self.params.blocks,
            **fill_report(self.params, set_bits),
        )
        if self.scaling is not None:
            layers = self.layer_report(self.block_keys)
            info.update(
                scaling=True,
                expansion=self.scaling.expansion,
                tightening=self.scaling.tightening,
                max_layers=len(self.layers),
                layers=layers,
                # Over the layers in use, the rate their fill implies, summed.
                estimated_error_rate=min(1.0, sum(x["estimated_error_rate"] for x in layers)),
                estimated_items=sum(x["estimated_items"] for x in layers),
                over_capacity=layers[-1]["layer"] == len(self.layers) - 1
                and layers[-1]["over_capacity"],
            )
        return info
