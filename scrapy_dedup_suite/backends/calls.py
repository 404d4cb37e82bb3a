"""How a backend's scripts are called: one EVALSHA (with WAIT for replicas in the same
round trip; a NOSCRIPT answer is :mod:`..server.scripts`'s to handle); a batch planned into one
call per cluster slot, whose failed calls are kept beside the answers of those that ran;
a call made again while a scalable filter asks for more of its layer schedule.
Functions of a backend, whose :class:`~.layout.Layout` says what its scripts take
(``context``, ``header``, ``place``, ``keys``, ``contains_call``) and answer
(``again``, ``learn``, ``grown``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..server import scripts
from ..server.cluster import is_cluster
from .keys import slot_of
from .layout import Layout
from .views import FilterView

logger = logging.getLogger(__name__)

#: One planned add call: its keys, its arguments, and the indices of the
#: fingerprints it answers.
Call = tuple[list[str], list[Any], list[int]]

#: What a caller adds to a batch's add calls (the frontier's record-and-enqueue,
#: ``frontier/record.py``): the script to call instead, each planned call with its own
#: keys and arguments added, and per call what the caller must have back if that call
#: fails (its rider: the frontier's acknowledgements it carried), else None.
Extend = Callable[[scripts.LuaScript, list[Call]], tuple[scripts.LuaScript, list[Call], list[Any]]]


class Called(FilterView, Protocol):
    """What the calls here read of a backend (a :class:`~.base.DedupBackend`), and the
    two counts of writes that waited for replicas in vain they keep on it."""

    unreplicated: int
    unreplicated_warned_at: float

    @property
    def layout(self) -> Layout | None: ...

    @property
    def stamp(self) -> str: ...

    @property
    def wait_replicas(self) -> int: ...

    @property
    def wait_timeout_ms(self) -> int: ...

    def reopen(self) -> None: ...


@dataclass(frozen=True)
class FailedCall:
    """A call of a batch that failed: the indices of the fingerprints it carried, and
    what its caller added to it (:data:`Extend`'s rider), if anything."""

    indices: list[int]
    error: Exception
    rider: Any = None


def one_call(
    call: Callable[[], list[bool]], fingerprints: Sequence[str]
) -> tuple[list[bool | None], list[FailedCall]]:
    """``try_check_and_add_many`` for a batch that is one call: all answered or all failed."""
    try:
        return list(call()), []
    except Exception as exc:  # kept for the caller, as try_add_answers does
        return [None] * len(fingerprints), [FailedCall(list(range(len(fingerprints))), exc)]


def run(backend: Called, script: scripts.LuaScript, keys: Sequence[str], args: Any) -> Any:
    """One EVALSHA (one round trip; NOSCRIPT is :mod:`..server.scripts`'s to answer), with WAIT
    in the same round trip where the backend waits for replicas."""
    if backend.wait_replicas:
        return run_and_wait(backend, script, keys, args)
    return script(backend.server, keys, args, backend.reopen)


def run_and_wait(backend: Called, script: scripts.LuaScript, keys: Sequence[str], args: Any) -> Any:
    """EVALSHA then WAIT in one round trip: the answer comes once ``wait_replicas``
    replicas have the call's writes, or the timeout passed (then counted in
    :attr:`unreplicated` and logged; the answer stands)."""
    answer, acked = script.call_and_wait(
        backend.server, keys, args, backend.wait_replicas, backend.wait_timeout_ms, backend.reopen
    )
    if acked < backend.wait_replicas:
        backend.unreplicated += 1
        now = time.monotonic()
        if now - backend.unreplicated_warned_at >= 60:  # at most once a minute
            backend.unreplicated_warned_at = now
            logger.warning(
                "A write of the %s dupefilter reached %d of the %d replica(s) asked "
                "for (DEDUP_WAIT_REPLICAS) within %d ms (%d such writes so far): a "
                "failover now may lose it",
                backend.name,
                acked,
                backend.wait_replicas,
                backend.wait_timeout_ms,
                backend.unreplicated,
            )
    return answer


def layout_of(backend: Called) -> Layout:
    """The backend's layout; a backend without one has no scripts to call."""
    if backend.layout is None:
        raise NotImplementedError(f"{type(backend).__name__} has no layout")
    return backend.layout


def contains(backend: Called, fingerprint: str) -> Any:
    """The contains script's answer for one fingerprint, asked again while the answer
    asks for it (:meth:`~.layout.Layout.again`)."""
    layout = layout_of(backend)
    assert layout.contains_script is not None
    for _ in range(layout.retries + 1):
        keys, args = layout.contains_call(fingerprint, layout.context(backend.server))
        answer = run(backend, layout.contains_script, keys, args)
        if not layout.again(answer):
            return answer
        layout.learn([answer], [fingerprint])
    raise layout.again_error(backend.name, backend.key)


def add_answers(
    backend: Called,
    fingerprints: Sequence[str],
    expires: Sequence[float | None] | None = None,
    extend: Extend | None = None,
) -> tuple[list[int | None], list[FailedCall]]:
    """The add script's answer for each fingerprint (see :attr:`add_script`),
    keeping the answers of the calls that ran when others failed (on a cluster,
    one call per slot): None for each fingerprint of a failed call, and the
    failed calls, each with its fingerprints' indices and its error. A call the
    server refused wrote nothing (every add script checks all it reads and writes
    first); one whose connection broke may have run. ``extend``: see :data:`Extend`.
    The layout is told of each answer < 0 (:meth:`~.layout.Layout.grown`)."""
    layout = layout_of(backend)
    count = len(fingerprints)
    answers: list[int | None] = [None] * count
    failed: list[FailedCall] = []
    if not count:
        return answers, failed
    if expires is None:
        expires = (None,) * count
    elif len(expires) != count:
        raise ValueError(f"{len(expires)} expiries for {count} fingerprints")
    todo: Sequence[int] = range(count)
    for _ in range(layout.retries + 1):
        calls = plan(backend, fingerprints, expires, todo)
        script, riders = layout.add_script, [None] * len(calls)
        if extend is not None:
            script, calls, riders = extend(script, calls)
        try:
            results = run_planned(backend, script, calls)
        except Exception as exc:  # kept for the caller, as run_many's are
            results = [exc] * len(calls)
        again = []
        for (_, _, indices), rider, result in zip(calls, riders, results):
            if isinstance(result, Exception):
                failed.append(FailedCall(indices, result, rider))
                continue
            for i, answer in zip(indices, result):
                answers[i] = answer
                if layout.again(answer):
                    again.append(i)
        if not again:
            break
        layout.learn([answers[i] for i in again], [fingerprints[i] for i in again])
        for i in again:
            answers[i] = None  # asked again: nothing was written for it
        todo = sorted(again)
    else:
        failed.append(FailedCall(list(todo), layout.again_error(backend.name, backend.key)))
    for fingerprint, answer in zip(fingerprints, answers):
        if answer is not None and answer < 0:
            layout.grown(answer, fingerprint)  # (a filter that grew: its layout follows)
    return answers, failed


def plan(
    backend: Called,
    fingerprints: Sequence[str],
    expires: Sequence[float | None],
    todo: Sequence[int],
) -> list[tuple[list[str], list[Any], list[int]]]:
    """The add calls for the fingerprints at ``todo``: one on a single server, one
    per cluster slot; each with the indices of the fingerprints it answers."""
    layout = layout_of(backend)
    context = layout.context(backend.server)
    header = layout.header(context, backend.stamp)
    placed = {i: layout.place(fingerprints[i], expires[i]) for i in todo}
    group_of = {i: group for i, (group, _) in placed.items()}
    groups: dict[int, list[str]] = {}
    for group in group_of.values():
        if group not in groups:
            groups[group] = layout.keys(group, context)
    parts: list[list[int]]
    if is_cluster(backend.server):
        by_slot: dict[int, list[int]] = {}
        for group, keys in groups.items():
            by_slot.setdefault(slot_of(keys[0]), []).append(group)
        parts = list(by_slot.values())
    else:
        parts = [list(groups)]
    calls = []
    for part in parts:
        touched = set(part)
        indices = [i for i in todo if group_of[i] in touched]
        keys, args = layout.pack(part, groups, [placed[i] for i in indices], header)
        calls.append((keys, args, indices))
    return calls


def run_planned(
    backend: Called,
    script: scripts.LuaScript,
    calls: Sequence[tuple[list[str], list[Any], list[int]]],
) -> list[Any]:
    if len(calls) == 1:
        keys, args, _ = calls[0]
        return [run(backend, script, keys, args)]
    return scripts.run_many(
        backend.server,
        script,
        [(keys, args) for keys, args, _ in calls],
        backend.reopen,
        keep_errors=True,
    )
