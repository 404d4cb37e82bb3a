"""Who expires a hash filter's fingerprints (the janitor, or the server's hash-field
expiry), shared by both layouts of the ``hash`` backend: shards of whole fingerprints
(:mod:`.hash`) and small buckets of digest bytes (:mod:`.hash_buckets`).

With the janitor's expiry each field's value is its expiry by the Redis server's clock
(``expiry_unit_ms``: Unix milliseconds in shards, Unix seconds rounded up in buckets,
where a 32-bit integer is 4 bytes smaller in a listpack); with the server's, each field
carries its own TTL (HPEXPIRE: Redis >= 7.4, Valkey >= 9). A filter keeps the way it
was created with: its parameter record says it.
"""

from __future__ import annotations

import logging
from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from scrapy.settings import BaseSettings

from ..exceptions import DedupConfigError, FilterMismatchError
from ..server import scripts
from ..server.cluster import masters
from ..server.connection import address, has_command, server_time_ms
from ..settings.options import HashOptions
from ..settings.table import GROUPS, check
from .base import LAYOUT_VERSION, DedupBackend
from .capabilities import Capabilities
from .groups import said_groups
from .keys import META, as_str, meta_key, read_hash, shard_key, slot_sibling
from .layout import Layout
from .meta import MetaSpec
from .reports import ExpirySample

logger = logging.getLogger(__name__)

#: The registered name of the backend both layouts are.
HASH = "hash"
#: What each parameter record's ``layout`` says: whole fingerprints in shards (layout
#: 1), or digests in compact's buckets (every filter created since).
SHARDS_LAYOUT = LAYOUT_VERSION
BUCKETS_LAYOUT = "buckets"

#: Fields of a hash read (at random) to estimate how many have expired (dedup-info).
SAMPLE = 1000


def expiry_sample(server: Any, hashes: list[str], unit_ms: int) -> ExpirySample:
    """Of up to SAMPLE random fields per hash (each holds its expiry in ``unit_ms``),
    how many have expired and when the last of them expires (server time)."""
    now_ms = server_time_ms(server)
    expiries = []
    for key in hashes:
        flat = server.hrandfield(key, SAMPLE, withvalues=True) or []
        expiries += [int(as_str(v)) * unit_ms for v in flat[1::2] if as_str(v).isdigit()]
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


#: Each field holds its expiry (server clock); the janitor purges expired ones.
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

#: Redis memory a fingerprint takes in buckets, with the janitor's expiry, and with
#: field TTLs on a server that keeps such hashes as hashtables (Valkey 9.1, 200,000
#: fingerprints at DEDUP_COMPACT_CAPACITY = 200,000: 18.0 B and 69.8 B).
JANITOR_BUCKET_BYTES = 18
FIELD_TTL_HASHTABLE_BYTES = 70


def stored_layout(server: Any, key: str, shards: int | None) -> str | None:
    """The layout of the hash filter stored at ``key`` (:func:`stored_hash`)."""
    return stored_hash(server, key, shards)[0]


def stored_hash(server: Any, key: str, shards: int | None) -> tuple[str | None, int | None]:
    """The layout of the hash filter stored at ``key`` and its shards or groups (None:
    not said): its record's, else (a lost record) its stamps' (those of ``shards``, or
    of GROUPS: a filter of fewer has them among these), else layout 1 where its first
    shard exists alone; (None, None) when nothing of a hash filter is there (a new
    filter). One round trip, two where a record is found."""
    stamps = [slot_sibling(shard_key(key, i), META) for i in range(shards or GROUPS)]
    pipe = server.pipeline(transaction=False)
    pipe.type(meta_key(key))
    pipe.type(shard_key(key, 0))
    for stamp in stamps:
        pipe.get(stamp)
    record_type, first_shard, *said = pipe.execute(raise_on_error=False)
    if as_str(record_type) == "hash":
        record = read_hash(server, meta_key(key))
        if record.get("backend") == HASH:
            return record.get("layout"), said_groups(record)
        return None, None
    for stamp in said:
        if isinstance(stamp, (bytes, str)):
            parsed = MetaSpec.parse_stamp(as_str(stamp))
            if parsed.get("backend") == HASH:
                return parsed.get("layout"), said_groups(parsed)
    return (SHARDS_LAYOUT, None) if as_str(first_shard) == "hash" else (None, None)


