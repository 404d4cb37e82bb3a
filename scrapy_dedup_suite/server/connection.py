"""The Redis client, built from the same settings scrapy-redis reads.

``DEDUP_REDIS_URL`` (default: ``REDIS_URL``) lets the fingerprints live on
another server than scrapy-redis's queue. ``DEDUP_REDIS_CLUSTER = True`` makes
the client a :class:`redis.cluster.RedisCluster`: the URL names any node, the
client discovers the others, and ``REDIS_PARAMS`` apply to every node. Sentinel's
client is :mod:`.sentinel`'s.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError
from scrapy.settings import BaseSettings, Settings
from scrapy_redis.connection import SETTINGS_PARAMS_MAP, get_redis_from_settings

from ..exceptions import DedupConfigError, RedisUnreachableError, shown_url
from ..settings.table import read
from .cluster import follow_asks_to_new_masters, is_cluster
from .sentinel import SENTINEL_SCHEME, SentinelOptions, sentinel_address, sentinel_client

logger = logging.getLogger(__name__)

URL_HELP = (
    "REDIS_URL looks like redis://[user:password@]host:port/db, rediss://... or "
    "unix:///path/to/redis.sock"
)


#: REDIS_PARAMS that redis-py uses as numbers of seconds only when it connects, so a
#: wrong type would fail later, on the first request, with a raw TypeError.
NUMERIC_PARAMS = ("socket_timeout", "socket_connect_timeout", "health_check_interval")


def retries_of(retry: Retry) -> int:
    """How many times ``retry`` re-sends a command (redis-py < 5.1 has no get_retries)."""
    getter = getattr(retry, "get_retries", None)
    return int(getter() if getter is not None else retry._retries)


def _never_retries(kwargs: dict[str, Any]) -> bool:
    retry = kwargs.get("retry")
    return (
        (retry is None or retries_of(retry) == 0)
        and not kwargs.get("retry_on_timeout")
        and not kwargs.get("retry_on_error")
    )


def without_retries(server: Any) -> Any:
    """``server``, or a client like it on its own pool, that never sends a command twice.

    redis-py re-sends a command after a timeout or a dropped connection when the
    client is built with ``retry_on_timeout=True`` (scrapy-redis's default) or a
    ``retry``. For a check-and-add that is not safe: when the server had already
    run the first call, the second answers "seen" and a new page is dropped. The
    dupefilter makes its own retries and knows which answers to distrust.
    """
    if is_cluster(server):
        # RedisCluster re-runs a command after ConnectionError/TimeoutError
        # (``retry``); MOVED/ASK/TRYAGAIN redirections, which mean the command
        # did not run, are followed as before.
        retry = getattr(server, "retry", None)
        if retry is None:  # redis-py < 5.1: its own count of attempts after the first
            server.cluster_error_retry_attempts = 0
        elif retries_of(retry) != 0:
            server.set_retry(Retry(NoBackoff(), 0))
        follow_asks_to_new_masters(server)
        return server
    pool = getattr(server, "connection_pool", None)
    if pool is None or _never_retries(pool.connection_kwargs):
        return server
    kwargs = {
        **pool.connection_kwargs,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_timeout": False,
        "retry_on_error": [],
    }
    new_pool = type(pool)(
        connection_class=pool.connection_class, max_connections=pool.max_connections, **kwargs
    )
    return type(server)(connection_pool=new_pool)


def server_time_ms(client: Any) -> int:
    """The server's clock in Unix milliseconds (``TIME``): the one expiries are kept by."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def has_command(client: Any, name: str) -> bool:
    """Whether the server behind ``client`` knows the command ``name`` (COMMAND INFO
    answers nil for one it does not; nothing is run)."""
    try:
        info = client.execute_command("COMMAND INFO", name)
    except ResponseError as exc:  # an ACL that refuses COMMAND
        raise DedupConfigError(
            f"The Redis server at {address(client)} refused COMMAND INFO ({exc}), which the "
            f"dupefilter sends at open to learn whether the server has {name}: allow the "
            "COMMAND command for its Redis user (ACL SETUSER ... +command)"
        ) from None
    if isinstance(info, dict):  # redis-py parses the reply into {name: details}
        return any(details for details in info.values())
    return bool(info) and info[0] is not None


#: Failures that mean "the server could not be reached" (refused, timed out, no
#: cluster node answering, wrong password: AuthenticationError is a ConnectionError).
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, RedisClusterException)
#: What connecting can fail with besides: a server that does not speak Redis's protocol
#: (an HTTP port), a database it does not have (SELECT's error while connecting).
CONNECT_FAILURES = (*UNREACHABLE, InvalidResponse, ResponseError)


def is_connect_failure(exc: BaseException) -> bool:
    """Whether ``exc``, one of CONNECT_FAILURES, is about connecting (an error reply
    other than SELECT's is a command's own)."""
    if isinstance(exc, ResponseError) and not isinstance(exc, UNREACHABLE):
        return str(exc).startswith("DB index")
    return isinstance(exc, CONNECT_FAILURES)


