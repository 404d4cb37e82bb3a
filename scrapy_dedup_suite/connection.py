"""The Redis client, built from the same settings scrapy-redis reads.

``DEDUP_REDIS_CLUSTER = True`` makes it a :class:`redis.cluster.RedisCluster`:
``REDIS_URL`` (or ``REDIS_HOST``/``REDIS_PORT``) names any node, the client
discovers the others, and ``REDIS_PARAMS`` apply to every node connection.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisClusterException, RedisError
from scrapy.settings import BaseSettings
from scrapy_redis.connection import get_redis_from_settings

from . import config
from .exceptions import DedupConfigError

URL_HELP = (
    "REDIS_URL looks like redis://[user:password@]host:port/db, rediss://... or "
    "unix:///path/to/redis.sock"
)


def is_cluster(server: Any) -> bool:
    """Whether ``server`` is a Redis Cluster client."""
    from redis.cluster import RedisCluster

    return isinstance(server, RedisCluster)


def get_redis(settings: BaseSettings) -> Any:
    """A client for ``REDIS_URL`` (or ``REDIS_HOST``/``REDIS_PORT``) with ``REDIS_PARAMS``,
    exactly as scrapy-redis builds it, so both talk to the same server; a
    ``RedisCluster`` client when ``DEDUP_REDIS_CLUSTER`` is true."""
    params = settings.get("REDIS_PARAMS")
    if params is not None and not isinstance(params, (dict, BaseSettings)):
        raise DedupConfigError(
            f"REDIS_PARAMS must be a dict of redis-py client arguments, got {params!r}"
        )
    url = settings.get("REDIS_URL")
    if url is not None and not isinstance(url, str):
        raise DedupConfigError(
            f"REDIS_URL must be a string such as 'redis://127.0.0.1:6379/0', got {url!r}"
        )
    cluster = config.check_bool(
        "DEDUP_REDIS_CLUSTER",
        settings.get("DEDUP_REDIS_CLUSTER", config.default("DEDUP_REDIS_CLUSTER")),
    )
    if cluster:
        return _cluster_client(settings, url)
    try:
        return get_redis_from_settings(settings)
    except (ValueError, TypeError) as exc:
        raise DedupConfigError(
            f"Cannot build a Redis client from REDIS_URL={url!r} / REDIS_PARAMS: {exc}. {URL_HELP}"
        ) from exc


def _cluster_client(settings: BaseSettings, url: str | None) -> Any:
    from redis.cluster import RedisCluster

    if url is not None and url.startswith("unix:"):
        raise DedupConfigError(
            f"DEDUP_REDIS_CLUSTER is on but REDIS_URL={url!r} is a Unix socket; a Redis Cluster "
            "is reached over TCP: set REDIS_URL to any node, e.g. redis://10.0.0.1:6379"
        )
    params = dict(settings.getdict("REDIS_PARAMS"))
    given = params.get("redis_cls")
    if given is not None and given not in (RedisCluster, "redis.cluster.RedisCluster"):
        raise DedupConfigError(
            f"DEDUP_REDIS_CLUSTER is on but REDIS_PARAMS['redis_cls'] is {given!r}; remove "
            "redis_cls (the dupefilter then uses redis.cluster.RedisCluster) or turn "
            "DEDUP_REDIS_CLUSTER off"
        )
    params["redis_cls"] = RedisCluster
    overridden = settings.copy()
    overridden.set("REDIS_PARAMS", params)
    where = url or f"{settings.get('REDIS_HOST', 'localhost')}:{settings.get('REDIS_PORT', 6379)}"
    try:
        # RedisCluster connects at once to learn the slot map.
        return get_redis_from_settings(overridden)
    except (ValueError, TypeError) as exc:
        raise DedupConfigError(
            f"Cannot build a Redis Cluster client from REDIS_URL={url!r} / REDIS_PARAMS: {exc}. "
            f"{URL_HELP} (database 0: a cluster has no other)"
        ) from exc
    except RedisClusterException as exc:
        raise DedupConfigError(
            f"DEDUP_REDIS_CLUSTER is on but {where} does not answer as a Redis Cluster node "
            f"({exc}). Point REDIS_URL at a node of the cluster, or turn DEDUP_REDIS_CLUSTER off "
            "for a single server."
        ) from exc
    except RedisError as exc:
        raise DedupConfigError(
            f"Cannot reach the Redis Cluster at {where}: {exc}. A cluster client reads the slot "
            "map when it is built, so a node must answer at start-up."
        ) from exc
