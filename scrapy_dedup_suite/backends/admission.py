"""What a server must offer before a filter writes to it: a primary (not a replica),
an eviction policy that cannot delete the filter, room for what is allocated, and on a
cluster, data spread over the masters. Checked at open; functions of a backend."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from redis.exceptions import ResponseError

from ..exceptions import DedupConfigError
from ..server.cluster import is_cluster, masters, nodes_of
from ..settings.table import GROUPS, GROWING_GROUPS
from .capabilities import Capabilities
from .keys import as_str
from .views import FilterView


class Admitted(FilterView, Protocol):
    """What the checks here read of a filter (a :class:`~.stored.StoredFilter`)."""

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def spread_setting(self) -> str: ...


logger = logging.getLogger(__name__)


def eviction_warning(backend: Admitted) -> str | None:
    """What to tell the operator when the server's ``maxmemory-policy`` can evict
    this filter's keys (at open, and in every janitor report), else None."""
    policy = eviction_risk(backend)
    if policy is None:
        return None
    return (
        f"the Redis server's maxmemory-policy is {policy!r}: when memory is full it may "
        f"delete keys of the {backend.name} dupefilter at {backend.key!r}, and the requests they "
        "recorded are crawled again. Use maxmemory-policy noeviction (or volatile-* for "
        "backends without expiring keys) on the server that holds fingerprints"
    )


def eviction_risk(backend: Admitted) -> str | None:
    """The server's ``maxmemory-policy`` if it can evict this filter's keys, else None."""
    for client in masters(backend.server):
        try:
            policy = as_str(client.config_get("maxmemory-policy").get("maxmemory-policy", ""))
        except ResponseError:  # CONFIG refused (ACL, renamed on a managed server)
            return None
        if policy.startswith("allkeys-") or (
            policy.startswith("volatile-") and backend.capabilities.expiring_keys
        ):
            return policy
    return None


def check_server(backend: Admitted) -> None:
    """Refuse a read-only replica; warn when the eviction policy can delete the filter."""
    if not is_cluster(backend.server):
        try:
            role = as_str(backend.server.execute_command("ROLE")[0])
        except ResponseError:
            role = "master"
        if role != "master":
            raise DedupConfigError(
                f"The Redis server of the {backend.name} dupefilter at {backend.key!r} is a "
                f"read-only {role} (replica): every write would be refused. Point "
                "DEDUP_REDIS_URL (or REDIS_URL) at the primary."
            )
    warning = eviction_warning(backend)
    if warning is not None:
        logger.warning("%s%s.", warning[0].upper(), warning[1:])


def room_left(backend: Admitted) -> tuple[int, int] | None:
    """Bytes the server(s) can hold more (``maxmemory``, else the host's memory, less
    what is used), and how many masters; None when a server will not say."""
    try:
        infos = [client.info("memory") for client in masters(backend.server)]
    except ResponseError:  # INFO refused (ACL)
        return None
    room = 0
    for info in infos:
        limit = int(info.get("maxmemory", 0)) or int(info.get("total_system_memory", 0))
        if not limit:
            return None
        room += max(0, limit - int(info.get("used_memory", 0)))
    return room, len(infos)


def check_room(backend: Admitted, needed: int, setting: str) -> None:
    """Refuse to allocate ``needed`` bytes that the server cannot hold (its
    ``maxmemory``, else its host's memory), before anything is written."""
    left = room_left(backend)
    if left is not None and needed > left[0]:
        room, servers = left
        raise DedupConfigError(
            f"The {backend.name} filter at {backend.key!r} needs {needed / 2**30:,.1f} GiB of "
            f"Redis memory, and the server{'s' if servers > 1 else ''} can hold "
            f"{room / 2**30:,.1f} GiB more (maxmemory, or the host's memory). Nothing was "
            f"allocated. Lower {setting} (or use a scalable filter, which grows as needed), "
            "or give Redis more memory."
        )


def room_warning(backend: Admitted, needed: int, setting: str, value: int) -> str | None:
    """What to say when a filter that grows as it records (``needed`` bytes at the
    capacity ``setting`` = ``value``) could never reach that capacity on its server."""
    left = room_left(backend)
    if left is None or needed <= left[0]:
        return None
    return (
        f"the {backend.name} filter at {backend.key!r} is created for {setting} = {value:,}, "
        f"which would take about {needed / 2**30:,.1f} GiB of Redis memory at capacity, and "
        f"the server{'s' if left[1] > 1 else ''} can hold {left[0] / 2**30:,.1f} GiB more: "
        f"set {setting} to the fingerprints you expect (the buckets are sized from it and it "
        "cannot change later)"
    )


