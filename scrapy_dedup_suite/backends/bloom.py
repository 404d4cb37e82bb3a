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
import time
from collections.abc import Mapping, Sequence
from typing import Any

from redis.exceptions import ResponseError
from scrapy.settings import BaseSettings

from ..core.bloom_math import BloomParams, Layer, Scaling, check_fingerprint
from ..exceptions import FilterMismatchError
from ..server import scripts
from ..server.failures import script_failure
from ..settings.options import BloomOptions
from ..settings.table import default
from . import admission
from .base import DedupBackend
from .capabilities import Capabilities
from .keys import block_prefix, block_re, meta_key, migrating_key, migration_state_key, read_hash
from .layout import Blocks
from .meta import MetaSpec
from .reports import BloomSizing, Contents, FilterFill, FilterInfo
from .shape import Scalable, Shape, make_shape

logger = logging.getLogger(__name__)


def default_params() -> BloomParams:
    return BloomParams.from_capacity(
        default("DEDUP_BLOOM_CAPACITY"), default("DEDUP_BLOOM_ERROR_RATE")
    )


class BloomBlocks(Blocks):
    """Blocks of Lua Bloom filters in the filter's shape (fixed or scalable): the shape
    says what a call takes and answers, the blocks where (see :class:`~.layout.Blocks`)."""

    def __init__(
        self, stamp_keys: list[str], filters: list[list[str]], shape: Shape, name: str
    ) -> None:
        super().__init__(stamp_keys, filters)
        self.shape = shape
        self.name = name

    @property
    def add_script(self) -> scripts.LuaScript:
        return self.shape.add_script

    @property
    def contains_script(self) -> scripts.LuaScript:
        return self.shape.contains_script

    @property
    def retries(self) -> int:
        return self.shape.retries

    def block(self, fingerprint: str) -> int:
        try:
            return self.shape.params.block_of(fingerprint)
        except (ValueError, TypeError):
            check_fingerprint(fingerprint)
            raise

    def keys(self, group: int, context: Any) -> list[str]:
        return self.shape.group(self.stamp_keys[group], self.filters(context)[group])

    def header(self, context: Any, stamp: str) -> list[Any]:
        filters = len(self.filters(context)[0])
        return self.shape.add_header(stamp, self.ttl_ms(context), filters)

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        filters = self.filters(context)[self.block(fingerprint)]
        return self.shape.contains_call(filters, fingerprint)

    def again(self, answer: Any) -> bool:
        return self.shape.again(answer)

    def learn(self, answers: Sequence[Any], fingerprints: Sequence[str]) -> None:
        self.shape.learn(answers)

    def grown(self, answer: int, fingerprint: str) -> None:
        self.shape.grown(answer, self.name)

    def again_error(self, name: str, key: str) -> Exception:
        return FilterMismatchError(
            f"The scalable {name} filter at {key!r} asked for more layers than these "
            f"settings allow ({self.retries}); use the settings it was created with."
        )


class BlockedBloom(DedupBackend):
    """What the bloom and windowed-bloom backends share: Bloom filters split into
    blocks (a fingerprint's bits all in the block ``fp[24:32] % B`` chooses), each
    block with its stamp, in the filter's :class:`~.shape.Shape` (fixed or scalable).

    Its layout (:class:`BloomBlocks`) says where a block's filters live: the block
    itself, or (windowed) its live time buckets, the one receiving new fingerprints first.
    """

    layout: BloomBlocks

    capabilities = Capabilities(probabilistic=True, hex_fingerprints=True)
    spread_setting = "DEDUP_BLOOM_BLOCKS"

    def __init__(self, server: Any, key: str, params: BloomParams, scaling: Scaling | None) -> None:
        super().__init__(server, key)
        self.meta_key = meta_key(key)
        self.prefixes = [block_prefix(key, b) for b in range(params.blocks)]
        self.stamp_keys = [meta_key(prefix) for prefix in self.prefixes]
        self._block_re = block_re(key)
        filters = [[block] for block in self.prefixes]
        shape = make_shape(params, scaling, key)
        self.layout = BloomBlocks(self.stamp_keys, filters, shape, self.name)

    # -- the shape ---------------------------------------------------------------------

    @property
    def shape(self) -> Shape:
        return self.layout.shape

    @property
    def params(self) -> BloomParams:
        """The filter (per bucket), or a scalable filter's first layer."""
        return self.shape.params

    @property
    def scaling(self) -> Scaling | None:
        return self.shape.scaling if isinstance(self.shape, Scalable) else None

    @property
    def layers(self) -> list[Layer]:
        return self.shape.layers if isinstance(self.shape, Scalable) else []

    @property
    def layers_added(self) -> int:
        return self.shape.layers_added if isinstance(self.shape, Scalable) else 0

    @property
    def error_rate(self) -> float:
        """The designed false-positive rate (for a scalable filter: the compound bound)."""
        return self.shape.error_rate

    def layer_keys(self, base: str) -> list[str]:
        """Keys of every layer a filter at ``base`` may have (the first is ``base``)."""
        return self.shape.layer_keys(base) if isinstance(self.shape, Scalable) else [base]

    def resize_first_layer(self, first: BloomParams) -> None:
        """A scalable filter with another first layer (the one it was created with, or
        the one a migration sizes for its source set)."""
        assert isinstance(self.shape, Scalable)
        self.layout.shape = Scalable(first, self.shape.scaling, self.key)
        self._stamp = None

    def shape_meta(self) -> tuple[dict[str, str], tuple[str, ...]]:
        return self.shape.meta(self.name)

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
        super().compare_meta(spec, stored)

    def _open(self) -> None:
        self.adopt_stored_first_layer()
        super()._open()

    def verify(self) -> bool:
        self.adopt_stored_first_layer()
        return super().verify()

    def adopt_stored_first_layer(self) -> None:
        """A scalable filter keeps the first layer it was created with.

        Its initial capacity is a creation-time choice (``scrapy
        migrate-set-to-bloom`` sizes it from the source set), so a crawler
        configured with another DEDUP_BLOOM_CAPACITY uses the stored one, as long
        as everything that decides the growth (error rate, expansion,
        tightening, layers, blocks, scheme) is the same; those are still checked.
        """
        if not isinstance(self.shape, Scalable):
            return
        stored = read_hash(self.server, self.meta_key)
        if stored.get("scaling") != "1" or "capacity" not in stored:
            return
        try:
            capacity = int(stored["capacity"])
        except ValueError:
            return
        if capacity == self.params.capacity:
            return
        first = self.shape.scaling.first_layer(capacity, self.error_rate, self.params.blocks)
        logger.info(
            "The scalable %s filter at %r was created with a first layer for %s fingerprints "
            "(DEDUP_BLOOM_CAPACITY here: %s); using the stored one",
            self.name,
            self.key,
            f"{capacity:,}",
            f"{self.params.capacity:,}",
        )
        self.resize_first_layer(first)

    # -- where the filters live ------------------------------------------------------------

    def block(self, fingerprint: str) -> int:
        """The block that holds ``fingerprint``'s bits."""
        return self.layout.block(fingerprint)

    def block_stamp(self, block: int) -> str:
        """The stamp of block ``block`` (lua/stamp.lua): in the block's hash tag."""
        return self.stamp_keys[block]

    def stamp_of(self, data_key: str) -> str | None:
        match = self._block_re.match(data_key)
        if match is None or int(match.group(1)) >= len(self.stamp_keys):
            return None
        return self.stamp_keys[int(match.group(1))]

    def side_keys(self) -> dict[str, str]:
        keys = {**super().side_keys(), migration_state_key(self.key): "hash"}
        for prefix in self.prefixes:
            keys[migrating_key(prefix)] = "string"
        return keys

    def filter_report(self, bases: Sequence[str]) -> dict[str, Any]:
        """Fill and estimates of the filter made of the blocks at ``bases``."""
        return self.shape.report(self.server, bases)


