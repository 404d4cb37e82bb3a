"""The backend interface every storage implements."""

from __future__ import annotations

import copy
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from redis.crc import key_slot
from redis.exceptions import AskError, NoScriptError, ResponseError
from scrapy.settings import BaseSettings

from .. import scripts
from ..connection import is_cluster, masters, nodes_of
from ..exceptions import DedupConfigError, FilterMismatchError, WrongKeyTypeError
from ..failures import cluster_node_error, code_of

logger = logging.getLogger(__name__)

#: Fingerprints sent to Redis per pipeline in the batched operations.
BATCH = 1000

#: Bumped when the layout of the stored data changes incompatibly.
LAYOUT_VERSION = "1"


def janitor_state_key(key: str) -> str:
    """Where the janitor keeps its progress for the filter at ``key``."""
    return f"{key}:janitor"


def janitor_lock_key(key: str) -> str:
    """The lock that lets one janitor pass run at a time on ``key``."""
    return f"{key}:janitor:lock"


def as_str(value: Any) -> str:
    """Redis replies are bytes unless the client decodes them."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def chunks(items: Iterable[str], size: int = BATCH) -> Iterable[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


#: The type of the server's own Bloom filters as TYPE names it: RedisBloom (Redis 8,
#: Redis Stack) and valkey-bloom. An expected type may list alternatives with '|'.
NATIVE_BLOOM_TYPE = "MBbloom--|bloomfltr"
#: How an expected type reads in messages.
TYPE_NAMES = {NATIVE_BLOOM_TYPE: "Bloom filter (BF.*)"}


def type_ok(found: str, expected: str) -> bool:
    """Whether TYPE's answer ``found`` is ``expected`` (one of its '|' alternatives) or none."""
    return found == "none" or found in expected.split("|")


