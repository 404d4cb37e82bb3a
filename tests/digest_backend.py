"""A backend of one's own, defined outside the package: an exact set of 8-byte digests
of the fingerprints (SHA1's first eight bytes), one key, its own two Lua scripts.

It is what a user would write, from the package's public pieces only: ``DedupBackend``
with its ``Layout`` (one group: the set), ``Capabilities``, ``AddStep`` and ``LuaScript``
with their source.
``DEDUP_BACKEND = "tests.digest_backend.DigestSetBackend"`` selects it, and the test
suite runs the whole backend table with it (the ``digest-set`` row of conftest.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from scrapy_dedup_suite.backends import DedupBackend
from scrapy_dedup_suite.backends.capabilities import Capabilities
from scrapy_dedup_suite.backends.forget import remove
from scrapy_dedup_suite.backends.layout import Layout
from scrapy_dedup_suite.backends.reports import Contents, Fingerprints
from scrapy_dedup_suite.server.scripts import AddStep, LuaScript

#: Check-and-add, declared as an add step: keys, the set; argv, per fingerprint its
#: key's number in the call and its digest. One answer per fingerprint: 1 seen, 0 new.
#: (As a step, the frontier records and enqueues with it in one call.)
DIGEST_ADD = AddStep(
    "digest_add",
    """-- include: prelude
local function dedup_add(keys, argv)
  local out = {}
  for i = 1, #argv, 2 do
    out[#out + 1] = 1 - rcall('SADD', keys[tonumber(argv[i])], argv[i + 1])
  end
  return out
end
""",
)
#: Whether one digest (ARGV[1]) is in the set (KEYS[1]): 1 or 0.
DIGEST_CONTAINS = LuaScript(
    "digest_contains",
    """-- include: prelude
return rcall('SISMEMBER', KEYS[1], ARGV[1])
""",
)


def digest(fingerprint: str) -> bytes:
    return hashlib.sha1(fingerprint.encode()).digest()[:8]


class OneDigestSet(Layout):
    """Where the digests live: one group, the set; no stamp."""

    add_script = DIGEST_ADD
    contains_script = DIGEST_CONTAINS

    def __init__(self, key: str) -> None:
        self.key = key

    def header(self, context: Any, stamp: str) -> list[Any]:
        return []

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        return 0, [digest(fingerprint)]

    def keys(self, group: int, context: Any) -> list[str]:
        return [self.key]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        return [self.key], [digest(fingerprint)]


class DigestSetBackend(DedupBackend):
    name = "digest-set"
    default_key = "%(spider)s:digests"
    capabilities = Capabilities(count=True, stable_answers=True, forget=True)

    def __init__(self, server: Any, key: str) -> None:
        super().__init__(server, key)
        self.layout = OneDigestSet(key)

    def with_key(self, key: str) -> DigestSetBackend:
        return DigestSetBackend(self.server, key)

    # -- what it holds ----------------------------------------------------------------------

    def owned_keys(self) -> list[str]:
        return [self.key]

    def expected_types(self) -> dict[str, str]:
        return {self.key: "set"}

    def count(self) -> int:
        return int(self.server.scard(self.key))

    def forget_many(self, fingerprints: Iterable[str]) -> int:
        return remove(self.server, "SREM", ((self.key, digest(fp)) for fp in fingerprints))

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        return [Fingerprints(self.count())]