class BloomBackend(BlockedBloom):
    name = "bloom"
    default_key = "%(spider)s:bloomfilter"
    capabilities = Capabilities(
        probabilistic=True,
        hex_fingerprints=True,
        stable_answers=True,
        report_fill=True,
        bulk_bits=True,
    )

    def __init__(
        self,
        server: Any,
        key: str,
        params: BloomParams | None = None,
        scaling: Scaling | None = None,
    ) -> None:
        """``params``: the filter, or with ``scaling`` its first layer
        (``scaling.first_layer(capacity, error_rate)``)."""
        super().__init__(server, key, params or default_params(), scaling)
        self.block_keys = self.prefixes

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
            admission.check_room(
                self, missing * ((self.params.block_bits + 7) // 8), "DEDUP_BLOOM_CAPACITY"
            )

    def _prepare(self) -> None:
        for block, stamp in zip(self.block_keys, self.stamp_keys):
            try:
                keys = self.shape.alloc_keys(stamp, block)
                scripts.BITMAP_ALLOC(self.server, keys, [self.stamp, self.params.block_bits])
            except ResponseError as exc:
                failure = script_failure(exc)
                if failure is None:
                    raise
                raise FilterMismatchError(
                    f"The {self.name} filter at {self.key!r} is damaged: {failure.message}. "
                    "Nothing was changed. Rebuild it (scrapy migrate-set-to-bloom from a set, "
                    "or a new SCHEDULER_DUPEFILTER_KEY) and find what removed or rewrote its "
                    "keys (eviction, a manual DEL or SET)."
                ) from None

    def block_key(self, fingerprint: str) -> str:
        return self.block_keys[self.block(fingerprint)]

    def owned_keys(self) -> list[str]:
        return list(self.expected_types())

    def expected_types(self) -> dict[str, str]:
        types: dict[str, str] = {}
        for block in self.block_keys:
            types.update(self.shape.filter_types(block))
        types.update(dict.fromkeys(self.stamp_keys, "string"))
        types[self.meta_key] = "hash"
        return types

    def bulk_target(self, block: int) -> tuple[str, int]:
        return self.block_keys[block], 0

    def bulk_fill(self) -> tuple[str, float]:
        return "", self.info()["estimated_items"]

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        return [BloomSizing(self.params.capacity, self.error_rate, self.params.blocks)]

    def filter_reports(self, info: Mapping[str, Any] | None = None) -> list[FilterFill]:
        info = self.info() if info is None else info
        return [FilterFill.of(info, info["capacity"], info["error_rate"])]

    def info(self) -> FilterInfo:
        info = super().info()
        info.details.update(
            capacity=self.params.capacity,
            error_rate=self.error_rate,
            bits=self.params.total_bits,
            hashes=self.params.hashes,
            blocks=self.params.blocks,
        )
        info.details.update(self.filter_report(self.block_keys))
        if self.scaling is not None:
            info.details.update(
                scaling=True,
                expansion=self.scaling.expansion,
                tightening=self.scaling.tightening,
                max_layers=len(self.layers),
            )
        return info
