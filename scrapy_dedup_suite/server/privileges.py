"""The Redis commands each feature sends, the ACL line that grants exactly them, and
the one line a refused command gives.

Measured, not guessed: ``tests/test_acl.py`` runs a crawl per backend, the batch
path, the frontier, the janitor and each command as a Redis user granted only what
:func:`acl_line` writes for it, and compares what it did with the same run as the
default user. Commands inside the package's scripts need granting too (Redis checks a
script's calls against its caller's ACL). No command here is in ``@dangerous``:
``CONFIG GET``, ``INFO``, ``ROLE``, ``MEMORY USAGE`` and ``OBJECT ENCODING`` are read
by a crawl where allowed (eviction and replica checks, memory figures) and skipped when
refused,
so a crawl's lines leave them out (:data:`OPTIONAL`).

A refused command (``NOPERM``, or a script's call refused by the ACL) is a
:class:`~..exceptions.DedupConfigError` naming the command and the ``ACL SETUSER`` line
to add, where the call was made (the dupefilter's and the frontier's open, a
command), not a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from ..exceptions import DedupConfigError
from . import scripts

#: Read by a crawl where the ACL allows, skipped when refused: the eviction and replica
#: checks (CONFIG GET, INFO, ROLE: in ``@dangerous`` or ``@admin``) and the memory
#: figures of the summary at the close. The commands' reports measure with MEMORY USAGE
#: and OBJECT ENCODING, so their lines grant those.
OPTIONAL = ("config|get", "info", "role", "memory|usage", "object|encoding")

#: What every script call needs (EVALSHA, SCRIPT LOAD at open and after a NOSCRIPT)
#: and what the scripts' shared part calls (``lua/prelude.lua``).
_SCRIPTS = ("evalsha", "script|load", "time", "type", "pexpire", "pttl")
#: What every backend's open and clear() send: the record, the stamps, the deletes.
_FILTER = (*_SCRIPTS, "exists", "get", "set", "hgetall", "hset", "hmget", "unlink", "del")
_BLOOM = (*_FILTER, "getbit", "setbit", "strlen", "bitcount")
_HASH = (*_FILTER, "hget", "hexists", "mget", "hlen", "dbsize", "scan", "command|info")
#: What a command's report measures (memory, encodings) and asks (a command's presence).
_REPORTS = ("memory|usage", "object|encoding", "command|info")
_FRONTIER = (
    *_SCRIPTS, "exists", "get", "hget", "hgetall", "hset", "hdel", "hexists", "hincrby",
    "hlen", "zadd", "zcard", "zrange", "zrangebyscore", "zrevrangebyscore", "zrem",
    "zremrangebyscore", "rpush", "lrange", "ltrim", "lrem", "llen", "unlink", "hkeys",
)  # fmt: skip


@dataclass(frozen=True)
class Feature:
    """What ``name`` sends (``what`` says when)."""

    name: str
    commands: tuple[str, ...]
    what: str


#: Every feature, in the order docs/servers.md lists them.
FEATURES: tuple[Feature, ...] = (
    Feature("client", ("hello", "ping"), "every connection (redis-py's handshake)"),
    Feature(
        "scrapy-redis",
        ("zadd", "zcard", "zrange", "zremrangebyrank", "multi", "exec", "del"),
        "scrapy-redis's scheduler and its priority queue (its FIFO and LIFO queues: "
        "`lpush rpop lpop llen`; RedisSpider's start URLs: `lpop spop llen scard`)",
    ),
    Feature("set", (*_FILTER, "sadd", "sismember", "smismember", "scard"), "`set` backend"),
    Feature("compact", _HASH, "`compact` backend, sized or growing"),
    Feature("hash", (*_HASH, "hdel"), "`hash` backend (the janitor's expiry), sized or growing"),
    Feature(
        "hash-field-expiry",
        (*_HASH, "hdel", "hpexpire", "hpexpiretime"),
        "`hash` backend with the server's field expiry (Redis >= 7.4, Valkey 9)",
    ),
    Feature("bloom", _BLOOM, "`bloom` backend, fixed or scalable"),
    Feature("windowed-bloom", _BLOOM, "`windowed-bloom` backend"),
    Feature(
        "native-bloom",
        (*_FILTER, "bf.insert", "bf.exists", "bf.card", "bf.info", "command|info"),
        "`native-bloom` and `windowed-native-bloom` (the server's Bloom module)",
    ),
    Feature(
        "frontier",
        _FRONTIER,
        "the frontier scheduler, its takeover of scrapy-redis's queue and its hand-back "
        "(`scrapy frontier-handback`), with the backend's line",
    ),
    Feature(
        "janitor",
        ("hdel", "hlen", "hscan", "scan", "dbsize", "bitcount", "memory|usage"),
        "the janitor (extension and `scrapy dedup-janitor`), with the `hash` line",
    ),
    Feature(
        "dedup-info",
        (*_REPORTS, "hkeys", "hrandfield", "hscan", "llen", "scard", "zcard", "zrange", "dbsize"),
        "`scrapy dedup-info`, with the backend's line (and the frontier's)",
    ),
    Feature(
        "metrics",
        ("memory|usage", "hkeys", "hmget", "llen", "zcard", "zrange"),
        "`DedupMetrics` (with the frontier's line; `DEDUP_METRICS_FILTER_EVERY`: and "
        "`dedup-info`'s)",
    ),
    Feature(
        "dedup-forget",
        (*_REPORTS, "hdel", "srem"),
        "`scrapy dedup-forget`, with the backend's line",
    ),
    Feature(
        "migration",
        (
            *_REPORTS,
            "sscan",
            "srandmember",
            "scard",
            "srem",
            "scan",
            "setrange",
            "bitop",
            "hdel",
            "hlen",
        ),
        "`scrapy migrate-set-to-bloom`, with the `set` line and the target backend's",
    ),
    Feature(
        "conversion",
        (*_REPORTS, "hscan", "hrandfield", "hdel", "hlen"),
        "`scrapy convert-hash-layout` with the `hash` line (or `hash-field-expiry`'s), "
        "`scrapy convert-to-growing` with the `compact` or `hash` line",
    ),
)

BY_NAME = {feature.name: feature for feature in FEATURES}


def commands_of(*names: str) -> list[str]:
    """The commands the features ``names`` send together, sorted (``client`` always)."""
    found = {command for name in ("client", *names) for command in BY_NAME[name].commands}
    return sorted(found)


def acl_line(
    *names: str, user: str = "crawler", password: str = "PASSWORD", keys: tuple[str, ...] = ()
) -> str:
    """``ACL SETUSER`` granting exactly the features ``names`` on ``keys`` (patterns
    such as ``site:*`` and ``{site:*``: ``backends.keys.spider_key_patterns``)."""
    patterns = " ".join(f"~{pattern}" for pattern in keys)
    grants = " ".join(f"+{command}" for command in commands_of(*names))
    return f"ACL SETUSER {user} on >{password} resetkeys {patterns} resetchannels -@all {grants}"


#: A script's call the ACL refused (Redis 7.0 answers ERR, later servers NOPERM; the
#: script's place names the command, ``scripts.explain``).
_SCRIPT_REFUSED = re.compile(r"can't run this command|no permissions to run")
#: The command a NOPERM reply names.
_NAMED = re.compile(r"run the '([^']+)' command")


def refused_command(exc: BaseException) -> tuple[str, str] | None:
    """The command (ACL name, e.g. ``config|get``; "?" when the reply does not say)
    whose refusal by the ACL ``exc`` reports, and the script it was called in ("" for
    a command sent as is); None when ``exc`` is not such a refusal."""
    if not isinstance(exc, ResponseError):
        return None
    text = str(exc)
    if "@user_script" in text and _SCRIPT_REFUSED.search(text):
        match = re.search(r"script: ([0-9a-f]{40}), on @user_script:(\d+)", text)
        script = scripts.BY_SHA.get(match.group(1)) if match else None
        command = script.command_at(int(match.group(2))) if script and match else None
        return (command or "?").lower(), f"{script.name}.lua" if script else "a script"
    if isinstance(exc, NoPermissionError):
        named = _NAMED.search(text)
        return (named.group(1) if named else "?"), ""
    return None


def permission_error(exc: BaseException, client: Any = None) -> DedupConfigError | None:
    """The one-line error for a command the Redis user may not run, or None."""
    refused = refused_command(exc)
    if refused is None:
        return None
    command, script = refused
    user = _user_of(client)
    what = command.upper().replace("|", " ") if command != "?" else f"a command ({exc})"
    where = f" (called in the package's {script})" if script else ""
    grant = f"ACL SETUSER {user} +{command}" if command != "?" else "its ACL"
    return DedupConfigError(
        f"The Redis user {user!r} may not run {what}{where}: grant it ({grant}), or give "
        "the user the line docs/servers.md 'Least privilege' lists for the features it runs"
    )


def _user_of(client: Any) -> str:
    """The user ``client`` logs in as ("default" when none is given)."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        kwargs = getattr(client, "nodes_manager", None)
        kwargs = getattr(kwargs, "connection_kwargs", {}) if kwargs is not None else {}
    return str(kwargs.get("username") or "default")


def markdown_table() -> str:
    """The features and their commands as docs/servers.md shows them (its test checks
    that the page holds this text)."""
    rows = ["| feature | commands | what |", "|---|---|---|"]
    for feature in FEATURES:
        # (a pipe escaped: a table cell's own, even in a code span)
        commands = " ".join(f"`{c.replace('|', chr(92) + '|')}`" for c in sorted(feature.commands))
        rows.append(f"| `{feature.name}` | {commands} | {feature.what} |")
    return "\n".join(rows)
