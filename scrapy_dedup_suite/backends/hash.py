"""``hash``: fingerprint -> expiry timestamp, in Redis hashes.

A request is seen iff its field exists and its expiry (Unix milliseconds, by
the Redis server's clock) is in the future; otherwise the expiry is (re)written
as now + ``DEDUP_EXPIRE`` seconds, or ``request.meta["dedup_expire"]``. The
check and the write are one Lua call. Fingerprints are spread over
``DEDUP_HASH_SHARDS`` hashes (``<key>:0`` ... ``<key>:<shards-1>``, by CRC32 of
the fingerprint) so that a janitor can purge expired fields in small batches
and a Redis Cluster spreads them over its masters. The parameter record lives
in ``<key>:meta``, and each shard has a stamp in its own slot (lua/stamp.lua).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings

from .. import scripts
from ..connection import address, has_command, masters
from ..exceptions import DedupConfigError, FilterMismatchError
from ..options import HashOptions
from ..reports import Contents, ExpirySample, HashFields
from ..settings_table import check, default
from .base import LAYOUT_VERSION, DedupBackend, MetaSpec, as_str, slot_sibling
from .capabilities import Capabilities
from .keys import META, meta_key, spread

logger = logging.getLogger(__name__)

#: Fields of a shard read (at random) to estimate how many have expired (dedup-info).
SAMPLE = 1000


def expiry_sample(server: Any, shards: list[str]) -> ExpirySample:
    """Of up to SAMPLE random fields per shard (each holds its expiry in Unix ms), how
    many have expired and when the last of them expires (server time)."""
    seconds, micros = server.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    expiries = []
    for shard in shards:
        flat = server.hrandfield(shard, SAMPLE, withvalues=True) or []
        expiries += [int(as_str(v)) for v in flat[1::2] if as_str(v).isdigit()]
    last = max(0.0, (max(expiries) - now_ms) / 1000) if expiries else 0.0
    return ExpirySample(len(expiries), sum(1 for ms in expiries if ms <= now_ms), last)


@dataclass(frozen=True)
class Expiry:
    """Who expires a hash filter's fingerprints, and the scripts that go with it."""

    name: str
    add_script: scripts.LuaScript
    contains_script: scripts.LuaScript
    #: What the parameter record (and so each stamp) says of it: nothing for the
    #: janitor's expiry, so that records written before the server's existed match.
    meta: dict[str, str] = field(default_factory=dict)


#: Each field holds its expiry (Unix ms, server clock); the janitor purges expired ones.
BY_JANITOR = Expiry("janitor", scripts.HASH_ADD, scripts.HASH_CONTAINS)
#: Each field carries its own expiry (hash-field TTL); the server frees it.
BY_SERVER = Expiry(
    "server",
    scripts.HASH_FIELD_ADD,
    scripts.HASH_FIELD_CONTAINS,
    {"expiry": "server"},
)
#: The servers that expire hash fields themselves, for messages.
FIELD_TTL_SERVERS = "Redis >= 7.4 or Valkey >= 9"