def filter_report_of(info: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """REPORT_FILL's report of a one-filter backend from its ``info()``."""
    keep = ("fill_ratio", "estimated_items", "estimated_error_rate", "over_capacity")
    return {
        **{k: info[k] for k in keep},
        "capacity": info["capacity"],
        "error_rate": info["error_rate"],
        **extra,
    }


def migration_state_key(key: str) -> str:
    """Where ``scrapy migrate-set-to-bloom`` keeps its progress for the filter at ``key``."""
    return f"{key}:migration"


def slot_of(key: str) -> int:
    return key_slot(key.encode("utf-8"))


def slot_sibling(key: str, suffix: str) -> str:
    """A key in the same cluster slot as ``key``: ``key + suffix`` when ``key`` has a
    hash tag, else ``{key}`` + suffix."""
    sibling = key + suffix
    if slot_of(sibling) != slot_of(key):
        sibling = "{" + key + "}" + suffix
    if slot_of(sibling) != slot_of(key):
        raise DedupConfigError(
            f"The Redis key {key!r} cannot have a companion key in its cluster slot; avoid "
            "'{' and '}' in SCHEDULER_DUPEFILTER_KEY other than one hash tag such as '{spider}'"
        )
    return sibling


#: The setting behind each field of a parameter record ...
FIELD_SETTINGS = {
    "capacity": "DEDUP_BLOOM_CAPACITY",
    "error_rate": "DEDUP_BLOOM_ERROR_RATE",
    "compound_error_rate": "DEDUP_BLOOM_ERROR_RATE",
    "blocks": "DEDUP_BLOOM_BLOCKS",
    "expansion": "DEDUP_BLOOM_EXPANSION",
    "scaling": "DEDUP_BLOOM_SCALING",
    "tightening": "DEDUP_BLOOM_TIGHTENING",
    "max_layers": "DEDUP_BLOOM_MAX_LAYERS",
    "shards": "DEDUP_HASH_SHARDS",
    "expiry": "DEDUP_HASH_FIELD_EXPIRY",
    "window": "DEDUP_WINDOW",
    "window_count": "DEDUP_WINDOW_COUNT",
    "window_tz": "DEDUP_WINDOW_TZ",
}
#: ... and the command option that sets it too.
FIELD_OPTIONS = {
    "capacity": "--capacity of migrate-set-to-bloom",
    "error_rate": "--error-rate",
    "compound_error_rate": "--error-rate",
}

#: Record fields computed from others: a Bloom filter's bits and hashes follow from
#: its capacity, error rate and blocks, which are what a user sets.
DERIVED = {"block_bits": ("capacity", "error_rate", "blocks"), "hashes": ("capacity", "error_rate")}


def set_by(field: str) -> str:
    """The setting (and option) that sets a record field: 'DEDUP_BLOOM_CAPACITY, or ...'."""
    option = FIELD_OPTIONS.get(field)
    return FIELD_SETTINGS[field] + (f", or {option}" if option else "")


def shown(value: str | None) -> str | None:
    """A record's value as a user reads it: large whole numbers with separators."""
    if value is not None and value.isdigit() and len(value) > 4:
        return f"{int(value):,}"
    return value


def as_setting(field: str, value: str) -> str:
    """A record's value written as the setting takes it, so that the advice "Set
    NAME = VALUE" is itself accepted: DEDUP_WINDOW = 30 (stored "30s"), 'day'."""
    if field == "window" and value.endswith("s") and value[:-1].isdigit():
        return value[:-1]
    if field == "expiry" and value in ("server", "janitor"):
        return str(value == "server")
    if field == "scaling" and value in ("0", "1"):
        return str(value == "1")
    try:
        float(value)
    except ValueError:
        return repr(value)
    return value


def in_user_terms(
    different: Sequence[str], stored: Mapping[str, str], wanted: Mapping[str, str]
) -> list[str]:
    """``different`` with derived fields replaced by the ones a user set, where
    those differ too (else the derived ones stay: a change of scheme, say)."""
    out: list[str] = []
    for name in different:
        sources = [f for f in DERIVED.get(name, ()) if stored.get(f) != wanted.get(f)]
        if sources and all(f in stored for f in sources):
            out += [f for f in sources if f not in out]
        elif name not in out:
            out.append(name)
    if "compound_error_rate" in stored:
        # A scalable filter: DEDUP_BLOOM_ERROR_RATE is its compound rate; the first
        # layer's own rate follows from it.
        out = ["compound_error_rate" if f == "error_rate" else f for f in out]
        out = [f for i, f in enumerate(out) if f not in out[:i]]
    return out


@dataclass(frozen=True)
class FailedCall:
    """A call of a batch that failed: the indices of the fingerprints it carried."""

    indices: list[int]
    error: Exception


def one_call(
    call: Callable[[], list[bool]], fingerprints: Sequence[str]
) -> tuple[list[bool | None], list[FailedCall]]:
    """``try_check_and_add_many`` for a batch that is one call: all answered or all failed."""
    try:
        return list(call()), []
    except Exception as exc:  # kept for the caller, as try_add_answers does
        return [None] * len(fingerprints), [FailedCall(list(range(len(fingerprints))), exc)]


@dataclass(frozen=True)
class MetaSpec:
    """A parameter record: its key, the fields to write, the fields that must match."""

    key: str
    fields: dict[str, str]
    compare: tuple[str, ...]

    @property
    def stamp(self) -> str:
        """The compared fields as one string: what each slot's stamp holds."""
        return ";".join(
            f"{name}={self.fields.get(name, '')}" for name in ("backend", *self.compare)
        )

    @staticmethod
    def parse_stamp(stamp: str) -> dict[str, str]:
        return dict(part.partition("=")[::2] for part in stamp.split(";"))


#: What a backend can do beyond checking and recording, declared by each backend
#: (``capabilities``) and used by the janitor, so a custom backend gets what it
#: declares and nothing is chosen by its class or name.
PURGE_EXPIRED = "purge-expired"  # fields expire and must be purged: purge_keys()
REPORT_FILL = "report-fill"  # Bloom filters: filter_reports()
RESTORE_EXPIRY = "restore-expiry"  # keys that must carry an expiry: restore_expiry()
COUNT = "count"  # an exact number of entries: count()
BULK_TARGET = "bulk-target"  # Bloom bits a migration may OR in: bulk_target(), bulk_fill()
#: An answer never turns from "seen" back to "new" (until clear()): what a process
#: learns may be kept in its local cache (DEDUP_LOCAL_CACHE).
STABLE_ANSWERS = "stable-answers"


class DedupBackend(ABC):
    """Storage of request fingerprints in Redis.

    A backend is built from plain values (a Redis client, a base key, its own
    typed parameters), so it can be used and tested without a crawler;
    :meth:`from_settings` is the one place that reads Scrapy settings for it.

    Fingerprints are ``str``. The Bloom backends need hex digests (>= 32 hex
    characters); the set and hash backends store any string.
    """

    #: The name ``DEDUP_BACKEND`` selects this backend by.
    name: ClassVar[str] = ""
    #: Whether duplicates also count in ``bloomfilter/filtered``.
    is_bloom: ClassVar[bool] = False
    #: Whether fingerprints must be hex digests (the Lua Bloom filters hash them so).
    needs_hex: ClassVar[bool] = False
    #: Whether :meth:`check_and_add` honours a per-request expiry.
    uses_expire: ClassVar[bool] = False
    #: What the janitor can do for this backend (see PURGE_EXPIRED and the others).
    capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, server: Any, key: str) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"the Redis key must be a non-empty string, got {key!r}")
        self.server = server
        self.key = key
        self._opened = False
        self._held_data = False
        self._stamp: str | None = None
        #: Replicas each write waits for (WAIT) and the most it waits (ms): see
        #: :meth:`wait_for_replicas`.
        self.wait_replicas = 0
        self.wait_timeout_ms = 0
        #: Writes whose WAIT timed out before enough replicas had them.
        self.unreplicated = 0
        self._warned_unreplicated = -math.inf

    def wait_for_replicas(self, replicas: int, timeout: float) -> None:
        """Make every add call wait until ``replicas`` replicas have its writes (Redis
        WAIT, in the same round trip), ``timeout`` seconds at most: a failover then
        loses no fingerprint recorded. 0 replicas: no waiting (the default)."""
        self.wait_replicas = replicas
        self.wait_timeout_ms = max(1, round(timeout * 1000)) if replicas else 0

    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def held_data(self) -> bool:
        """Whether the last :meth:`open` found anything of this filter in Redis (the
        types it checks anyway; what :meth:`verify` would say, without a second look)."""
        return self._held_data

    @property
    def stamp(self) -> str:
        """What the stamps beside this filter's data say: its compared parameters."""
        if self._stamp is None:
            spec = self.meta_spec()
            self._stamp = spec.stamp if spec is not None else ""
        return self._stamp

    def rebind(self, *, server: Any = None, key: str | None = None) -> DedupBackend:
        """The same filter on another client or at another key, not yet opened
        (what ``df.server = ...`` / ``df.key = ...`` do, as with scrapy-redis)."""
        clone = self.with_key(key) if key is not None and key != self.key else copy.copy(self)
        if server is not None:
            clone.server = server
        clone.wait_for_replicas(self.wait_replicas, self.wait_timeout_ms / 1000)
        clone._opened = False
        return clone

    def with_key(self, key: str) -> DedupBackend:
        """A new backend like this one at ``key`` (override: it needs the constructor's
        arguments)."""
        raise AttributeError(
            f"The {self.name} backend cannot be moved to another key after it is built; "
            "build the dupefilter with the key instead: RFPDupeFilter(server, key) or "
            "SCHEDULER_DUPEFILTER_KEY"
        )

    @classmethod
    def from_settings(cls, server: Any, key: str, settings: BaseSettings) -> DedupBackend:
        """Build the backend from Scrapy settings (override to read ``DEDUP_*``)."""
        return cls(server, key)

    # -- life cycle -----------------------------------------------------------------

    def open(self) -> None:
        """Check (and create) what the backend keeps in Redis. Idempotent.

        Raises :class:`WrongKeyTypeError` for a key of another type and
        :class:`FilterMismatchError` for a filter built with other parameters.
        """
        if not self._opened:
            try:
                self._open()
            except AskError as exc:  # MOVED / ASK: a cluster node seen through a plain client
                raise cluster_node_error(exc) from None
            self._opened = True

    def meta_spec(self) -> MetaSpec | None:
        """The parameter record this backend keeps beside its data, if any."""
        return None

    def _open(self) -> None:
        """Check key types, create the parameter record or check it, load the scripts."""
        self.check_server()
        found = self.check_types(self.expected_types())
        self._held_data = any(kind != "none" for kind in found.values())
        self._before_writing(found)
        spec = self.meta_spec()
        if spec is not None:
            self._stamp = spec.stamp
            self.check_stamps(found, spec)
            self.init_meta(spec)
        if is_cluster(self.server):
            if self.wait_replicas:
                raise DedupConfigError(
                    "DEDUP_WAIT_REPLICAS applies to a primary with replicas (a single server "
                    "or Sentinel), not to a Redis Cluster: remove it, or set "
                    "DEDUP_WAIT_REPLICAS = 0"
                )
            self.check_spread([k for k in found if spec is None or k != spec.key])
        # Registered once here, so the first request costs no NOSCRIPT round trip
        # (they are reloaded on NOSCRIPT after a flush, restart or failover).
        for script in {self.add_script, self.contains_script} - {None}:
            script.load(self.server)  # type: ignore[union-attr]
        self._prepare()

    def reopen(self) -> None:
        """Run :meth:`open` again: after NOSCRIPT, which means the server restarted,
        failed over or was flushed. It checks the parameter record, recreates it if
        the data is gone with it (so that the bits written next are not orphans),
        and loads the scripts."""
        logger.warning(
            "Redis did not know the %s dupefilter's scripts (restart, failover or flush): "
            "checking %r again",
            self.name,
            self.key,
        )
        self._opened = False
        self.open()

    #: Whether some of this backend's keys carry an expiry (then a ``volatile-*``
    #: eviction policy can delete them too).
    keys_expire: ClassVar[bool] = False

    def eviction_warning(self) -> str | None:
        """What to tell the operator when the server's ``maxmemory-policy`` can evict
        this filter's keys (at open, and in every janitor report), else None."""
        policy = self.eviction_risk()
        if policy is None:
            return None
        return (
            f"the Redis server's maxmemory-policy is {policy!r}: when memory is full it may "
            f"delete keys of the {self.name} dupefilter at {self.key!r}, and the requests they "
            "recorded are crawled again. Use maxmemory-policy noeviction (or volatile-* for "
            "backends without expiring keys) on the server that holds fingerprints"
        )

    def eviction_risk(self) -> str | None:
        """The server's ``maxmemory-policy`` if it can evict this filter's keys, else None."""
        for client in masters(self.server):
            try:
                policy = as_str(client.config_get("maxmemory-policy").get("maxmemory-policy", ""))
            except ResponseError:  # CONFIG refused (ACL, renamed on a managed server)
                return None
            if policy.startswith("allkeys-") or (
                policy.startswith("volatile-") and self.keys_expire
            ):
                return policy
        return None

    def check_server(self) -> None:
        """Refuse a read-only replica; warn when the eviction policy can delete the filter."""
        if not is_cluster(self.server):
            try:
                role = as_str(self.server.execute_command("ROLE")[0])
            except ResponseError:
                role = "master"
            if role != "master":
                raise DedupConfigError(
                    f"The Redis server of the {self.name} dupefilter at {self.key!r} is a "
                    f"read-only {role} (replica): every write would be refused. Point "
                    "DEDUP_REDIS_URL (or REDIS_URL) at the primary."
                )
        warning = self.eviction_warning()
        if warning is not None:
            logger.warning("%s%s.", warning[0].upper(), warning[1:])

    def check_room(self, needed: int, setting: str) -> None:
        """Refuse to allocate ``needed`` bytes that the server cannot hold (its
        ``maxmemory``, else its host's memory), before anything is written."""
        try:
            infos = [client.info("memory") for client in masters(self.server)]
        except ResponseError:  # INFO refused (ACL)
            return
        room = 0
        for info in infos:
            limit = int(info.get("maxmemory", 0)) or int(info.get("total_system_memory", 0))
            if not limit:
                return
            room += max(0, limit - int(info.get("used_memory", 0)))
        if needed > room:
            raise DedupConfigError(
                f"The {self.name} filter at {self.key!r} needs {needed / 2**30:,.1f} GiB of "
                f"Redis memory, and the server{'s' if len(infos) > 1 else ''} can hold "
                f"{room / 2**30:,.1f} GiB more (maxmemory, or the host's memory). Nothing was "
                f"allocated. Lower {setting} (or use a scalable filter, which grows as needed), "
                "or give Redis more memory."
            )

    #: The setting that says how many keys the data is split into (for advice).
    spread_setting: ClassVar[str] = ""

    def check_spread(self, data_keys: Sequence[str]) -> None:
        """On a cluster, warn when the data keys sit on fewer masters than they could."""
        masters = len(self.server.get_primaries())
        used = nodes_of(self.server, list(data_keys))
        # Keys that share a hash tag (a block's buckets, say) must share a master.
        slots = {self.server.keyslot(key) for key in data_keys}
        if len(used) < min(len(slots), masters) and self.spread_setting:
            logger.warning(
                "The %s dupefilter at %r keeps its data in %d slot(s) on %d of the cluster's "
                "%d masters. For an even spread set %s to a few times the number of masters "
                "(e.g. %d) when the filter is created.",
                self.name,
                self.key,
                len(slots),
                len(used),
                masters,
                self.spread_setting,
                4 * masters,
            )

    def _before_writing(self, found: dict[str, str]) -> None:  # noqa: B027 - optional hook
        """Checks after the key types (``found``: type of each key) and before anything
        is written (e.g. that the server has room for what :meth:`_prepare` allocates)."""

    def _prepare(self) -> None:  # noqa: B027 - optional hook
        """Backend-specific work after a successful open (e.g. allocating bitmaps)."""

    def verify(self) -> bool:
        """Check key types and stored parameters like :meth:`open`, creating nothing.

        Returns False when the backend has stored nothing yet.
        """
        found = self.check_types(self.expected_types())
        spec = self.meta_spec()
        if spec is None:
            return any(kind != "none" for kind in found.values())
        self.check_stamps(found, spec)
        if found[spec.key] == "none":
            return any(kind != "none" for kind in found.values())
        stored = {as_str(k): as_str(v) for k, v in self.server.hgetall(spec.key).items()}
        self.compare_meta(spec, stored)
        return True

    # -- the operations -------------------------------------------------------------

    #: Lua scripts of the operations. The add script takes many fingerprints at
    #: once: its keys are one group per block or shard the call touches
    #: (:meth:`group_keys`), its arguments :meth:`add_header`, then per fingerprint
    #: its group's number in the call and :meth:`fp_args`; it answers one integer
    #: per fingerprint: > 0 "seen", 0 "new", < 0 "new" with news for
    #: :meth:`on_grown`, or what :meth:`again` recognises. The contains script
    #: takes one fingerprint (:meth:`contains_call`) and answers > 0 "present".
    #: Backends without scripts override the methods below.
    add_script: scripts.LuaScript | None = None
    contains_script: scripts.LuaScript | None = None

    def add_context(self) -> Any:
        """What every group of one add call shares (the time, say), made once per call."""
        return None

    def add_group(self, fingerprint: str) -> int:
        """The group (block, shard) whose keys a fingerprint's check-and-add touches."""
        raise NotImplementedError

    def group_keys(self, group: int, context: Any) -> list[str]:
        """The keys of one group, all in one cluster slot, its stamp first."""
        raise NotImplementedError

    def add_header(self, context: Any) -> list[Any]:
        """The arguments of :attr:`add_script` before the fingerprints."""
        raise NotImplementedError

    def fp_args(self, fingerprint: str, expire: float | None) -> list[Any]:
        """One fingerprint's arguments of :attr:`add_script` (after its group)."""
        return [fingerprint]

    def contains_call(self, fingerprint: str) -> tuple[list[str], list[Any]]:
        """Keys and arguments of :attr:`contains_script` for one fingerprint."""
        raise NotImplementedError

    #: How many times an add or contains call may be made again (see :meth:`again`).
    again_limit: int = 0

    def again(self, answer: Any) -> bool:
        """Whether a script's answer asks for the call to be made again (a scalable
        filter that was not sent enough layers); by default none does."""
        return False

    def learn(self, answers: Sequence[Any]) -> None:  # noqa: B027 - optional hook
        """Act on the answers :meth:`again` recognised, before calling again."""

    def on_grown(self, answer: int) -> None:  # noqa: B027 - optional hook
        """A fingerprint was added and its answer was < 0: a scalable filter added a
        layer (-1) or is past its last one (-2). Override to report it."""

    def run_script(self, script: scripts.LuaScript, keys: Sequence[str], args: Any) -> Any:
        """One EVALSHA (the hot path: one round trip); on NOSCRIPT, reopen and run again."""
        if self.wait_replicas:
            return self._run_and_wait(script, keys, args)
        try:
            return self.server.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.reopen()
            return self.server.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def _run_and_wait(self, script: scripts.LuaScript, keys: Sequence[str], args: Any) -> Any:
        """EVALSHA then WAIT in one round trip: the answer comes once ``wait_replicas``
        replicas have the call's writes, or the timeout passed (then counted in
        :attr:`unreplicated` and logged; the answer stands)."""
        for attempt in (1, 2):
            pipe = self.server.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            answer, acked = pipe.execute(raise_on_error=False)
            if isinstance(answer, NoScriptError) and attempt == 1:
                self.reopen()
                continue
            if isinstance(answer, Exception):
                raise answer
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < self.wait_replicas:
                self.unreplicated += 1
                now = time.monotonic()
                if now - self._warned_unreplicated >= 60:  # at most once a minute
                    self._warned_unreplicated = now
                    logger.warning(
                        "A write of the %s dupefilter reached %d of the %d replica(s) asked "
                        "for (DEDUP_WAIT_REPLICAS) within %d ms (%d such writes so far): a "
                        "failover now may lose it",
                        self.name,
                        int(acked),
                        self.wait_replicas,
                        self.wait_timeout_ms,
                        self.unreplicated,
                    )
            return answer
        raise AssertionError("unreachable")

    def call(
        self, script: scripts.LuaScript, make: Callable[[], tuple[list[str], list[Any]]]
    ) -> Any:
        """Run ``script`` with the keys and arguments ``make()`` builds, again while
        the answer asks for it (:meth:`again`)."""
        answer = self.run_script(script, *make())
        for _ in range(self.again_limit):
            if not self.again(answer):
                return answer
            self.learn([answer])
            answer = self.run_script(script, *make())
        if self.again(answer):
            raise self.again_error()
        return answer

    def again_error(self) -> Exception:
        return FilterMismatchError(
            f"The {self.name} filter at {self.key!r} asked for its call to be made again "
            f"more than {self.again_limit} times; use the settings it was created with."
        )

    def check_and_add(self, fingerprint: str, expire: float | None = None) -> bool:
        """Record ``fingerprint``; return True if it was already recorded (seen).

        One round trip, atomic on the server. ``expire`` (seconds) is honoured
        by backends with per-fingerprint expiry and ignored by the others.
        """
        script = self.add_script
        if script is None:
            raise NotImplementedError(f"{type(self).__name__} has no add script")
        # The per-request path: the one call of a batch of one, without the batch's
        # bookkeeping (try_add_answers) around it.
        ((keys, args, _),) = self._add_calls((fingerprint,), (expire,), (0,))
        answer = self.run_script(script, keys, args)[0]
        if answer > 0:
            return True
        if answer < 0:
            if self.again(answer):  # nothing was written: the general path sends more
                return self.check_and_add_many((fingerprint,), (expire,))[0]
            self.on_grown(answer)
        return False

    def check_and_add_many(
        self, fingerprints: Sequence[str], expires: Sequence[float | None] | None = None
    ) -> list[bool]:
        """:meth:`check_and_add` for many fingerprints: True for each one seen.

        One round trip on a single server; on a cluster one call per slot
        touched, sent to every master at once. Each fingerprint's check-and-add
        is atomic; one repeated in the batch is new once, then seen. ``expires``:
        one expiry (seconds) or None per fingerprint.
        """
        if self.add_script is None:  # a backend of its own without scripts: one by one
            each = expires if expires is not None else (None,) * len(fingerprints)
            return [self.check_and_add(fp, expire) for fp, expire in zip(fingerprints, each)]
        seen, failed = self.try_check_and_add_many(fingerprints, expires)
        if failed:
            raise failed[0].error
        return seen  # type: ignore[return-value]  # none failed: all answered

    def try_check_and_add_many(
        self, fingerprints: Sequence[str], expires: Sequence[float | None] | None = None
    ) -> tuple[list[bool | None], list[FailedCall]]:
        """:meth:`check_and_add_many`, keeping the answers of the calls that ran when
        others failed (see :meth:`try_add_answers`): None for the fingerprints of a
        failed call."""
        if self.add_script is None:
            return one_call(lambda: self.check_and_add_many(fingerprints, expires), fingerprints)
        answers, failed = self.try_add_answers(fingerprints, expires)
        for answer in answers:
            if answer is not None and answer < 0:
                self.on_grown(answer)
        return [None if answer is None else answer > 0 for answer in answers], failed

    def try_add_answers(
        self, fingerprints: Sequence[str], expires: Sequence[float | None] | None = None
    ) -> tuple[list[int | None], list[FailedCall]]:
        """The add script's answer for each fingerprint (see :attr:`add_script`),
        keeping the answers of the calls that ran when others failed (on a cluster,
        one call per slot): None for each fingerprint of a failed call, and the
        failed calls, each with its fingerprints' indices and its error. A call the
        server refused wrote nothing (every add script checks all it reads and writes
        first); one whose connection broke may have run."""
        script = self.add_script
        if script is None:
            raise NotImplementedError(f"{type(self).__name__} has no add script")
        count = len(fingerprints)
        answers: list[int | None] = [None] * count
        failed: list[FailedCall] = []
        if not count:
            return answers, failed
        if expires is None:
            expires = (None,) * count
        elif len(expires) != count:
            raise ValueError(f"{len(expires)} expiries for {count} fingerprints")
        todo: Sequence[int] = range(count)
        for _ in range(self.again_limit + 1):
            calls = self._add_calls(fingerprints, expires, todo)
            try:
                results = self._run_calls(script, calls)
            except Exception as exc:  # kept for the caller, as run_many's are
                results = [exc] * len(calls)
            again = []
            for (_, _, indices), result in zip(calls, results):
                if isinstance(result, Exception):
                    failed.append(FailedCall(indices, result))
                    continue
                for i, answer in zip(indices, result):
                    answers[i] = answer
                    if self.again(answer):
                        again.append(i)
            if not again:
                return answers, failed
            self.learn([answers[i] for i in again])
            for i in again:
                answers[i] = None  # asked again: nothing was written for it
            todo = sorted(again)
        failed.append(FailedCall(list(todo), self.again_error()))
        return answers, failed

    def _add_calls(
        self,
        fingerprints: Sequence[str],
        expires: Sequence[float | None],
        todo: Sequence[int],
    ) -> list[tuple[list[str], list[Any], list[int]]]:
        """The add calls for the fingerprints at ``todo``: one on a single server, one
        per cluster slot; each with the indices of the fingerprints it answers."""
        context = self.add_context()
        header = self.add_header(context)
        if len(todo) == 1:  # the per-request path
            i = todo[0]
            keys = self.group_keys(self.add_group(fingerprints[i]), context)
            return [(keys, [*header, 1, *self.fp_args(fingerprints[i], expires[i])], [i])]
        group_of = {i: self.add_group(fingerprints[i]) for i in todo}
        groups: dict[int, list[str]] = {}
        for group in group_of.values():
            if group not in groups:
                groups[group] = self.group_keys(group, context)
        parts: list[list[int]]
        if is_cluster(self.server):
            by_slot: dict[int, list[int]] = {}
            for group, keys in groups.items():
                by_slot.setdefault(slot_of(keys[0]), []).append(group)
            parts = list(by_slot.values())
        else:
            parts = [list(groups)]
        calls = []
        for part in parts:
            number = {group: n for n, group in enumerate(part, 1)}
            keys = [key for group in part for key in groups[group]]
            indices = [i for i in todo if group_of[i] in number]
            args = list(header)
            for i in indices:
                args += [number[group_of[i]], *self.fp_args(fingerprints[i], expires[i])]
            calls.append((keys, args, indices))
        return calls

    def _run_calls(
        self, script: scripts.LuaScript, calls: Sequence[tuple[list[str], list[Any], list[int]]]
    ) -> list[Any]:
        if len(calls) == 1:
            keys, args, _ = calls[0]
            return [self.run_script(script, keys, args)]
        return scripts.run_many(
            self.server,
            script,
            [(keys, args) for keys, args, _ in calls],
            self.reopen,
            keep_errors=True,
        )

    def contains(self, fingerprint: str) -> bool:
        """True if ``fingerprint`` is recorded. Records nothing."""
        assert self.contains_script is not None
        return self.call(self.contains_script, lambda: self.contains_call(fingerprint)) > 0

    def contains_many(self, fingerprints: Sequence[str]) -> list[bool]:
        """:meth:`contains` for many fingerprints, pipelined."""
        assert self.contains_script is not None
        out: list[bool] = []
        for batch in chunks(fingerprints):
            calls = [self.contains_call(fp) for fp in batch]
            results = scripts.run_many(self.server, self.contains_script, calls, self.reopen)
            results = [
                self.call(self.contains_script, lambda fp=fp: self.contains_call(fp))
                if self.again(r)
                else r
                for fp, r in zip(batch, results)
            ]
            out += [r > 0 for r in results]
        return out

    def add_many(self, fingerprints: Iterable[str], expire: float | None = None) -> int:
        """Record many fingerprints, in batches of :data:`BATCH`; return how many were new."""
        added = 0
        for batch in chunks(fingerprints):
            seen = self.check_and_add_many(batch, [expire] * len(batch))
            added += seen.count(False)
        return added

    @abstractmethod
    def owned_keys(self) -> list[str]:
        """Every Redis key this backend owns now, with the metadata record."""

    def expected_types(self) -> dict[str, str]:
        """Map of owned data key (and parameter record) -> Redis type it must hold."""
        return dict.fromkeys(self.owned_keys(), "string")

    def janitor_keys(self) -> dict[str, str]:
        """The janitor's progress record and lock for this backend, with their types."""
        return {janitor_state_key(self.key): "hash", janitor_lock_key(self.key): "string"}

    # -- capabilities (see ``capabilities``) -----------------------------------------------

    def purge_keys(self) -> list[str]:
        """PURGE_EXPIRED: the hashes whose fields (fingerprint -> expiry in Unix ms)
        the janitor purges once expired."""
        raise NotImplementedError

    def filter_reports(self) -> list[dict[str, Any]]:
        """REPORT_FILL: per filter (a time bucket has ``label`` and ``ttl_ms``): fill_ratio,
        estimated_items, estimated_error_rate, over_capacity, capacity, error_rate and,
        for a scalable filter, ``layers``."""
        raise NotImplementedError

    def restore_expiry(self) -> list[str]:
        """RESTORE_EXPIRY: give each key that must expire and lost its expiry (a restore
        from a backup, say) its expiry back; return those keys."""
        raise NotImplementedError

    def count(self) -> int:
        """COUNT: how many entries are stored."""
        raise NotImplementedError

    def bulk_target(self, block: int) -> tuple[str, int]:
        """BULK_TARGET: the bitmap a migration ORs block ``block``'s bits into now, and
        the expiry in ms it must carry (0: none)."""
        raise NotImplementedError

    def bulk_fill(self) -> tuple[str, float]:
        """BULK_TARGET: where the bits go now (a bucket's label, or "") and about how
        many fingerprints are there already."""
        raise NotImplementedError

    def migration_keys(self) -> dict[str, str]:
        """What a migration into this backend keeps while it runs (deleted by clear())."""
        return {}

    def janitor_note(self) -> str | None:
        """Why the janitor has less to do here than the backend's kind suggests (a hash
        filter whose fields the server expires), for its report; else None."""
        return None

    def clear(self) -> int:
        """Delete every key the backend owns, and nothing else; return how many.

        Types are checked first: if any owned key holds another type, nothing
        is deleted and :class:`WrongKeyTypeError` is raised.
        """
        expected = {**self.expected_types(), **self.janitor_keys(), **self.migration_keys()}
        self.check_types(expected)
        spec = self.meta_spec()
        # The record first, then each slot's keys in one atomic call: a worker that
        # goes on recording meanwhile stamps what it writes (see check_stamps), so
        # nothing it leaves behind is an orphan.
        groups: dict[int, list[str]] = {}
        first = [spec.key] if spec is not None and spec.key in expected else []
        for key in expected:
            if key not in first:
                groups.setdefault(slot_of(key), []).append(key)
        deleted = 0
        for keys in [first, *groups.values()]:
            if not keys:
                continue
            count, kind = scripts.DELETE_IF_TYPE(self.server, keys, [expected[k] for k in keys])
            if count < 0:
                key = keys[-count - 1]
                raise WrongKeyTypeError(
                    key,
                    as_str(kind),
                    expected[key],
                    self.wrong_type_hint(as_str(kind)),
                    TYPE_NAMES.get(expected[key], ""),
                )
            deleted += count
        self._opened = False
        logger.info(
            "Cleared %d Redis key(s) of the %s dupefilter at %r", deleted, self.name, self.key
        )
        return deleted

    def info(self) -> dict[str, Any]:
        """What an operator wants to know: parameters, sizes, memory."""
        keys = self.owned_keys()
        info = {
            "backend": self.name,
            "key": self.key,
            "keys": len(keys),
            "memory_bytes": self.memory_usage(keys),
        }
        if is_cluster(self.server):
            # Which master holds how many of the keys (the record included).
            info["nodes"] = nodes_of(self.server, keys)
        return info

    # -- helpers for subclasses -------------------------------------------------------

    def memory_usage(self, keys: Sequence[str]) -> int:
        """Sum of ``MEMORY USAGE`` over ``keys`` (missing keys count 0)."""
        if not keys:
            return 0
        pipe = self.server.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("MEMORY USAGE", key, "SAMPLES", "0")
        return sum(int(v or 0) for v in pipe.execute())

    def check_types(self, expected: Mapping[str, str], hint: str = "") -> dict[str, str]:
        """Raise WrongKeyTypeError unless each key is missing or of its type.

        Returns the type found for each key ("none" when missing).
        """
        if not expected:
            return {}
        pipe = self.server.pipeline(transaction=False)
        for key in expected:
            pipe.type(key)
        found = {key: as_str(kind) for key, kind in zip(expected, pipe.execute())}
        for key, kind in found.items():
            if not type_ok(kind, expected[key]):
                raise WrongKeyTypeError(
                    key,
                    kind,
                    expected[key],
                    hint or self.wrong_type_hint(kind),
                    TYPE_NAMES.get(expected[key], ""),
                )
        return found

    def refuse_orphans(self, orphans: Sequence[str], meta_key: str) -> None:
        """Refuse data keys that exist without the record of their parameters."""
        if orphans:
            raise FilterMismatchError(
                f"Redis key(s) {', '.join(map(repr, orphans))} exist but {meta_key!r}, the record "
                "of the parameters they were written with, does not, so this package cannot tell "
                "what they hold. Nothing was changed. Move them away (RENAME) or point the "
                "dupefilter at another key with SCHEDULER_DUPEFILTER_KEY."
            )

    # -- stamps ---------------------------------------------------------------------------

    def stamp_of(self, data_key: str) -> str | None:
        """The stamp key that guards ``data_key`` (in its slot), None if it has none.

        Backends with a parameter record stamp every slot that holds data, in the
        same script call that writes the data there (``lua/stamp.lua``)."""
        return None

    def check_stamps(self, found: Mapping[str, str], spec: MetaSpec) -> None:
        """Refuse data written with other parameters, or with no record of them.

        The stamps stand in for a missing parameter record (after a clear() by
        another worker, FLUSHALL, or a lost ``K:meta``): when every slot that holds
        data is stamped with these parameters, the record is recreated by
        :meth:`init_meta`; data with no stamp and no record is refused as before.
        """
        stamp_keys = sorted(
            {k for k, kind in found.items() if kind != "none" and self.stamp_of(k) == k}
        )
        stamps: dict[str, str] = {}
        if stamp_keys:
            pipe = self.server.pipeline(transaction=False)
            for key in stamp_keys:
                pipe.get(key)
            stamps = {k: as_str(v) for k, v in zip(stamp_keys, pipe.execute()) if v is not None}
        if any(stamp != spec.stamp for stamp in stamps.values()) and found.get(spec.key) == "hash":
            # The record says the same in the user's terms (capacity, error rate).
            record = {as_str(k): as_str(v) for k, v in self.server.hgetall(spec.key).items()}
            if record:
                self.compare_meta(spec, record)
        for key, stamp in stamps.items():
            if stamp != spec.stamp:
                try:
                    self.compare_meta(spec, MetaSpec.parse_stamp(stamp))
                except FilterMismatchError as exc:
                    raise FilterMismatchError(f"{exc} (found in the stamp {key!r})") from None
        if found.get(spec.key) != "none":
            return
        # Data: every key found but the record and the stamps. A key with no stamp (a
        # backend that keeps none, or data from before stamps) is an orphan here.
        data = [
            k
            for k, kind in found.items()
            if kind != "none" and k != spec.key and self.stamp_of(k) != k
        ]
        self.refuse_orphans([k for k in data if self.stamp_of(k) not in stamps], spec.key)
        if data:
            logger.warning(
                "The parameter record %r of the %s dupefilter was missing (a clear() by "
                "another worker, FLUSHALL, eviction or a manual DEL) while %d data key(s) "
                "remain, each stamped with these parameters: recreating the record",
                spec.key,
                self.name,
                len(data),
            )

    def wrong_type_hint(self, found: str) -> str:
        hint = (
            "Point the dupefilter at another key (SCHEDULER_DUPEFILTER_KEY), or move or delete "
            "that key yourself if it is not needed."
        )
        if found == "set" and self.is_bloom:
            hint = (
                "It looks like a scrapy-redis fingerprint set: convert it with "
                "`scrapy migrate-set-to-bloom`, or set SCHEDULER_DUPEFILTER_KEY to another key."
            )
        return hint

    def init_meta(self, spec: MetaSpec) -> bool:
        """Create the parameter record or check it; True when this call created it."""
        args: list[str] = []
        for name, value in spec.fields.items():
            args += [name, value]
        try:
            created, flat = scripts.META_INIT(self.server, [spec.key], args)
        except ResponseError as exc:
            if code_of(exc) == "dedup:WRONGTYPE":
                kind = as_str(self.server.type(spec.key))
                raise WrongKeyTypeError(
                    spec.key, kind, "hash", self.wrong_type_hint(kind)
                ) from None
            raise
        self.compare_meta(
            spec, {as_str(flat[i]): as_str(flat[i + 1]) for i in range(0, len(flat), 2)}
        )
        return bool(created)

    def compare_meta(self, spec: MetaSpec, stored: Mapping[str, str]) -> None:
        """Raise FilterMismatchError unless ``stored`` matches the compared fields."""
        wanted = spec.fields
        if stored.get("backend") != wanted["backend"]:
            raise FilterMismatchError(
                f"{spec.key!r} describes a {stored.get('backend', 'unknown')!r} filter, not "
                f"{wanted['backend']!r}. Set DEDUP_BACKEND={stored.get('backend')!r} to use it, or "
                "point the dupefilter at another key with SCHEDULER_DUPEFILTER_KEY."
            )
        different = [f for f in spec.compare if stored.get(f) != wanted.get(f)]
        if not different:
            return
        different = in_user_terms(different, stored, wanted)
        diff = ", ".join(
            f"{f}: stored {shown(stored.get(f))!r}, configured {shown(wanted.get(f))!r}"
            + (f" ({set_by(f)})" if f in FIELD_SETTINGS else "")
            for f in different
        )
        fix = [
            f"{FIELD_SETTINGS[f]} = {as_setting(f, stored[f])}"
            for f in different
            if f in FIELD_SETTINGS and stored.get(f) is not None
        ]
        use = (
            f"Set {', '.join(fix)} as when it was created"
            if fix
            else (f"Use the settings it was created with (stored in {spec.key!r})")
        )
        raise FilterMismatchError(
            f"The {wanted['backend']} filter at {self.key!r} was created with other "
            f"parameters ({diff}). Opening it with these settings would read and write the "
            f"wrong places. {use}, or point the dupefilter at another key with "
            "SCHEDULER_DUPEFILTER_KEY; delete the old keys only if their contents may be lost."
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r}>"