def check_spread(backend: Admitted, data_keys: Sequence[str]) -> None:
    """On a cluster, warn when the data keys sit on fewer masters than they could, or
    (a filter of groups: compact, hash) in fewer slots than there are masters."""
    count = len(backend.server.get_primaries())
    used = nodes_of(backend.server, list(data_keys))
    # Keys that share a hash tag (a block's buckets, say) must share a master.
    slots = {backend.server.keyslot(key) for key in data_keys}
    # (A Bloom filter's automatic blocks are few by design: servers.md says when to set
    # more.)
    if len(slots) < count and backend.spread_setting == "DEDUP_HASH_SHARDS":
        logger.warning(
            "The %s dupefilter at %r keeps its data in %d group(s), so at most %d of the "
            "cluster's %d masters hold it: a filter keeps the groups it was created with "
            "(%d for a growing one created on a single server with DEDUP_HASH_SHARDS unset). "
            "A filter created on the cluster with DEDUP_HASH_SHARDS unset gets %d; set it "
            "to a few times the number of masters (e.g. %d) for more.",
            backend.name,
            backend.key,
            len(slots),
            len(slots),
            count,
            GROWING_GROUPS,
            GROUPS,
            4 * count,
        )
    elif len(used) < min(len(slots), count) and backend.spread_setting:
        logger.warning(
            "The %s dupefilter at %r keeps its data in %d slot(s) on %d of the cluster's "
            "%d masters. For an even spread set %s to a few times the number of masters "
            "(e.g. %d) when the filter is created.",
            backend.name,
            backend.key,
            len(slots),
            len(used),
            count,
            backend.spread_setting,
            4 * count,
        )


def evicted_keys(backend: Admitted) -> int | None:
    """Keys the server(s) evicted since they started (INFO stats), or None if refused."""
    try:
        return sum(int(c.info("stats").get("evicted_keys", 0)) for c in masters(backend.server))
    except ResponseError:  # INFO refused (ACL)
        return None


class EvictionWatch:
    """Eviction noticed while a crawl runs, not only at open: every ``every`` calls or
    ``seconds`` (whichever comes first) the server's policy and its ``evicted_keys``
    are read; once the policy can delete the filter and keys were evicted since the
    crawl began, one WARNING says so, and :attr:`evicted` counts them (the
    dupefilter's ``dedup/evicted_keys``). A read that fails is tried at the next turn."""

    def __init__(
        self, clock: Callable[[], float], every: int = 1_000, seconds: float = 60.0
    ) -> None:
        self.clock = clock
        self.every = every
        self.seconds = seconds
        self._calls = 0
        self._next = clock() + seconds
        self._baseline: int | None = None
        self.evicted = 0
        self.warned = False

    def due(self, calls: int = 1) -> bool:
        """Counts ``calls`` requests checked; whether it is time to look (cheap: on the
        hot path)."""
        self._calls += calls
        return self._calls >= self.every or self.clock() >= self._next

    def look(self, backend: Admitted) -> str | None:
        """Read the server; the WARNING to give (once), else None."""
        self._calls = 0
        self._next = self.clock() + self.seconds
        try:
            total = evicted_keys(backend)
            policy = eviction_risk(backend) if total is not None else None
        except Exception:  # (the dedup calls meet the same failure and handle it)
            return None
        if total is None:
            return None
        if self._baseline is None:
            self._baseline = total
        if policy is None:
            self._baseline = total  # evictions of other keys under a safe policy: not ours
            return None
        self.evicted = total - self._baseline
        if self.evicted <= 0 or self.warned:
            return None
        self.warned = True
        return (
            f"The Redis server evicted {self.evicted:,} key(s) while this crawl ran "
            f"(maxmemory-policy {policy!r}): keys of the {backend.name} dupefilter at "
            f"{backend.key!r} may be among them, and the pages they recorded are crawled "
            "again. Set maxmemory-policy noeviction on the server that holds fingerprints "
            "(counted in dedup/evicted_keys)"
        )
