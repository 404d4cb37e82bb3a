"""Record requests' fingerprints and enqueue the new ones' requests in the same call.

A request recorded by the dupefilter and not yet in the queue is lost if the worker
dies there: its parent, fetched again, finds it seen. So each add call of the
dupefilter's backend also pushes, in the same script run, the request of every
fingerprint it wrote as new. The backend's layout declares its add step as a Lua
function of its keys and arguments (:class:`~..server.scripts.AddStep`); the script
that records and enqueues is that step and ``frontier_record`` (``lua/frontier.lua``),
whose inputs are named at its top: the step's keys then the shard's four, and a
header of three numbers before the step's arguments, the requests and the lease ids.
One call per slot group, as the dupefilter's own batches; on a Cluster, each call's
queue shard is in its slot, and a request whose download slot lives in another shard
is held there under a lease until its worker moves it (:mod:`.homes`). The call also
acknowledges the leases it is given for its shard: a call that happens anyway carries
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..backends import calls
from ..backends.base import DedupBackend
from ..backends.calls import Call, FailedCall, one_call
from ..exceptions import DedupConfigError
from ..server.answers import MORE
from ..server.scripts import SET_ADD, AddStep, LuaScript
from .acks import PendingAcks
from .homes import Move
from .queue import FrontierQueue, Shard

#: A request to enqueue: its priority and its entry (:mod:`.codec`).
Queued = tuple[int, bytes]


class EnqueueScript(LuaScript):
    """An add script that also enqueues: after NOSCRIPT, the backend reopens (which
    loads its own scripts) and this one is loaded too."""

    def reload(self, client: Any, on_noscript: Callable[[], None] | None = None) -> None:
        if on_noscript is not None:
            on_noscript()
        self.load(client)


_BY_STEP: dict[str, EnqueueScript] = {}


def enqueueing(step: LuaScript) -> EnqueueScript:
    """The script that runs ``step`` (a layout's add step) and enqueues the requests of
    the fingerprints it wrote as new (``frontier_record``)."""
    if not isinstance(step, AddStep):
        raise DedupConfigError(
            f"The add script {step.name!r} is not declared as an add step (an AddStep, a "
            "Lua function dedup_add(keys, argv)), so the frontier cannot record and "
            "enqueue in one call with it; declare the layout's add_script as "
            "scrapy_dedup_suite.server.scripts.AddStep, or use Scrapy's scheduler"
        )
    made = _BY_STEP.get(step.sha)
    if made is None:
        text = step.within(("frontier",), "return frontier_record(KEYS, ARGV, dedup_add)")
        made = _BY_STEP[step.sha] = EnqueueScript(f"{step.name}+enqueue", text)
    return made


def load_scripts(backend: DedupBackend) -> None:
    """Load the scripts :func:`record_and_enqueue` calls with ``backend`` (at open: a
    first call then finds them)."""
    layout = backend.layout
    enqueueing(SET_ADD if layout is None else layout.add_script).load(backend.server)


def record_and_enqueue(
    backend: DedupBackend,
    queue: FrontierQueue,
    fingerprints: Sequence[str],
    expires: Sequence[float | None],
    requests: Sequence[Queued],
    acks: PendingAcks | None = None,
    moves: list[Move] | None = None,
) -> tuple[list[bool | None], list[FailedCall]]:
    """For each fingerprint: True if it was seen; False if it was new, recorded, and
    its request enqueued in the same call; None if its call failed (the failed calls
    follow, as :meth:`DedupBackend.try_check_and_add_many` gives them: a call the
    server refused wrote nothing, one whose connection broke may have run, all of it).

    ``acks``: lease ids each call to their shard acknowledges once it has recorded and
    enqueued; those no call carried, or whose call failed, are left in it (another
    acknowledgement of one that was is harmless: lease ids are never used again).

    ``moves``: the new requests held in a shard that is not their slot's home get
    added to it (:mod:`.homes`), for the caller to push there."""
    acks = PendingAcks() if acks is None else acks
    moves = [] if moves is None else moves
    layout = backend.layout
    if layout is None:
        if backend.name != "set":
            raise DedupConfigError(
                f"The {backend.name} backend has no layout, so the frontier cannot record "
                "and enqueue in one call with it; use another DEDUP_BACKEND or Scrapy's "
                "scheduler"
            )
        shard = queue.shard_for(backend.key)
        ids = acks.take(shard)
        seen, failed = one_call(
            lambda: _set_call(backend, queue, shard, fingerprints, requests, ids), fingerprints
        )
        if failed:
            acks.add(shard, ids)
        return seen, failed

    held: dict[int, Move] = {}  # (per request held to be moved: its lease, last call's)

    def extend(script: LuaScript, planned: list[Call]) -> tuple[LuaScript, list[Call], list[Any]]:
        """Each call also pushes its new fingerprints' requests to the queue shard in
        its slot (or holds them to be moved) and acknowledges that shard's leases,
        which ride on it."""
        out: list[Call] = []
        riders: list[tuple[Shard, list[str]]] = []
        for keys, args, indices in planned:
            shard = queue.shard_for(keys[0])
            given = acks.take(shard)
            riders.append((shard, given))
            pushed = [x for i in indices for x in (*requests[i], _held(queue, shard, i))]
            header = [len(args), len(given), queue.move_ms]  # (frontier_record's inputs)
            out.append(([*keys, *shard.record_keys], [*header, *args, *pushed, *given], indices))
        return enqueueing(script), out, riders

    def _held(queue: FrontierQueue, shard: Shard, i: int) -> str:
        """The lease of request ``i`` if it is held in ``shard`` to be moved, else ''."""
        priority, entry = requests[i]
        if queue.homes.away(shard, entry) is None:
            held.pop(i, None)
            return ""
        one = held[i] = Move(shard, queue.lease_ids(1, moving=True)[0], priority, entry)
        return one.lease_id

    answers, failed = calls.add_answers(backend, fingerprints, expires, extend)
    moves.extend(
        held[i] for i, answer in enumerate(answers)
        if i in held and answer is not None and MORE <= answer <= 0
    )  # fmt: skip
    for call in failed:
        if call.rider is not None:  # its acknowledgements, for the next call
            acks.add(*call.rider)
    return [None if answer is None else answer > 0 for answer in answers], failed


def _set_call(
    backend: DedupBackend,
    queue: FrontierQueue,
    shard: Shard,
    fingerprints: Sequence[str],
    requests: Sequence[Queued],
    acks: Sequence[str],
) -> list[bool]:
    """scrapy-redis's set: one key, so one call (its queue shard in the set's slot,
    the only one: every slot is at home there)."""
    pushed = [x for request in requests for x in (*request, "")]
    keys = [backend.key, *shard.record_keys]
    args = [len(fingerprints), len(acks), queue.move_ms, *fingerprints, *pushed, *acks]
    answers = calls.run(backend, enqueueing(SET_ADD), keys, args)
    return [bool(answer) for answer in answers]
