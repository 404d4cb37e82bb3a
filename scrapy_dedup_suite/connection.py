"""The Redis client, built from the same settings scrapy-redis reads."""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings
from scrapy_redis.connection import get_redis_from_settings

from .exceptions import DedupConfigError


def get_redis(settings: BaseSettings) -> Any:
    """A client for ``REDIS_URL`` (or ``REDIS_HOST``/``REDIS_PORT``) with ``REDIS_PARAMS``,
    exactly as scrapy-redis builds it, so both talk to the same server."""
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
    try:
        return get_redis_from_settings(settings)
    except (ValueError, TypeError) as exc:
        raise DedupConfigError(
            f"Cannot build a Redis client from REDIS_URL={url!r} / REDIS_PARAMS: {exc}. "
            "REDIS_URL looks like redis://[user:password@]host:port/db, rediss://... or "
            "unix:///path/to/redis.sock"
        ) from exc
