"""The backend interface every storage implements: what a filter does per request (check
and record, ask, record many), on :class:`~.stored.StoredFilter` (its keys and its life
in Redis) and its :class:`~.layout.Layout` (where fingerprints live, what one call is)."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from scrapy.settings import BaseSettings

from ..server import scripts
from ..server.cluster import is_cluster, nodes_of
from . import calls
from .calls import FailedCall, one_call
from .keys import chunks, memory_usage
from .reports import Contents, FilterInfo, Holding
from .stored import LAYOUT_VERSION, StoredFilter

__all__ = ["LAYOUT_VERSION", "DedupBackend"]

logger = logging.getLogger(__name__)


class DedupBackend(StoredFilter):
    """Storage of request fingerprints in Redis.

    A backend is built from plain values (a Redis client, a base key, its own
    typed parameters), so it can be used and tested without a crawler;
    :meth:`from_settings` is the one place that reads Scrapy settings for it.

    Fingerprints are ``str``. The Bloom backends need hex digests (>= 32 hex
    characters); the set and hash backends store any string.
    """

    #: The base key when SCHEDULER_DUPEFILTER_KEY is not set (``%(spider)s``: the spider).
    default_key: ClassVar[str] = "%(spider)s:dedup"
    #: How long a fingerprint stays seen, in seconds (``expiring_fingerprints``).
    expire: float = math.inf

    def __init__(self, server: Any, key: str) -> None:
        super().__init__(server, key)
        #: Replicas each write waits for (WAIT) and the most it waits (ms): see
        #: :meth:`wait_for_replicas`.
        self.wait_replicas = 0
        self.wait_timeout_ms = 0
        #: Writes whose WAIT timed out before enough replicas had them.
        self.unreplicated = 0
        self.unreplicated_warned_at = -math.inf

    def wait_for_replicas(self, replicas: int, timeout: float) -> None:
        """Make every add call wait until ``replicas`` replicas have its writes (Redis
        WAIT, in the same round trip), ``timeout`` seconds at most: a failover then
        loses no fingerprint recorded. 0 replicas: no waiting (the default)."""
        self.wait_replicas = replicas
        self.wait_timeout_ms = max(1, round(timeout * 1000)) if replicas else 0

    def rebind(self, *, server: Any = None, key: str | None = None) -> DedupBackend:
        """The same filter on another client or at another key, not yet opened
        (what ``df.server = ...`` / ``df.key = ...`` do, as with scrapy-redis)."""
        if key is not None and key != self.key:
            clone = self.with_key(key)
        else:
            clone = copy.copy(self)
            if self.layout is not None:  # (what it found is found again at open)
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

    # -- the operations -------------------------------------------------------------

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
        placed = layout.place(fingerprint, expire)
        group = placed[0]
        # (the attribute first: the property is a call more on every request)
        header = layout.header(context, self._stamp or self.stamp)
        keys, args = layout.pack([group], {group: layout.keys(group, context)}, [placed], header)
        if self.wait_replicas:
            answer = calls.run_and_wait(self, layout.add_script, keys, args)[0]
        else:
            answer = layout.add_script(self.server, keys, args, self.reopen)[0]
        if answer > 0:
            return True
        if answer < 0:
            if layout.again(answer):  # nothing was written: learnt, the general path sends more
                layout.learn([answer], [fingerprint])
                return self.check_and_add_many((fingerprint,), (expire,))[0]
            layout.grown(answer, fingerprint)
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

    def janitor_note(self) -> str | None:
        """Why the janitor has less to do here than the backend's kind suggests (a hash
        filter whose fields the server expires), for its report; else None."""
        return None

    def contents(self, info: Mapping[str, Any] | None = None) -> list[Contents]:
        """What the filter holds and how it is made, for ``scrapy dedup-info`` (typed
        reports that say themselves in words; its fill is :meth:`filter_reports`).
        ``info``: as for :meth:`filter_reports`."""
        return []

    def holding(self) -> Holding:
        """What the filter holds, typed (by default: its ``count()`` if it declares one)."""
        held = float(self.count()) if self.capabilities.count else 0.0
        return Holding(held, max(1, len(self.owned_keys())))

    def info(self) -> FilterInfo:
        """What an operator wants to know: its keys and their memory, typed; parameters,
        counts and fill in ``details`` (a backend adds its own)."""
        keys = self.owned_keys()
        # On a cluster, which master holds how many of the keys (the record included).
        nodes = nodes_of(self.server, keys) if is_cluster(self.server) else None
        return FilterInfo(self.name, self.key, len(keys), memory_usage(self.server, keys), nodes)