def redis_source(settings: BaseSettings) -> str:
    """The setting(s) that choose the dupefilter's server, for messages."""
    if settings.get("DEDUP_REDIS_SENTINELS"):  # (messages: named as set, not checked)
        return "DEDUP_REDIS_SENTINELS"
    if settings.get("DEDUP_REDIS_URL"):
        return "DEDUP_REDIS_URL"
    if settings.get("REDIS_URL"):
        return "REDIS_URL"
    return "REDIS_HOST/REDIS_PORT"


def address(client: Any) -> str:
    """host:port (and db) a client talks to; on a cluster, its first node."""
    try:
        if is_cluster(client):
            node = client.get_default_node() or client.get_nodes()[0]
            return f"{node.host}:{node.port} (a Redis Cluster node)"
        pool = client.connection_pool
        if hasattr(pool, "service_name"):  # a SentinelConnectionPool
            where = ", ".join(
                "{}:{}".format(*sentinel_address(s)) for s in pool.sentinel_manager.sentinels
            )
            return f"the primary {pool.service_name!r} of the sentinels at {where}"
        kwargs = pool.connection_kwargs
    except Exception:  # an unusual client: say what we can
        return repr(client)
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)} db {kwargs.get('db', 0)}"


def failure_text(exc: BaseException) -> str:
    """A failed call's error in one short line, for logs and messages."""
    if isinstance(exc, MasterNotFoundError):  # its text holds each sentinel client's repr
        return "no sentinel named a primary (they are down, unreachable, or monitor another name)"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def unreachable(client: Any, exc: BaseException, source: str, doing: str) -> RedisUnreachableError:
    """The one-line error for a server that could not be reached."""
    if isinstance(exc, MasterNotFoundError):
        # redis-py's text holds each sentinel client's repr (~1,500 characters).
        service = getattr(client.connection_pool, "service_name", "?")
        return RedisUnreachableError(
            f"Cannot reach Redis at {address(client)} (from {source}) {doing}: no sentinel "
            f"named a primary for {service!r}. Check that the sentinels run there and "
            f"monitor {service!r} (redis-cli -p PORT SENTINEL MASTERS), and their password "
            "in DEDUP_REDIS_SENTINEL_PARAMS."
        )
    reason = failure_text(exc).rstrip(".")
    if isinstance(exc, InvalidResponse):
        return RedisUnreachableError(
            f"The server at {address(client)} (from {source}) did not answer in Redis's "
            f"protocol {doing} ({reason}): point {source} at a Redis server's port (use "
            "rediss:// where the server speaks TLS, redis:// where it does not)."
        )
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        return RedisUnreachableError(
            f"The Redis server at {address(client)} (from {source}) showed a TLS certificate "
            f"this client does not trust {doing} ({reason}): set REDIS_PARAMS ssl_ca_certs "
            "to the file of the CA that signed it (or ssl_cert_reqs to 'none' not to check it)."
        )
    if isinstance(exc, ResponseError) and "DB index" in reason:
        return RedisUnreachableError(
            f"The Redis server at {address(client)} (from {source}) has no such database "
            f"{doing} ({reason}): set the /db part of {source} to a database the server has "
            "(0 up to its `databases` setting - 1; 0 to 15 by default)."
        )
    return RedisUnreachableError(
        f"Cannot reach Redis at {address(client)} (from {source}) {doing}: {reason}. Check "
        f"that the server runs there and that {source} (host, port, db, rediss:// for TLS) "
        "and REDIS_PARAMS (password, timeouts) are right."
    )


def get_redis(settings: BaseSettings, socket_timeout: float | None = None) -> Any:
    """The dupefilter's client: ``DEDUP_REDIS_URL`` if set, else ``REDIS_URL`` (or
    ``REDIS_HOST``/``REDIS_PORT``), with ``REDIS_PARAMS``, built exactly as
    scrapy-redis builds its own, so both talk to the same server unless told
    otherwise; a ``RedisCluster`` client when ``DEDUP_REDIS_CLUSTER`` is true. It
    never re-sends a command by itself (:func:`without_retries`). ``socket_timeout``
    replaces REDIS_PARAMS' (the dupefilter's DEDUP_SOCKET_TIMEOUT)."""
    params = read(settings, "REDIS_PARAMS")
    url_setting = "DEDUP_REDIS_URL" if read(settings, "DEDUP_REDIS_URL") else "REDIS_URL"
    url = read(settings, url_setting)
    if url_setting == "REDIS_URL" and (url or "").startswith(SENTINEL_SCHEME + "://"):
        raise DedupConfigError(
            f"REDIS_URL {shown_url(url)!r} names sentinels, and scrapy-redis's queue, which reads "
            "REDIS_URL too, does not speak Sentinel: put the redis+sentinel:// URL in "
            "DEDUP_REDIS_URL, or use DEDUP_REDIS_SENTINELS"
        )
    cluster = read(settings, "DEDUP_REDIS_CLUSTER")
    # The settings scrapy-redis reads, with the dupefilter's own URL.
    chosen = Settings({name: settings.get(name) for name in SETTINGS_PARAMS_MAP})
    chosen.set("REDIS_URL", url)
    for name in NUMERIC_PARAMS:
        value = params.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise DedupConfigError(
                f"REDIS_PARAMS[{name!r}] must be a number of seconds (e.g. 5), got {value!r}"
            )
    if socket_timeout is not None:
        params["socket_timeout"] = socket_timeout
    chosen.set("REDIS_PARAMS", params)
    sentinel = SentinelOptions.from_settings(settings)
    if sentinel is not None:
        if cluster:
            raise DedupConfigError(
                "DEDUP_REDIS_CLUSTER and Sentinel (DEDUP_REDIS_SENTINELS or a redis+sentinel:// "
                "URL) are both set; a Redis Cluster fails over by itself. Keep one."
            )
        return sentinel_client(sentinel, params)
    if cluster:
        return without_retries(_cluster_client(chosen, url_setting, url))
    try:
        return without_retries(get_redis_from_settings(chosen))
    except (ValueError, TypeError) as exc:
        raise DedupConfigError(
            f"Cannot build a Redis client from {url_setting}={shown_url(url)!r} / REDIS_PARAMS: "
            f"{shown_url(str(exc))}. "
            f"{URL_HELP}"
        ) from exc


