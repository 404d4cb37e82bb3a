"""Sentinel: the client on the primary that the sentinels name, found again after a
failover.

``DEDUP_REDIS_SENTINELS`` (addresses of the sentinels) with
``DEDUP_REDIS_SENTINEL_SERVICE`` (the monitored primary's name), or a URL
``redis+sentinel://[:password@]host:port[,host:port...]/service[/db]`` in
``DEDUP_REDIS_URL``: the client asks the sentinels for the primary, and again
after a failover. ``REDIS_PARAMS`` apply to the primary's connections,
``DEDUP_REDIS_SENTINEL_PARAMS`` (a password, say) to the sentinels'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel
from scrapy.settings import BaseSettings
from scrapy_redis import defaults

from ..exceptions import DedupConfigError, shown_url
from ..settings.table import read

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_HELP = (
    "DEDUP_REDIS_SENTINELS is a list of sentinel addresses such as "
    "['10.0.0.1:26379', '10.0.0.2:26379'] (or ('host', port) pairs), with "
    "DEDUP_REDIS_SENTINEL_SERVICE naming the primary they monitor; or DEDUP_REDIS_URL = "
    "'redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/0'"
)


@dataclass(frozen=True)
class SentinelOptions:
    """Where the sentinels are and which primary to ask them for."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    password: str | None = None  # the primary's (from the URL)
    sentinel_params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SentinelOptions | None:
        """None unless the settings name sentinels (DEDUP_REDIS_SENTINELS, or a
        redis+sentinel:// DEDUP_REDIS_URL)."""
        url = read(settings, "DEDUP_REDIS_URL") or ""
        listed = read(settings, "DEDUP_REDIS_SENTINELS")
        extra = read(settings, "DEDUP_REDIS_SENTINEL_PARAMS")
        if isinstance(url, str) and url.startswith(SENTINEL_SCHEME + "://"):
            if listed:
                raise DedupConfigError(
                    "Both DEDUP_REDIS_SENTINELS and a redis+sentinel:// DEDUP_REDIS_URL are set; "
                    "they name the sentinels twice. Keep one."
                )
            return cls._from_url(url, extra)
        if not listed:
            return None
        if isinstance(listed, str):
            listed = [part for part in listed.split(",") if part.strip()]
        if not isinstance(listed, (list, tuple)) or not listed:
            raise DedupConfigError(f"{SENTINEL_HELP}; got {listed!r}")
        service = read(settings, "DEDUP_REDIS_SENTINEL_SERVICE")
        db = read(settings, "DEDUP_REDIS_SENTINEL_DB")
        return cls(tuple(_address(item) for item in listed), service, db, None, extra)

    @classmethod
    def _from_url(cls, url: str, extra: dict[str, Any]) -> SentinelOptions:
        parts = urlsplit(url)
        hosts = parts.netloc.rpartition("@")[2]
        password = unquote(parts.password) if parts.password else None
        path = [p for p in parts.path.split("/") if p]
        if not hosts or not path or len(path) > 2:
            raise DedupConfigError(
                f"DEDUP_REDIS_URL {shown_url(url)!r} is not a Sentinel URL: write "
                "redis+sentinel://[:password@]host:port[,host:port...]/service[/db]"
            )
        db = path[1] if len(path) == 2 else "0"
        if not db.isdigit():
            raise DedupConfigError(
                f"The database in DEDUP_REDIS_URL {shown_url(url)!r} must be a number"
            )
        sentinels = tuple(_address(h) for h in hosts.split(","))
        return cls(sentinels, unquote(path[0]), int(db), password, extra)

    def describe(self) -> str:
        where = ", ".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"the primary {self.service!r} of the sentinels at {where}"


def _address(item: Any) -> tuple[str, int]:
    """A sentinel address from 'host:port' or ('host', port)."""
    if isinstance(item, str):
        host, sep, port = item.strip().rpartition(":")
        if sep and host and port.isdigit():
            return host.strip("[]"), int(port)
    elif (
        isinstance(item, (list, tuple))
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], int)
    ):
        return item[0], item[1]
    raise DedupConfigError(f"{SENTINEL_HELP}; {item!r} is not a host:port address")


def sentinel_address(sentinel: Any) -> tuple[str, int]:
    """host and port of one of a Sentinel client's sentinels."""
    kwargs = sentinel.connection_pool.connection_kwargs
    return kwargs.get("host", "?"), kwargs.get("port", 26379)


#: Connection arguments that make a client never re-send a command by itself.
NO_RETRIES = {"retry_on_timeout": False, "retry_on_error": []}


def sentinel_client(options: SentinelOptions, params: dict[str, Any]) -> Any:
    """A client on the primary the sentinels name, found again after a failover.
    ``params``: REDIS_PARAMS, over scrapy-redis's defaults as for any client."""
    kwargs = {**defaults.REDIS_PARAMS, **params}
    given = kwargs.pop("redis_cls", None)
    if given is not None:
        raise DedupConfigError(
            f"REDIS_PARAMS['redis_cls'] is {given!r}, and Sentinel chooses the client itself; "
            "remove redis_cls"
        )
    kwargs.pop("retry", None)
    kwargs.update(NO_RETRIES, retry=Retry(NoBackoff(), 0), db=options.db)
    if options.password is not None:
        kwargs["password"] = options.password
    sentinel_kwargs = {
        "socket_timeout": kwargs.get("socket_timeout"),
        "socket_connect_timeout": kwargs.get("socket_connect_timeout"),
        **options.sentinel_params,
    }
    try:
        manager = Sentinel(list(options.sentinels), sentinel_kwargs=sentinel_kwargs, **kwargs)
        return manager.master_for(options.service)
    except (ValueError, TypeError) as exc:
        raise DedupConfigError(
            f"Cannot build a Sentinel client for {options.describe()} from REDIS_PARAMS / "
            f"DEDUP_REDIS_SENTINEL_PARAMS: {exc}"
        ) from exc
