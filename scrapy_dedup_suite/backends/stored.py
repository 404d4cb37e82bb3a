"""What a filter keeps in Redis, and its life there: its keys and their types, its
parameter record and each slot's stamp, opening (checked, created, the scripts loaded),
verifying, opening again after NOSCRIPT, clearing. The base of
:class:`~.base.DedupBackend`, which adds what a filter does per request."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from redis.exceptions import AskError

from ..exceptions import DedupConfigError
from ..server.cluster import is_cluster, refresh_slots
from ..server.failures import cluster_node_error
from . import admission, clearing
from . import meta as record
from .capabilities import Capabilities, CapabilityMethods
from .keys import check_types, janitor_lock_key, janitor_state_key, wrong_type_hint
from .layout import Layout
from .meta import MetaSpec

logger = logging.getLogger(__name__)

#: Bumped when the layout of the stored data changes incompatibly.
LAYOUT_VERSION = "1"


class StoredFilter(CapabilityMethods, ABC):
    """A filter's keys in Redis and their life: built from a client and a base key."""

    #: The name ``DEDUP_BACKEND`` selects this backend by.
    name: ClassVar[str] = ""
    #: What the backend is and can do (see capabilities.py), declared by each class.
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: The setting that says how many keys the data is split into (for advice).
    spread_setting: ClassVar[str] = ""
    #: Where the fingerprints live and how a call of the add script is built for them
    #: (see layout.py); None for a backend that overrides the operations itself.
    layout: Layout | None = None
    #: Replicas each write waits for (DedupBackend.wait_for_replicas).
    wait_replicas: int

    def __init__(self, server: Any, key: str) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"the Redis key must be a non-empty string, got {key!r}")
        self.server = server
        self.key = key
        #: Whether :meth:`open` has run since the backend was built or cleared (an
        #: attribute, read on every request).
        self.opened = False
        #: Whether the last :meth:`open` found anything of this filter in Redis (the
        #: types it checks anyway; what :meth:`verify` would say, without a second look).
        self.held_data = False
        self._stamp: str | None = None

    @property
    def stamp(self) -> str:
        """What the stamps beside this filter's data say: its compared parameters."""
        if self._stamp is None:
            spec = self.meta_spec()
            self._stamp = spec.stamp if spec is not None else ""
        return self._stamp

    # -- its keys ----------------------------------------------------------------------

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

    def side_keys(self) -> dict[str, str]:
        """What is kept beside the filter and deleted with it, with their types: the
        janitor's progress record and lock, a migration's state while it runs."""
        return {janitor_state_key(self.key): "hash", janitor_lock_key(self.key): "string"}

    def stamp_of(self, data_key: str) -> str | None:
        """The stamp key that guards ``data_key`` (in its slot), None if it has none.

        Backends with a parameter record stamp every slot that holds data, in the
        same script call that writes the data there (``lua/stamp.lua``)."""
        return None

    def check_types(self, expected: Mapping[str, str], hint: str = "") -> dict[str, str]:
        """Raise WrongKeyTypeError unless each key is missing or of its type; return the
        type found for each key ("none" when missing)."""
        return check_types(self.server, expected, lambda kind: hint or self.wrong_type_hint(kind))

    def wrong_type_hint(self, found: str) -> str:
        """What to do about a key of this filter found holding a ``found``."""
        return wrong_type_hint(found, convertible=self.capabilities.probabilistic)

    # -- its life --------------------------------------------------------------------------

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
        self.held_data = any(kind != "none" for kind in found.values())
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

    def _before_writing(self, found: dict[str, str]) -> None:
        """Checks after the key types (``found``: type of each key) and before anything
        is written (e.g. that the server has room for what :meth:`_prepare` allocates)."""

    def _prepare(self) -> None:
        """Backend-specific work after a successful open (e.g. allocating bitmaps)."""

    def verify(self) -> bool:
        """Check key types and stored parameters like :meth:`open`, creating nothing.
        Returns False when the backend has stored nothing yet."""
        return record.verify(self)

    def check_server(self) -> None:
        """Refuse a server the filter cannot use (override to ask more of it first)."""
        admission.check_server(self)

    def compare_meta(self, spec: MetaSpec, stored: Mapping[str, str]) -> None:
        """Raise FilterMismatchError unless ``stored`` matches the compared fields
        (override to say more of a backend's own fields first)."""
        record.compare_meta(self.key, spec, stored)

    def clear(self) -> int:
        """Delete every key the backend owns, and nothing else; return how many (see
        :func:`clearing.clear`: nothing is deleted if any key holds another type)."""
        deleted = clearing.clear(self)
        self.opened = False
        return deleted

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r}>"