class Expiring(Layout, ABC):
    """What a layout of ``hash`` adds to where its fingerprints live: who expires them
    chooses the scripts (found by the backend at the first use, ``resolve``), each
    fingerprint's arguments end with its TTL, and the header says the unit of the
    stored expiries (``unit_ms``)."""

    #: Milliseconds in a unit of the stored expiries (the janitor's way).
    unit_ms: ClassVar[int]

    def init_expiry(self, resolve: Callable[[], Expiry], ttl_ms: int) -> None:
        """``resolve``: finds who expires the fields, when first needed (the backend's);
        ``ttl_ms``: how long a fingerprint stays seen unless its request says."""
        #: The janitor's or the server's: the stored filter's, or the one chosen for a
        #: new one; found by ``resolve`` at the first use, again at each open.
        self.way: Expiry | None = None
        self._resolve = resolve
        self.default_ttl_ms = ttl_ms

    @property
    def add_script(self) -> scripts.LuaScript:
        return (self.way or self._resolve()).add_script

    @property
    def contains_script(self) -> scripts.LuaScript:
        return (self.way or self._resolve()).contains_script

    def header(self, context: Any, stamp: str) -> list[Any]:
        """The stamp and the unit of the stored expiries (hash_add.lua's arguments,
        which hash_field_add.lua takes too)."""
        return [stamp, self.unit_ms]

    def ttl_ms(self, expire: float | None) -> int:
        """How long a fingerprint stays seen: DEDUP_EXPIRE, or a request's own."""
        if expire is None:
            return self.default_ttl_ms
        seconds = float(check("DEDUP_EXPIRE", expire, "request.meta['dedup_expire']"))
        return max(1, round(seconds * 1000))


#: What both layouts can do (each declares it: purge_units() is each layout's, and is
#: empty where the server expires the fields itself).
HASH_CAPABILITIES = Capabilities(expiring_fingerprints=True, purge_expired=True, forget=True)


def build_hash(server: Any, key: str, options: HashOptions) -> ExpiringHash:
    """The hash backend for the filter stored at ``key``: layout 1 where its record (or
    its stamps, or its shards) says so (:func:`stored_layout`), else the buckets: a new
    filter's, and any other layout's (a later version's), which opening then refuses
    naming the layout. Without a server (a settings check), the buckets' parameters
    are checked."""
    layout, groups = (None, None) if server is None else stored_hash(server, key, options.shards)
    chosen = SHARDS_LAYOUT if layout == SHARDS_LAYOUT else BUCKETS_LAYOUT
    if options.shards is None and groups is not None:
        options = replace(options, shards=groups)
    return ExpiringHash.by_layout[chosen].from_options(server, key, options)


