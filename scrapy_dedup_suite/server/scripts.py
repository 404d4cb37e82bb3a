"""The Lua scripts shipped in ``scrapy_dedup_suite/server/lua/``, loaded once per server.

A :class:`LuaScript` is called with EVALSHA; when the server answers NOSCRIPT
(after ``SCRIPT FLUSH``, a restart or a failover) it loads the source (or reopens the
backend, which loads it) and tries once more: :meth:`LuaScript.__call__` for one call,
:func:`run_many` for a pipeline of them. This is what redis-py's ``Script`` does,
without its per-call overhead, which matters on the one-round-trip hot path.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from redis.cluster import ClusterPipeline
from redis.exceptions import AskError, NoScriptError, RedisError, TryAgainError

from . import answers
from .cluster import ask_targets

T = TypeVar("T")

#: The first line of every script: the fragments it uses, in the order they go.
INCLUDE = "-- include: "


@cache
def _read(name: str) -> str:
    return (
        resources.files(__package__)
        .joinpath("lua")
        .joinpath(f"{name}.lua")
        .read_text(encoding="utf-8")
    )


def includes(name: str, text: str | None = None) -> list[str]:
    """The fragments script ``name`` names on its first line (``-- include: prelude,
    stamp``), each with what it includes first, each once: the prelude always first.
    ``text``: the script's source, when it is not a file of ``lua/``."""
    first = (_read(name) if text is None else text).partition("\n")[0]
    if not first.startswith(INCLUDE):
        raise ValueError(f"lua/{name}.lua must start with '{INCLUDE}prelude[, ...]'")
    order: list[str] = []
    for part in (p.strip() for p in first[len(INCLUDE) :].split(",")):
        if part == name and text is None:  # the prelude names itself
            continue
        for fragment in [*includes(part), part]:
            if fragment not in order:
                order.append(fragment)
    if name != "prelude" and order[:1] != ["prelude"]:
        raise ValueError(f"lua/{name}.lua must include the prelude first")
    return order


def bare(source: str) -> str:
    """``source`` with its comment lines left empty: what the server keeps of a script
    (every line where it was, so that an error's line still names its command)."""
    return "\n".join("" if line.lstrip().startswith("--") else line for line in source.split("\n"))


#: Every script by its SHA1, to explain an error a server reports by SHA and line.
BY_SHA: dict[str, LuaScript] = {}


