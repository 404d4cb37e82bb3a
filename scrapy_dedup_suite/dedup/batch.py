"""The batch path's bookkeeping: many fingerprints checked and recorded in one round
trip per master (:func:`check`), what each one's outcome is, and the requests a batch
admitted before the scheduler asks about them (:class:`Admitted`).

``BatchDedupMiddleware`` drives it through the dupefilter's :class:`Batches`
(``df.batches``): ``prepare`` on the reactor thread, ``check`` in a thread,
``account`` on the reactor thread.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.calls import FailedCall
from ..exceptions import DedupBackendError
from ..server.connection import failure_text
from ..server.failures import ErrorPolicy, as_failure, code_of, is_transient, translate

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request, Spider

    from ..backends.admission import EvictionWatch
    from ..backends.base import DedupBackend
    from .backend_handle import BackendHandle
    from .counts import DedupCounts
    from .local_cache import Unrecorded
    from .recovery import Recovery
    from .request_step import RequestStep

logger = logging.getLogger(__name__)

#: What a batch found for each fingerprint (:attr:`BatchResult.outcomes`).
SEEN = "seen"  # a duplicate: dropped
NEW = "new"  # recorded by the batch: admitted
AMBIGUOUS = "ambiguous"  # a retry after a failed call said "seen", maybe the failed
#                          call's own write: counts as new, admitted
UNCHECKED = "unchecked"  # Redis failed: let through unrecorded (DEDUP_ON_ERROR='allow')
DEFERRED = "deferred"  # the server refused its call, which wrote nothing: passed on
#                        unadmitted, so the scheduler checks it as without the batch
FAILED = "failed"  # Redis failed (DEDUP_ON_ERROR='raise'): dropped, and ``failure``
#                    raised once the others are passed on


@dataclass
class Batch:
    """Requests to check together: their fingerprints and expiries, and which of them
    the local cache knows are recorded (those are not sent)."""

    requests: Sequence[Request]
    fingerprints: list[str]
    expires: list[float | None]
    known: list[bool]


@dataclass
class BatchResult:
    """What one batch check-and-add found: an outcome per fingerprint; ``error``, the
    failure behind UNCHECKED ones; ``refused``, the refusal behind DEFERRED ones;
    ``failure``, what to raise for FAILED ones."""

    outcomes: list[str]
    retries: int = 0
    error: Exception | None = None
    refused: Exception | None = None
    failure: Exception | None = None
    read_only: int = 0  # SEEN by a read-only check after a write was refused (full memory)

    @property
    def seen(self) -> list[bool]:
        return [outcome == SEEN for outcome in self.outcomes]


class Admitted(dict[str, int]):
    """Fingerprints a batch checked and recorded as new, each with how many of its
    requests were let through: the dupefilter answers "new" that many times without a
    round trip, whatever object carries the fingerprint (a ``replace()`` copy made after
    the batch is admitted as its original was). A dict, so that the per-request path
    asks whether it is empty at no cost."""

    def admit(self, fp: str) -> None:
        self[fp] = self.get(fp, 0) + 1

    def claim(self, fp: str) -> bool:
        """Whether a batch admitted ``fp`` (once more): then the admission is used."""
        left = self.get(fp)
        if left is None:
            return False
        if left > 1:
            self[fp] = left - 1
        else:
            del self[fp]
        return True

    def take_unclaimed(self) -> int:
        """How many admissions were never claimed; forgets them."""
        count = sum(self.values())
        self.clear()
        return count


def check(
    backend: DedupBackend,
    policy: ErrorPolicy,
    fingerprints: Sequence[str],
    expires: Sequence[float | None] | None = None,
    patience: float = 0.0,
) -> BatchResult:
    """Check and record many fingerprints in one round trip per master.

    What a call could not answer: if the server refused the call, it wrote nothing,
    and its fingerprints are DEFERRED to the scheduler's per-request check; if the call
    failed on the way (it may have run), they are tried again for ``patience`` seconds
    (DEDUP_BATCH_OUTAGE_WAIT), and a "seen" then is not trusted (AMBIGUOUS); past that,
    DEDUP_ON_ERROR applies to them as the per-request path applies it to one request.
    Blocking and touching no stats: safe to run in a thread."""
    count = len(fingerprints)
    each = list(expires) if expires is not None else [None] * count
    result = BatchResult([NEW] * count)
    failed = policy.failed_while_closing
    if failed is not None and policy.closing():  # no call, no wait
        return _give_up(backend, policy, result, range(count), failed, fingerprints)
    try:
        if not backend.opened:  # after clear(), say: opened again under the policy
            backend.open()
        answers, failures = backend.try_check_and_add_many(fingerprints, each)
    except Exception as exc:  # whatever the client raised: the error policy decides
        answers, failures = [None] * count, [FailedCall(list(range(count)), as_failure(exc))]
    for i, seen in enumerate(answers):
        if seen:
            result.outcomes[i] = SEEN
    retry: list[int] = []
    error: Exception | None = None
    for call in failures:
        failure = as_failure(call.error)
        if is_transient(failure):
            retry += call.indices
            error = error or failure
            continue
        result.refused = translate(failure, backend, fingerprints[call.indices[0]])
        for i in call.indices:
            result.outcomes[i] = DEFERRED
    if error is None:
        return result
    retry.sort()
    again_fps = [fingerprints[i] for i in retry]
    again_expires = [each[i] for i in retry]
    try:
        again, result.retries, error = policy.retry(
            lambda: backend.check_and_add_many(again_fps, again_expires), error, patience
        )
    except Exception as exc:  # refused on a retry, after a call that may have run
        result.failure = translate(as_failure(exc), backend, again_fps[0])
        for i in retry:
            result.outcomes[i] = FAILED
        return result
    if again is not None:
        for i, seen in zip(retry, again):
            result.outcomes[i] = AMBIGUOUS if seen else NEW
        return result
    if policy.closing():
        policy.failed_while_closing = error
    return _give_up(backend, policy, result, retry, error, fingerprints)


def _give_up(
    backend: DedupBackend,
    policy: ErrorPolicy,
    result: BatchResult,
    indices: Iterable[int],
    error: Exception,
    fingerprints: Sequence[str],
) -> BatchResult:
    """Fingerprints Redis could not check: let through or failed (DEDUP_ON_ERROR)."""
    indices = list(indices)
    if policy.raises:
        result.failure = DedupBackendError(
            f"Redis failed while checking a batch of {len(indices)} request(s) against "
            f"the {backend.name} dupefilter at {backend.key!r}, also after "
            f"{policy.retries} retries: {failure_text(error)}"
        )
        result.failure.__cause__ = error
        outcome = FAILED
    else:
        result.error = error
        outcome = UNCHECKED
        if code_of(error) == "OOM":  # full memory refuses writes; reads still answer
            indices = _unseen(backend, result, indices, fingerprints)
    for i in indices:
        result.outcomes[i] = outcome
    return result


def _unseen(
    backend: DedupBackend, result: BatchResult, indices: list[int], fingerprints: Sequence[str]
) -> list[int]:
    """Of ``indices``, those a read-only check does not find (the others: SEEN)."""
    try:
        found = backend.contains_many([fingerprints[i] for i in indices])
    except Exception:  # (reads fail too: every one is let through once)
        return indices
    for i, seen in zip(indices, found):
        if seen:
            result.outcomes[i] = SEEN
            result.read_only += 1
    return [i for i, seen in zip(indices, found) if not seen]


class Batches:
    """A dupefilter's batch path: it owns what batches admitted (:attr:`admitted`)
    until the scheduler asks about those requests. ``BatchDedupMiddleware`` calls
    :meth:`prepare` on the reactor thread, :meth:`check` in a thread, and
    :meth:`account` on the reactor thread.

    It checks on the dupefilter's backend (``handle``) under its ``policy``, with its
    ``counts`` and ``recovery`` (what was let through unrecorded, the crawl to stop);
    prepares with its per-request ``step`` (fingerprint, local cache, expiry); looks
    at the server's evictions when ``eviction`` says (``watch_eviction``), and logs
    duplicates with ``log``."""

    def __init__(
        self,
        handle: BackendHandle,
        policy: ErrorPolicy,
        counts: DedupCounts,
        recovery: Recovery,
        step: RequestStep,
        *,
        eviction: EvictionWatch,
        watch_eviction: Callable[[], None],
        log: Callable[[Request, Spider], None],
    ) -> None:
        self.handle = handle
        self.policy = policy
        self.counts = counts
        self.recovery = recovery
        self.step = step
        self.eviction = eviction
        self.watch_eviction = watch_eviction
        self.log = log
        #: What batches recorded as new and let through: the dupefilter's
        #: request_seen answers "new" for them without a round trip.
        self.admitted = Admitted()

    def prepare(self, requests: Sequence[Request]) -> Batch:
        """Fingerprints and expiries of ``requests``, and which the local cache knows
        (on the reactor thread: the fingerprinter, the cache and the stats are not
        thread-safe)."""
        steps = [self.step.before(request) for request in requests]
        fps = [step.fingerprint for step in steps]
        expires = [step.expire for step in steps]
        return Batch(requests, fps, expires, [step.cached for step in steps])

    def check(self, batch: Batch, patience: float = 0.0) -> BatchResult:
        """:func:`check` for the fingerprints of ``batch`` the local cache does not know
        (those it knows answer "seen"). Blocking and touching no stats: safe in a
        thread."""
        if not any(batch.known):
            return self.check_fingerprints(batch.fingerprints, batch.expires, patience)
        todo = [i for i, known in enumerate(batch.known) if not known]
        if not todo:
            return BatchResult([SEEN] * len(batch.known))
        sent = self.check_fingerprints(
            [batch.fingerprints[i] for i in todo], [batch.expires[i] for i in todo], patience
        )
        outcomes = [SEEN] * len(batch.known)
        for j, i in enumerate(todo):
            outcomes[i] = sent.outcomes[j]
        sent.outcomes = outcomes
        return sent

    def check_fingerprints(
        self,
        fingerprints: Sequence[str],
        expires: Sequence[float | None] | None = None,
        patience: float = 0.0,
    ) -> BatchResult:
        """:func:`check` on the dupefilter's backend, under its error policy."""
        return check(self.handle.current, self.policy, fingerprints, expires, patience)

    def account(
        self, batch: Batch, result: BatchResult, spider: Spider | None = None
    ) -> list[Request]:
        """Count and log a batch's answers as request_seen would, admit its new
        requests (their request_seen answers False with no round trip), and return the
        requests to pass on: the new ones and the DEFERRED ones, which the scheduler
        checks one by one. Then raise ``result.failure``, if any, yourself (in a running
        crawl the crawl is stopped instead, and the failed requests passed on)."""
        if result.failure is not None and self.recovery.stop_crawl(result.failure):
            # DEDUP_ON_ERROR='raise' in a running crawl: stopped, and the requests Redis
            # could not check go to the scheduler's queue instead of being dropped.
            result.outcomes = [UNCHECKED if o == FAILED else o for o in result.outcomes]
            result.failure = None
        tally = Counter(result.outcomes)
        if self.eviction.due(len(batch.requests)):
            self.watch_eviction()
        self._count_stats(batch, result, tally)
        self._warn(result, tally)
        unrecorded = self.recovery.unrecorded
        passed, duplicates, cached = self._sort_out(batch, result, unrecorded)
        if unrecorded.let_through_again:
            self.counts.count("dedup/unrecorded_filtered", unrecorded.let_through_again)
        unrecorded.let_through_again = 0
        if spider is not None:
            for request in duplicates:
                self.log(request, spider)
        self.counts.filtered(len(duplicates) - cached, cached)
        return passed

    def report_unclaimed(self) -> int:
        """Say (once) how many requests a batch recorded as new that never reached the
        scheduler: their pages are recorded but were not queued. Returns that number."""
        count = self.admitted.take_unclaimed()
        if count:
            self.counts.count("dedup/batch_unclaimed", count)
            logger.warning(
                "%d request(s) that BatchDedupMiddleware recorded as new never reached the "
                "scheduler (a component after it dropped them): their pages are recorded as "
                "seen without having been queued",
                count,
            )
        return count

    def _count_stats(self, batch: Batch, result: BatchResult, tally: Counter[str]) -> None:
        """A batch's stats, as the per-request path counts them (``dedup/filtered``
        apart); ``tally``: how many of each outcome (``Counter(result.outcomes)``)."""
        count = self.counts.count
        count("dedup/batches")
        count("dedup/batched", len(batch.requests))
        for name, value in (
            ("dedup/retries", result.retries),
            ("dedup/read_only_filtered", result.read_only),
            ("dedup/added", tally.get(NEW, 0)),
            ("dedup/ambiguous", tally.get(AMBIGUOUS, 0)),
            ("dedup/batch_deferred", tally.get(DEFERRED, 0)),
        ):
            if value:
                count(name, value)
        self.counts.errors(
            tally.get(UNCHECKED, 0) + tally.get(FAILED, 0), result.error or result.failure
        )

    @staticmethod
    def _warn(result: BatchResult, tally: Counter[str]) -> None:
        """Say what a batch let through unchecked, or left to the scheduler's own check."""
        unchecked = tally[UNCHECKED]
        if unchecked and result.error is not None:  # (an unchecked request has its failure)
            logger.warning(
                "Redis failed while checking a batch of %(count)d request(s) (%(error)s); "
                "letting them through (DEDUP_ON_ERROR='allow'), they may be crawled twice",
                {"count": unchecked, "error": failure_text(result.error)},
            )
        deferred = tally[DEFERRED]
        if deferred:
            logger.warning(
                "Redis refused a batch call for %(count)d request(s) (%(error)s); it wrote "
                "nothing, and the scheduler checks each of them as without the batch",
                {"count": deferred, "error": result.refused},
            )

    def _sort_out(
        self, batch: Batch, result: BatchResult, unrecorded: Unrecorded
    ) -> tuple[list[Request], list[Request], int]:
        """Admit a batch's new requests and learn what it found: returns the requests to
        pass on (the new ones, and the DEFERRED ones that the scheduler checks one by
        one), the duplicates, and how many of those the local cache answered. An
        UNCHECKED request this process let through unrecorded before is a duplicate; one
        it let through and Redis now says is new was crawled already (``unrecorded``)."""
        learn = self.step.learned
        admitted = self.admitted
        passed: list[Any] = []
        duplicates: list[Any] = []
        cached = 0
        for request, fp, outcome, was_known in zip(
            batch.requests, batch.fingerprints, result.outcomes, batch.known
        ):
            if unrecorded.held:  # (empty unless Redis failed: then each page passes once)
                if outcome == UNCHECKED:
                    if fp in unrecorded:
                        outcome = SEEN
                        unrecorded.let_through_again += 1
                    unrecorded.add(fp)
                elif outcome == NEW and unrecorded.discard(fp):
                    outcome = SEEN
            elif outcome == UNCHECKED:
                unrecorded.add(fp)
            if outcome == SEEN:
                cached += was_known
                learn(fp)
                duplicates.append(request)
                continue
            if outcome == FAILED:
                continue
            if outcome != DEFERRED:
                if outcome != UNCHECKED:
                    learn(fp)
                admitted.admit(fp)
            passed.append(request)
        return passed, duplicates, cached
