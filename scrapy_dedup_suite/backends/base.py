"""The backend interface every storage implements."""

from __future__ import annotations

import copy
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from redis.exceptions import AskError
from scrapy.settings import BaseSettings

from .. import scripts
from ..connection import is_cluster, nodes_of, refresh_slots
from ..exceptions import DedupConfigError
from ..failures import cluster_node_error
from ..reports import Contents, Holding
from . import admission, calls, clearing, record
from .calls import FailedCall, one_call
from .capabilities import METHODS, Capabilities, CapabilityMethods
from .keys import (
    check_types,
    chunks,
    janitor_lock_key,
    janitor_state_key,
    memory_usage,
    wrong_type_hint,
)
from .layout import Layout
from .record import MetaSpec

logger = logging.getLogger(__name__)

#: Bumped when the layout of the stored data changes incompatibly.
LAYOUT_VERSION = "1"


class DedupBackend(CapabilityMethods, ABC):
    """Storage of request fingerprints in Redis.

    A backend is built from plain values (a Redis client, a base key, its own
    typed parameters), so it can be used and tested without a crawler;
    :meth:`from_settings` is the one place that reads Scrapy settings for it.

    Fingerprints are ``str``. The Bloom backends need hex digests (>= 32 hex
    characters); the set and hash backends store any string.
    """

    #: The name ``DEDUP_BACKEND`` selects this backend by.
    name: ClassVar[str] = ""
    #: The base key when SCHEDULER_DUPEFILTER_KEY is not set (``%(spider)s``: the spider).
    default_key: ClassVar[str] = "%(spider)s:dedup"
    #: What the backend is and can do (see capabilities.py), declared by each class.
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: How long a fingerprint stays seen, in seconds (``expiring_fingerprints``).
    expire: float = math.inf

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for capability in cls.capabilities.declared():
            for method in METHODS.get(capability, ()):
                if getattr(cls, method) is getattr(CapabilityMethods, method):
                    raise TypeError(
                        f"{cls.__name__} declares {capability} but does not define {method}()"
                    )

    def __init__(self, server: Any, key: str) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"the Redis key must be a non-empty string, got {key!r}")
        self.server = server
        self.key = key
        #: Whether :meth:`open` has run since the backend was built or cleared (an
        #: attribute, read on every request).
        self.opened = False
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
        if key is not None and key != self.key:
            clone = self.with_key(key)
        else:
            clone = copy.copy(self)
            if self.layout is not None:  # (what it found at open is found again)
                clone.layout = copy.copy(self.layout)
        if server is not None:
            clone.server = server
        clone.wait_for_replicas(self.wait_replicas, self.wait_timeout_ms / 1000)
        clone.opened = False
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
        if not self.opened:
            try:
                self._open()
            except AskError as exc:  # MOVED / ASK: a cluster node seen through a plain client
                raise cluster_node_error(exc) from None
            self.opened = True

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
            record.check_stamps(self, found, spec)
            record.init_meta(self, spec)
        if is_cluster(self.server):
            if self.wait_replicas:
                raise DedupConfigError(
                    "DEDUP_WAIT_REPLICAS applies to a primary with replicas (a single server "
                    "or Sentinel), not to a Redis Cluster: remove it, or set "
                    "DEDUP_WAIT_REPLICAS = 0"
                )
            admission.check_spread(self, [k for k in found if spec is None or k != spec.key])
        # Registered once here, so the first request costs no NOSCRIPT round trip
        # (they are reloaded on NOSCRIPT after a flush, restart or failover).
        if self.layout is not None:
            for script in {self.layout.add_script, self.layout.contains_script} - {None}:
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
        # On a cluster, the master that refused may be one added since the slot map
        # was read: read it again, so that the scripts are loaded there too.
        refresh_slots(self.server)
        self.opened = False
        self.open()

    #: The setting that says how many keys the data is split into (for advice).
    spread_setting: ClassVar[str] = ""

    def _before_writing(self, found: dict[str, str]) -> None:
        """Checks after the key types (``found``: type of each key) and before anything
        is written (e.g. that the server has room for what :meth:`_prepare` allocates)."""

    def _prepare(self) -> None:
        """Backend-specific work after a successful open (e.g. allocating bitmaps)."""

    def verify(self) -> bool:
        """Check key types and stored parameters like :meth:`open`, creating nothing.
        Returns False when the backend has stored nothing yet."""
        return record.verify(self)

    # -- the operations -------------------------------------------------------------

    #: Where the fingerprints live and how a call of the add script is built for them
    #: (see layout.py); None for a backend that overrides the operations below itself.
    layout: Layout | None = None

    def check_and_add(self, fingerprint: str, expire: float | None = None) -> bool:
        """Record ``fingerprint``; return True if it was already recorded (seen).

        One round trip, atomic on the server. ``expire`` (seconds) is honoured
        by backends with per-fingerprint expiry and ignored by the others.
        """
        # The per-request path: one call of the layout's add script, a group of one
        # (the batch's planning and bookkeeping, calls.add_answers, left out).
        layout = self.layout
        if layout is None:
            raise NotImplementedError(f"{type(self).__name__} has no layout")
        context = layout.context(self.server)
        group, args = layout.place(fingerprint, expire)
        keys = layout.keys(group, context)
        args = [*layout.header(context, self._stamp or self.stamp), 1, *args]
        if self.wait_replicas:
            answer = calls.run_and_wait(self, layout.add_script, keys, args)[0]
        else:
            answer = layout.add_script(self.server, keys, args, self.reopen)[0]
        if answer > 0:
            return True
        if answer < 0:
            if layout.again(answer):  # nothing was written: the general path sends more
                return self.check_and_add_many((fingerprint,), (expire,))[0]
            layout.grown(answer)
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
        if self.layout is None:  # a backend of its own without a layout: one by one
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
        others failed (see :func:`calls.add_answers`): None for the fingerprints of a
        failed call."""
        layout = self.layout
        if layout is None:
            return one_call(lambda: self.check_and_add_many(fingerprints, expires), fingerprints)
        answers, failed = calls.add_answers(self, fingerprints, expires)
        for answer in answers:
            if answer is not None and answer < 0:
                layout.grown(answer)
        return [None if answer is None else answer > 0 for answer in answers], failed

    def contains(self, fingerprint: str) -> bool:
        """True if ``fingerprint`` is recorded. Records nothing."""
        return bool(calls.contains(self, fingerprint) > 0)

    def contains_many(self, fingerprints: Sequence[str]) -> list[bool]:
        """:meth:`contains` for many fingerprints, pipelined."""
        layout = calls.layout_of(self)
        assert layout.contains_script is not None
        out: list[bool] = []
        for batch in chunks(fingerprints):
            context = layout.context(self.server)
            each = [layout.contains_call(fp, context) for fp in batch]
            results = scripts.run_many(self.server, layout.contains_script, each, self.reopen)
            results = [
                calls.contains(self, fp) if layout.again(r) else r for fp, r in zip(batch, results)
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

    def fingerprint_types(self, fingerprint: str) -> dict[str, str]:
        """The keys one fingerprint's check touches that :meth:`expected_types` does not
        list (a compact filter's bucket), with their types: where a WRONGTYPE is looked for."""
        return {}

    def janitor_keys(self) -> dict[str, str]:
        """The janitor's progress record and lock for this backend, with their types."""
        return {janitor_state_key(self.key): "hash", janitor_lock_key(self.key): "string"}

    def migration_keys(self) -> dict[str, str]:
        """What a migration into this backend keeps while it runs (deleted by clear())."""
        return {}

    def janitor_note(self) -> str | None:
        """Why the janitor has less to do here than the backend's kind suggests (a hash
        filter whose fields the server expires), for its report; else None."""
        return None

    def clear(self) -> int:
        """Delete every key the backend owns, and nothing else; return how many (see
        :func:`clearing.clear`: nothing is deleted if any key holds another type)."""
        deleted = clearing.clear(self)
        self.opened = False
        return deleted

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        """What the filter holds and how it is made, for ``scrapy dedup-info`` (typed
        reports that say themselves in words; its fill is :meth:`filter_reports`).
        ``info``: as for :meth:`filter_reports`."""
        return []

    def holding(self) -> Holding:
        """What the filter holds, typed (by default: its ``count()`` if it declares one)."""
        held = float(self.count()) if self.capabilities.count else 0.0
        return Holding(held, max(1, len(self.owned_keys())))

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

    def stamp_of(self, data_key: str) -> str | None:
        """The stamp key that guards ``data_key`` (in its slot), None if it has none.

        Backends with a parameter record stamp every slot that holds data, in the
        same script call that writes the data there (``lua/stamp.lua``)."""
        return None

    def wrong_type_hint(self, found: str) -> str:
        """What to do about a key of this filter found holding a ``found``."""
        return wrong_type_hint(found, convertible=self.capabilities.probabilistic)

    def check_server(self) -> None:
        """Refuse a server the filter cannot use (override to ask more of it first)."""
        admission.check_server(self)

    def compare_meta(self, spec: MetaSpec, stored: Mapping[str, str]) -> None:
        """Raise FilterMismatchError unless ``stored`` matches the compared fields
        (override to say more of a backend's own fields first)."""
        record.compare_meta(self.key, spec, stored)

    def check_types(self, expected: Mapping[str, str], hint: str = "") -> dict[str, str]:
        """Raise WrongKeyTypeError unless each key is missing or of its type; return the
        type found for each key ("none" when missing)."""
        return check_types(self.server, expected, lambda kind: hint or self.wrong_type_hint(kind))

    def memory_usage(self, names: Sequence[str]) -> int:
        """Sum of ``MEMORY USAGE`` over the keys ``names`` (missing keys count 0)."""
        return memory_usage(self.server, names)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r}>"