class HashBackend(DedupBackend):
    name = "hash"
    default_key = "%(spider)s:dedup-hash"
    # purge_keys() is empty where the server expires the fields itself.
    capabilities = Capabilities(expiring_fingerprints=True, purge_expired=True)
    spread_setting = "DEDUP_HASH_SHARDS"

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        expire: float = default("DEDUP_EXPIRE"),
        shards: int = default("DEDUP_HASH_SHARDS"),
        field_expiry: bool | None = None,
    ) -> None:
        """``field_expiry``: True for the server's hash-field expiry, False for the
        janitor's, None for the server's where it has one (a new filter) or the way the
        filter was created (an existing one)."""
        super().__init__(server, key)
        self.field_expiry = field_expiry
        self._expiry: Expiry | None = None
        self.expire = check("DEDUP_EXPIRE", expire)
        self.shards = check("DEDUP_HASH_SHARDS", shards)
        self.meta_key = meta_key(key)
        self.shard_keys = [f"{key}:{i}" for i in range(self.shards)]
        # Each shard's stamp (lua/stamp.lua), in the shard's cluster slot.
        self.stamp_keys = [slot_sibling(shard, META) for shard in self.shard_keys]
        self._stamp_of = dict(zip(self.shard_keys, self.stamp_keys))
        self._stamp_of.update((k, k) for k in self.stamp_keys)
        self._ttl_ms = max(1, round(self.expire * 1000))

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> HashBackend:
        options = HashOptions.from_settings(settings)
        return cls(
            server,
            key,
            expire=options.expire,
            shards=options.shards,
            field_expiry=options.field_expiry,
        )

    def purge_keys(self) -> list[str]:
        return list(self.shard_keys) if self.expiry is BY_JANITOR else []

    def with_key(self, key: str) -> HashBackend:
        return HashBackend(
            self.server, key, expire=self.expire, shards=self.shards, field_expiry=self.field_expiry
        )

    # -- who expires fingerprints ----------------------------------------------------------

    @property
    def expiry(self) -> Expiry:
        """The janitor's or the server's (:meth:`resolve_expiry`, at the first use)."""
        return self._expiry or self.resolve_expiry()

    @property
    def add_script(self) -> scripts.LuaScript:
        return self.expiry.add_script

    @property
    def contains_script(self) -> scripts.LuaScript:
        return self.expiry.contains_script

    def resolve_expiry(self) -> Expiry:
        """The way the stored filter was created with, else the server's field expiry
        where every master has it (unless DEDUP_HASH_FIELD_EXPIRY is False); refused
        when the settings or the server cannot go on the way the filter was made."""
        stored = None
        if as_str(self.server.type(self.meta_key)) == "hash":
            recorded = self.server.hget(self.meta_key, "backend")
            if recorded is not None and as_str(recorded) == self.name:
                stored = as_str(self.server.hget(self.meta_key, "expiry") or "janitor")
        unable = [address(c) for c in masters(self.server) if not has_command(c, "HPEXPIRE")]
        wanted = self.field_expiry
        if stored is not None:
            if wanted is not None and wanted != (stored == "server"):
                raise FilterMismatchError(
                    f"The hash filter at {self.key!r} was created with "
                    + (
                        "the server's hash-field expiry"
                        if stored == "server"
                        else "expiry timestamps that the janitor purges"
                    )
                    + f", and DEDUP_HASH_FIELD_EXPIRY = {wanted} asks for the other way; a "
                    "filter cannot switch. Remove DEDUP_HASH_FIELD_EXPIRY (the filter's own way "
                    "is used), or start a new filter at another key (SCHEDULER_DUPEFILTER_KEY; "
                    "`scrapy migrate-set-to-bloom --to hash` fills it from a set)."
                )
            chosen = BY_SERVER if stored == "server" else BY_JANITOR
        elif wanted is None:
            chosen = BY_JANITOR if unable else BY_SERVER
        else:
            chosen = BY_SERVER if wanted else BY_JANITOR
        if chosen is BY_SERVER and unable:
            raise DedupConfigError(
                f"The hash filter at {self.key!r} "
                + ("was created to" if stored else "is set (DEDUP_HASH_FIELD_EXPIRY = True) to")
                + " let the server expire its fields, and the Redis server at "
                + f"{', '.join(unable)} has no hash-field expiry (HPEXPIRE: {FIELD_TTL_SERVERS}"
                + "). Point DEDUP_REDIS_URL at such a server"
                + (
                    " (a failover to an older one?)"
                    if stored
                    else ", or set DEDUP_HASH_FIELD_EXPIRY = False for the janitor's expiry"
                )
                + "."
            )
        if chosen is not self._expiry:
            self._stamp = None
        self._expiry = chosen
        return chosen

    def _open(self) -> None:
        self.resolve_expiry()
        super()._open()

    def verify(self) -> bool:
        self.resolve_expiry()
        return super().verify()

    def janitor_note(self) -> str | None:
        if self._expiry is BY_SERVER:
            return (
                "its fields expire on the Redis server itself (hash-field expiry): nothing to purge"
            )
        return None

    @staticmethod
    def _to_ms(expire: float) -> int:
        return max(1, round(check("DEDUP_EXPIRE", expire, "request.meta['dedup_expire']") * 1000))

    def shard(self, fingerprint: str) -> int:
        return spread(fingerprint, self.shards)

    def shard_of(self, fingerprint: str) -> str:
        return self.shard_keys[self.shard(fingerprint)]

    def stamp_of(self, data_key: str) -> str | None:
        return self._stamp_of.get(data_key)

    def meta_spec(self) -> MetaSpec:
        way = self.expiry.meta
        return MetaSpec(
            self.meta_key,
            {
                "backend": self.name,
                "layout": LAYOUT_VERSION,
                "shards": str(self.shards),
                **way,
                "created": str(int(time.time())),
            },
            ("layout", "shards", *way),
        )

    def add_group(self, fingerprint: str) -> int:
        return self.shard(fingerprint)

    def group_keys(self, group: int, context: Any) -> list[str]:
        return [self.stamp_keys[group], self.shard_keys[group]]

    def add_header(self, context: Any) -> list[Any]:
        return [self.stamp]

    def fp_args(self, fingerprint: str, expire: float | None) -> list[Any]:
        return [fingerprint, self._ttl_ms if expire is None else self._to_ms(expire)]

    def contains_call(self, fingerprint: str) -> tuple[list[str], list[Any]]:
        return [self.shard_of(fingerprint)], [fingerprint]

    def owned_keys(self) -> list[str]:
        return [*self.shard_keys, *self.stamp_keys, self.meta_key]

    def expected_types(self) -> dict[str, str]:
        return {
            **dict.fromkeys(self.shard_keys, "hash"),
            **dict.fromkeys(self.stamp_keys, "string"),
            self.meta_key: "hash",
        }

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        info = self.info() if info is None else info
        purged = self.purge_keys()  # (none where the server expires the fields)
        sample = expiry_sample(self.server, purged) if purged else None
        return [HashFields(info["fields"], self.shards, self.expiry.name, self.expire, sample)]

    def info(self) -> dict[str, Any]:
        info = super().info()
        pipe = self.server.pipeline(transaction=False)
        for key in self.shard_keys:
            pipe.hlen(key)
        # Expired fields count until the janitor (or the server) frees them.
        info["fields"] = sum(int(n) for n in pipe.execute())
        info["shards"] = self.shards
        info["expire"] = self.expire
        info["expired_by"] = self.expiry.name
        return info
