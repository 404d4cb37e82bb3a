"""``set``: scrapy-redis's own fingerprint set (exact, the compatible baseline).

Same key (``%(spider)s:dupefilter``) and same members as
``scrapy_redis.dupefilter.RFPDupeFilter``: a crawl that switches to this
backend filters everything scrapy-redis recorded, and back again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..server import scripts
from . import calls
from .base import DedupBackend
from .calls import FailedCall, one_call
from .capabilities import Capabilities
from .forget import remove
from .keys import chunks
from .reports import Contents, FilterInfo, Fingerprints


class SetBackend(DedupBackend):
    """scrapy-redis's set: no layout to plan (one key, one slot), so its operations are
    its own: one SADD a request, one script call a batch."""

    name = "set"
    default_key = "%(spider)s:dupefilter"
    capabilities = Capabilities(count=True, stable_answers=True, forget=True)

    def count(self) -> int:
        return int(self.server.scard(self.key))

    def with_key(self, key: str) -> SetBackend:
        return SetBackend(self.server, key)

    def _prepare(self) -> None:
        scripts.SET_ADD.load(self.server)  # (the batches' script, loaded at open)

    def check_and_add(self, fingerprint: str, expire: float | None = None) -> bool:
        if self.wait_replicas:  # the script's call, which waits for the replicas
            return self.check_and_add_many([fingerprint])[0]
        # SADD answers how many members were added: 0 when it was there.
        added: int = self.server.execute_command("SADD", self.key, fingerprint)
        return added == 0

    def check_and_add_many(
        self, fingerprints: Sequence[str], expires: Sequence[float | None] | None = None
    ) -> list[bool]:
        # One script call: SADD answers a count, not which members were new.
        if not fingerprints:
            return []
        return [bool(x) for x in calls.run(self, scripts.SET_ADD, [self.key], fingerprints)]

    def try_check_and_add_many(
        self, fingerprints: Sequence[str], expires: Sequence[float | None] | None = None
    ) -> tuple[list[bool | None], list[FailedCall]]:
        return one_call(lambda: self.check_and_add_many(fingerprints), fingerprints)

    def contains(self, fingerprint: str) -> bool:
        return bool(self.server.execute_command("SISMEMBER", self.key, fingerprint))

    def contains_many(self, fingerprints: Sequence[str]) -> list[bool]:
        out: list[bool] = []
        for batch in chunks(fingerprints):
            out += [bool(v) for v in self.server.execute_command("SMISMEMBER", self.key, *batch)]
        return out

    def add_many(self, fingerprints: Iterable[str], expire: float | None = None) -> int:
        return sum(
            int(self.server.execute_command("SADD", self.key, *batch))
            for batch in chunks(fingerprints)
        )

    def forget_many(self, fingerprints: Iterable[str]) -> int:
        return remove(self.server, "SREM", ((self.key, fp) for fp in fingerprints))

    def owned_keys(self) -> list[str]:
        return [self.key]

    def expected_types(self) -> dict[str, str]:
        return {self.key: "set"}

    def side_keys(self) -> dict[str, str]:
        # The set is scrapy-redis's key alone; this backend owns nothing beside it.
        return {}

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        return [Fingerprints(self.count() if info is None else info["fingerprints"])]

    def info(self) -> FilterInfo:
        info = super().info()
        info.details["fingerprints"] = self.count()
        return info