class ExpiringHash(DedupBackend):
    """What both layouts of the ``hash`` backend share: the expiry (DEDUP_EXPIRE, or a
    request's ``meta["dedup_expire"]``), who enforces it, the add scripts' header, and
    the build from settings (the layout the key holds). The first base of each layout's
    class, before its layout's."""

    name = HASH
    default_key = "%(spider)s:dedup-hash"
    meta_key: str
    #: What the parameter record says of a layout (set by each layout's class), and the
    #: class of each: :func:`build_hash` chooses among them.
    layout_name: ClassVar[str]
    by_layout: ClassVar[dict[str, type[ExpiringHash]]] = {}
    shards: int
    layout: Expiring

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "layout_name" in cls.__dict__:
            ExpiringHash.by_layout[cls.layout_name] = cls

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> DedupBackend:
        """The layout stored at ``key`` (:func:`build_hash`), whichever layout's class
        is asked. No Redis: the settings are checked only."""
        return build_hash(server, key, HashOptions.from_settings(settings))

    @classmethod
    def from_options(cls, server: Any, key: str, options: HashOptions) -> ExpiringHash:
        """This layout's backend for ``options``."""
        raise NotImplementedError

    def options(self) -> HashOptions:
        """The options this backend was built with (:meth:`with_key` builds with them)."""
        raise NotImplementedError

    def with_key(self, key: str) -> DedupBackend:
        """The filter at ``key``, in the layout stored there (a new one: buckets)."""
        return build_hash(self.server, key, self.options())

    def _init_expiry(self, expire: float, field_expiry: bool | None) -> None:
        """After the layout is made. ``field_expiry``: True for the server's hash-field
        expiry, False for the janitor's, None for the server's where it suits the layout
        (a new filter) or the way the filter was created (an existing one)."""
        self.field_expiry = field_expiry
        #: What :meth:`server_expiry_unsuited` said, once asked (a backend whose filter
        #: stays empty would otherwise probe again at each open or verify).
        self._unsuited: tuple[str | None] | None = None
        self.expire = check("DEDUP_EXPIRE", expire)
        self.layout.init_expiry(self.resolve_expiry, max(1, round(self.expire * 1000)))

    @property
    def expiry_unit_ms(self) -> int:
        """Milliseconds in a unit of the stored expiries (the janitor's way)."""
        return self.layout.unit_ms

    @property
    def expiry(self) -> Expiry:
        """The janitor's or the server's (:meth:`resolve_expiry`, at the first use)."""
        return self.layout.way or self.resolve_expiry()

    def _open(self) -> None:
        self.resolve_expiry()
        super()._open()

    def verify(self) -> bool:
        self.resolve_expiry()
        return super().verify()

    def server_expiry_unsuited(self) -> str | None:
        """Why a new filter should not use the server's field expiry although every
        master has it (a layout it would make larger), else None."""
        return None

    def resolve_expiry(self) -> Expiry:
        """The way the stored filter was created with, else the server's field expiry
        where every master has it and it suits the layout (unless DEDUP_HASH_FIELD_EXPIRY
        is False); refused when the settings or the server cannot go on the way the
        filter was made."""
        stored = None
        pipe = self.server.pipeline(transaction=False)  # one round trip, one key
        pipe.type(self.meta_key)
        pipe.hmget(self.meta_key, ["backend", "expiry"])
        kind, said = pipe.execute(raise_on_error=False)
        if as_str(kind) == "hash" and said[0] is not None and as_str(said[0]) == self.name:
            stored = as_str(said[1] or "janitor")
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
            if not unable and self._unsuited is None:  # probed once a backend
                self._unsuited = (self.server_expiry_unsuited(),)
            unsuited = None if unable or self._unsuited is None else self._unsuited[0]
            if unsuited is not None:
                logger.info("The hash filter at %r: the janitor's expiry: %s", self.key, unsuited)
            chosen = BY_JANITOR if unable or unsuited else BY_SERVER
        else:
            chosen = BY_SERVER if wanted else BY_JANITOR
            if wanted and not unable:  # a new filter made the server's way, as told
                unsuited = self.server_expiry_unsuited()
                if unsuited is not None:
                    logger.warning(
                        "The hash filter at %r is created with DEDUP_HASH_FIELD_EXPIRY = True, "
                        "and %s: each fingerprint takes about %d B at capacity (more while the "
                        "buckets are sparse) against %d B with the janitor's expiry, and a "
                        "larger DEDUP_COMPACT_CAPACITY does not help. "
                        "Remove DEDUP_HASH_FIELD_EXPIRY (the janitor's expiry is chosen on this "
                        "server) before the filter holds anything, or keep it and budget the "
                        "memory.",
                        self.key,
                        unsuited.split(" (")[0],
                        FIELD_TTL_HASHTABLE_BYTES,
                        JANITOR_BUCKET_BYTES,
                    )
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
        if chosen is not self.layout.way:
            self._stamp = None
        self.layout.way = chosen
        return chosen

    def bucket_groups(self) -> list[str]:
        """The janitor's purge units of a filter in buckets: its groups of buckets (one
        slot each), where the janitor expires the fields; none where the server does."""
        if self.expiry is not BY_JANITOR:
            return []
        return [f"{self.key} buckets of group {g}" for g in range(self.shards)]

    def janitor_note(self) -> str | None:
        if self.layout.way is BY_SERVER:
            return (
                "its fields expire on the Redis server itself (hash-field expiry): nothing to purge"
            )
        return None
