"""A Redis Cluster, as the package meets it: whether a client is one, its masters and
which holds a key, its slot map read again, and the ASK redirections to a master the
map does not list yet followed safely (redis-py issue 4015)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from redis.cluster import PRIMARY, ClusterNode, RedisCluster

logger = logging.getLogger(__name__)


def is_cluster(server: Any) -> bool:
    """Whether ``server`` is a Redis Cluster client."""
    return isinstance(server, RedisCluster)


def refresh_slots(server: Any) -> None:
    """Read a cluster's map of slots and nodes again (after a slot moved or a master
    was added mid-crawl: redis-py follows a redirection to a node it has not
    discovered only after this). Nothing for a single server; a failure to read it is
    left to the call retried next."""
    if not is_cluster(server):
        return
    try:
        server.nodes_manager.initialize()
    except Exception as exc:  # the retried call meets the same failure and says it
        logger.debug("Could not read the cluster's slot map again: %s", exc)


def node_of(server: Any, key: str) -> Any:
    """A client on the master that holds ``key`` (the server itself if not a cluster)."""
    if is_cluster(server):
        return server.get_redis_connection(server.get_node_from_key(key))
    return server


def masters(server: Any) -> list[Any]:
    """A client per master: every primary of a cluster, or the server itself."""
    if is_cluster(server):
        return [server.get_redis_connection(node) for node in server.get_primaries()]
    return [server]


def nodes_of(server: Any, keys: list[str]) -> dict[str, int]:
    """How many of ``keys`` each master holds: ``{"host:port": n}`` on a cluster,
    ``{"server": len(keys)}`` on a single server."""
    if not is_cluster(server):
        return {"server": len(keys)}
    counts: dict[str, int] = {}
    for key in keys:
        node = server.get_node_from_key(key).name
        counts[node] = counts.get(node, 0) + 1
    return counts


def follow_asks_to_new_masters(server: Any) -> None:
    """Make cluster client ``server`` follow an ASK to a master it has not discovered.

    redis-py looks the node an ASK names up in its map, which lists the masters that
    serve slots: a master added mid-crawl is not there while a slot moves onto it.
    The lookup answered None and the redirection failed inside the client
    (AttributeError, redis-py issue 4015) after it had disconnected and handed back
    to its pool a second time the connection of its first try, which another thread
    may hold by then: two threads then read each other's answers, and a call could
    answer "seen" for pages it had just recorded as new. Its pipelines met the same
    None. Here the map's lookup, which the client and its pipelines share, makes a node
    of a name it lacks (a master: ASK names one), kept until the map lists it.
    """
    if getattr(server, "_dedup_follows_asks", False):
        return
    # The map's own lookup, which the client and its pipelines share.
    manager = server.nodes_manager
    lookup = manager.get_node
    made: dict[str, ClusterNode] = {}
    lock = threading.Lock()

    def get_node(
        host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        node: ClusterNode | None = lookup(host, port, node_name)
        if node is None and node_name is None and host and port:
            # redis-py >= 8.2 looks an ASK's master up so (and a MOVED's, in every
            # version, then lists the master it makes): listed here as a MOVED lists it.
            with lock:
                node = manager.nodes_cache.get(f"{host}:{port}")
                if node is None:
                    node = ClusterNode(host, int(port), PRIMARY)
                    manager.nodes_cache[node.name] = node
            return node
        if node_name is None or host is not None or port is not None:
            return node  # (not the lookup of an ASK)
        if node is not None:
            if made:
                with lock:
                    stale = made.pop(node_name, None)  # the map lists it now
                if stale is not None and stale.redis_connection is not None:
                    stale.redis_connection.connection_pool.disconnect(inuse_connections=False)
            return node
        with lock:
            node = made.get(node_name)
            if node is None:
                address, _, number = node_name.rpartition(":")
                node = made[node_name] = ClusterNode(address, int(number), PRIMARY)
        return node

    manager.get_node = get_node
    server._dedup_follows_asks = True
    server._dedup_ask_targets = made


def ask_targets(server: Any) -> list[Any]:
    """A client on each master an ASK named that the cluster client's map lacks (see
    :func:`follow_asks_to_new_masters`): scripts are loaded there too."""
    made: dict[str, ClusterNode] = getattr(server, "_dedup_ask_targets", None) or {}
    if not made:
        return []
    for name in [name for name in made if name in server.nodes_manager.nodes_cache]:
        made.pop(name, None)  # the map lists it now: loaded as one of its masters
    return [server.get_redis_connection(node) for node in list(made.values())]