def _answered(exc: BaseException) -> bool:
    """Whether a server's error reply is among the causes of ``exc``."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ResponseError) or "Cluster mode is not enabled" in str(cause):
            return True  # (redis-py < 5.1 says the server's refusal in its own exception)
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _cluster_client(settings: Settings, url_setting: str, url: str | None) -> Any:
    if url is not None and url.startswith("unix:"):
        raise DedupConfigError(
            f"DEDUP_REDIS_CLUSTER is on but {url_setting}={shown_url(url)!r} is a Unix socket; "
            f"a Redis Cluster is reached over TCP: set {url_setting} to any node, e.g. "
            "redis://10.0.0.1:6379"
        )
    params = settings.getdict("REDIS_PARAMS")
    given = params.get("redis_cls")
    if given is not None and given not in (RedisCluster, "redis.cluster.RedisCluster"):
        raise DedupConfigError(
            f"DEDUP_REDIS_CLUSTER is on but REDIS_PARAMS['redis_cls'] is {given!r}; remove "
            "redis_cls (the dupefilter then uses redis.cluster.RedisCluster) or turn "
            "DEDUP_REDIS_CLUSTER off"
        )
    settings.set("REDIS_PARAMS", {**params, "redis_cls": RedisCluster})
    host, port = settings.get("REDIS_HOST", "localhost"), settings.get("REDIS_PORT", 6379)
    where = shown_url(url) or f"{host}:{port}"
    try:
        # RedisCluster connects at once to learn the slot map.
        return get_redis_from_settings(settings)
    except (ValueError, TypeError) as exc:
        raise DedupConfigError(
            f"Cannot build a Redis Cluster client from {url_setting}={shown_url(url)!r} / "
            f"REDIS_PARAMS: {shown_url(str(exc))}. {URL_HELP} (database 0: a cluster has no other)"
        ) from exc
    except RedisClusterException as exc:
        # A node that answered CLUSTER SLOTS with an error is no cluster node (redis-py
        # raises this while handling that ResponseError); else none could be reached.
        if not _answered(exc):
            raise DedupConfigError(
                f"Cannot reach the Redis Cluster at {where} ({shown_url(str(exc))}). A cluster "
                "client reads the "
                "slot map when it is built, so a node must answer at start-up."
            ) from exc
        raise DedupConfigError(
            f"DEDUP_REDIS_CLUSTER is on but {where} does not answer as a Redis Cluster node "
            f"({shown_url(str(exc))}). Point {url_setting} at a node of the cluster, or turn "
            "DEDUP_REDIS_CLUSTER "
            "off for a single server."
        ) from exc
    except RedisError as exc:
        raise DedupConfigError(
            f"Cannot reach the Redis Cluster at {where}: {shown_url(str(exc))}. A cluster client "
            "reads the slot "
            "map when it is built, so a node must answer at start-up."
        ) from exc


def check_reachable(settings: BaseSettings) -> None:
    """Raise the one-line error for a dupefilter server that cannot be reached, before
    the crawl starts (BatchDedupMiddleware: Scrapy builds it before its engine, so the
    message is the crawl's last line, ahead of scrapy-redis's scheduler's own ping and
    the engine's shutdown errors). One PING, on a client closed after."""
    client = None
    try:
        client = get_redis(settings, socket_timeout=read(settings, "DEDUP_SOCKET_TIMEOUT"))
        client.ping()
    except CONNECT_FAILURES as exc:
        raise unreachable(
            client,
            exc,
            redis_source(settings),
            "when the crawl started; the crawl cannot start (DEDUP_ON_ERROR does not apply "
            "at start-up)",
        ) from None
    finally:
        if client is not None:
            client.close()