class LuaScript:
    """A script of ``lua/`` (``name``), or of a backend of one's own (``text``: its
    source, whose first line names the fragments of ``lua/`` it uses, as the package's
    scripts do: ``-- include: prelude``)."""

    def __init__(self, name: str, text: str | None = None) -> None:
        self.name = name
        body = _read(name) if text is None else text
        #: The script's own text (its first line names the fragments it uses).
        self.body = body
        parts = [answers.lua(), *(_read(part) for part in includes(name, body)), body]
        #: Everything it runs, with the comments; :attr:`source`, what the server keeps.
        self.text = "\n".join(parts)
        self.source = bare(self.text)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()
        BY_SHA[self.sha] = self

    def command_at(self, line: int) -> str | None:
        """The Redis command the script calls on ``line`` (1-based), if one."""
        lines = self.source.splitlines()
        if not 1 <= line <= len(lines):
            return None
        match = re.search(r"""(?:rcall|redis\.call)\(\s*['"](\w+)['"]""", lines[line - 1])
        return match.group(1).upper() if match else None

    def load(self, client: Any) -> None:
        """SCRIPT LOAD on ``client`` (a cluster's: on every master, and on a master added
        since its map was read that an ASK has named)."""
        client.script_load(self.source)
        for master in ask_targets(client):
            # (Best effort: a master that left since is refused as calls there are.)
            with contextlib.suppress(RedisError):
                master.script_load(self.source)

    def evalsha(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA on ``client`` (a pipeline queues it): the one place it is written."""
        return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)

    def reload(self, client: Any, on_noscript: Callable[[], None] | None = None) -> None:
        """After NOSCRIPT: ``on_noscript()`` (a backend reopens, which loads its scripts),
        by default :meth:`load` on ``client``."""
        if on_noscript is None:
            self.load(client)
        else:
            on_noscript()

    def __call__(
        self,
        client: Any,
        keys: Sequence[str],
        args: Sequence[Any],
        on_noscript: Callable[[], None] | None = None,
    ) -> Any:
        """EVALSHA; on NOSCRIPT (a flush, restart or failover), :meth:`reload`, then
        once more. (The hot path: written out, where :meth:`call_and_wait` uses
        :func:`reloading`, to spare a request two Python calls.)"""
        try:
            return self.evalsha(client, keys, args)
        except NoScriptError:
            self.reload(client, on_noscript)
            return self.evalsha(client, keys, args)

    def call_and_wait(
        self,
        client: Any,
        keys: Sequence[str],
        args: Sequence[Any],
        replicas: int,
        timeout_ms: int,
        on_noscript: Callable[[], None] | None = None,
    ) -> tuple[Any, int]:
        """EVALSHA then ``WAIT replicas timeout_ms`` in one round trip: the answer, and
        how many replicas had the call's writes when it came (NOSCRIPT as :meth:`__call__`)."""

        def attempt() -> tuple[Any, int]:
            pipe = client.pipeline(transaction=False)
            self.evalsha(pipe, keys, args)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            answer, acked = pipe.execute(raise_on_error=False)
            for result in (answer, acked):
                if isinstance(result, Exception):
                    raise result
            return answer, int(acked)

        return reloading(attempt, lambda: self.reload(client, on_noscript))

    def __repr__(self) -> str:
        return f"<LuaScript {self.name} {self.sha[:8]}>"


class AddStep(LuaScript):
    """A layout's check-and-add (its atomic step), declared once as a Lua function
    ``dedup_add(keys, argv)`` answering one number per fingerprint, in order: a
    fragment of ``lua/`` named ``name``, or ``text`` for a backend of one's own (its
    first line names the fragments it uses, ``-- include: prelude``, and it defines
    that function). As a script it runs the step on KEYS and ARGV;
    :meth:`within` makes a script that runs it inside more (the frontier's
    ``frontier_record``, which records and enqueues in one call)."""

    def __init__(self, name: str, text: str | None = None) -> None:
        self.name, self.step_text = name, text
        super().__init__(name, self.within((), "return dedup_add(KEYS, ARGV)"))

    def within(self, fragments: Sequence[str], last: str) -> str:
        """The source of a script that includes ``fragments`` too and ends with
        ``last`` (which calls ``dedup_add``)."""
        more = "".join(f", {part}" for part in fragments)
        if self.step_text is None:
            return f"{INCLUDE}prelude{more}, {self.name}\n{last}\n"
        first, _, rest = self.step_text.partition("\n")
        return f"{first}{more}\n{rest.rstrip()}\n{last}\n"


def reloading(attempt: Callable[[], T], reload: Callable[[], None]) -> T:
    """``attempt()``; when the server answers NOSCRIPT (a flush, a restart, a failover),
    ``reload()`` and ``attempt()`` once more: the one place a call of a script the server
    did not know is made again (:func:`run_many` makes again only the calls refused;
    :meth:`LuaScript.__call__` writes it out)."""
    try:
        return attempt()
    except NoScriptError:
        reload()
        return attempt()


def explain(message: str) -> str:
    """``message`` with the command and script a server's script error points at
    (an ACL or a renamed command refuses a call inside a script without naming it)."""
    match = re.search(r"script: ([0-9a-f]{40}), on @user_script:(\d+)", message)
    script = BY_SHA.get(match.group(1)) if match else None
    if script is None or match is None:
        return message
    command = script.command_at(int(match.group(2)))
    where = f"{script.name}.lua"
    if command is None:
        return f"{message} (in {where})"
    return (
        f"{message} (the command is {command}, in {where}: the Redis user needs it; see "
        "the documentation, docs/keys.md: 'Redis commands used')"
    )


FILTER_ADD = AddStep("filter_add")
BLOOM_CONTAINS = LuaScript("bloom_contains")
SET_ADD = AddStep("set_add")
SCALABLE_ADD = AddStep("scalable_add")
SCALABLE_CONTAINS = LuaScript("scalable_contains")
HASH_ADD = AddStep("hash_add")
COMPACT_ADD = AddStep("compact_add")
COMPACT_CONTAINS = LuaScript("compact_contains")
GROW_COMPACT_ADD = AddStep("grow_compact_add")
GROW_COMPACT_CONTAINS = LuaScript("grow_compact_contains")
GROW_HASH_ADD = AddStep("grow_hash_add")
GROW_HASH_CONTAINS = LuaScript("grow_hash_contains")
HASH_CONTAINS = LuaScript("hash_contains")
HASH_FIELD_ADD = AddStep("hash_field_add")
HASH_FIELD_CONTAINS = LuaScript("hash_field_contains")
NATIVE_ADD = AddStep("native_add")
NATIVE_CONTAINS = LuaScript("native_contains")
META_INIT = LuaScript("meta_init")
BITMAP_ALLOC = LuaScript("bitmap_alloc")
DELETE_IF_TYPE = LuaScript("delete_if_type")
HASH_PURGE = LuaScript("hash_purge")
BUCKET_PURGE = LuaScript("bucket_purge")
GROW_HASH_PURGE = LuaScript("grow_hash_purge")
GROW_FORGET = LuaScript("grow_forget")
EXPIRE_IF_MISSING = LuaScript("expire_if_missing")
MERGE_OR = LuaScript("merge_or")
STAMP_SWITCH = LuaScript("stamp_switch")
RECORD_SWITCH = LuaScript("record_switch")
FRONTIER_PUSH = LuaScript("frontier_push")
FRONTIER_LEASE = LuaScript("frontier_lease")
FRONTIER_TAKEOVER = LuaScript("frontier_takeover")
FRONTIER_UNASIDE = LuaScript("frontier_unaside")
FRONTIER_BLOCK = LuaScript("frontier_block")


def _send_without_resending(pipe: ClusterPipeline) -> list[Any]:
    """A cluster pipeline's answers, with its redirections and broken connections left
    as errors (``allow_redirections=False``) rather than re-sent one by one."""
    strategy = getattr(pipe, "_execution_strategy", None)  # redis-py >= 6
    stack = strategy.command_queue if strategy is not None else pipe.command_stack
    try:
        answers: list[Any] = pipe.send_cluster_commands(
            stack, raise_on_error=False, allow_redirections=False
        )
        return answers
    finally:
        pipe.reset()


def run_many(
    client: Any,
    script: LuaScript,
    calls: Sequence[tuple[Sequence[str], Sequence[Any]]],
    on_noscript: Callable[[], None] | None = None,
    keep_errors: bool = False,
) -> list[Any]:
    """Run ``script`` once per ``(keys, args)`` in one non-transactional pipeline (on
    a cluster: sent to every master at once, then read).
    ``keep_errors``: a call that failed answers its exception instead of raising it,
    so the caller keeps the answers of the calls that ran.

    No call is ever sent twice if it may have run: a call refused with NOSCRIPT is
    run again after ``on_noscript`` (default: load the script; refused again, it
    answers the error under ``keep_errors``), one redirected
    (MOVED, ASK, TRYAGAIN: a cluster resharding) is sent again to where it now
    belongs, and nothing else is retried: redis-py's cluster pipeline would re-send a
    call whose connection broke, which may have run (an add answered "seen" by its
    own first write), so its redirections are handled here instead. Any other
    failure is raised.
    """
    results: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    for attempt in (1, 2):
        pipe = client.pipeline(transaction=False)
        for i in todo:
            script.evalsha(pipe, *calls[i])
        if isinstance(pipe, ClusterPipeline):
            answers = _send_without_resending(pipe)
        else:
            answers = pipe.execute(raise_on_error=False)
        refused = []
        for i, answer in zip(todo, answers):
            if isinstance(answer, NoScriptError):
                refused.append(i)
            elif isinstance(answer, (AskError, TryAgainError)):  # not run: MOVED, ASK, TRYAGAIN
                try:
                    results[i] = script.evalsha(client, *calls[i])
                except NoScriptError:  # the master it moved to lacks the script
                    refused.append(i)
                except Exception as exc:
                    if not keep_errors:
                        raise
                    results[i] = exc
            elif isinstance(answer, Exception):
                if not keep_errors:
                    raise answer
                results[i] = answer
            else:
                results[i] = answer
        if not refused:
            return results
        if attempt == 2:
            # Refused twice (a master the reload did not reach): those calls wrote
            # nothing; the others ran and keep their answers.
            error = NoScriptError(f"NOSCRIPT {script.name}: the server does not keep the script")
            if not keep_errors:
                raise error
            for i in refused:
                results[i] = error
            return results
        script.reload(client, on_noscript)
        todo = refused
    raise AssertionError("unreachable")
