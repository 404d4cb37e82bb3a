"""What a failed Redis call means, decided in one place by its error code.

A server's error reply starts with a code (``OOM``, ``BUSY``, ``WRONGTYPE``, ``ERR``);
redis-py turns the codes it knows into exception classes. The package's own scripts
fail with ``ERR dedup:<CODE> <message>`` (``lua/prelude.lua``, ``dedup_fail``).
:func:`code_of` reads the code of any failure, :func:`is_transient` says whether
DEDUP_ON_ERROR applies to it, :func:`translate` gives the package's exception, and
:class:`ErrorPolicy` retries. Nothing here, or anywhere in the package, decides by
the words of a message.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..exceptions import (
    ClientFailure,
    DedupBackendError,
    DedupConfigError,
    DedupError,
    InvalidFingerprintError,
    WrongKeyTypeError,
)
from . import scripts
from .privileges import permission_error


class Translated(Protocol):
    """What :func:`translate` reads of the backend whose call failed."""

    @property
    def name(self) -> str: ...

    @property
    def server(self) -> Any: ...

    def check_types(self, expected: Mapping[str, str], hint: str = "") -> dict[str, str]: ...

    def expected_types(self) -> dict[str, str]: ...

    def fingerprint_types(self, fingerprint: str) -> dict[str, str]: ...


T = TypeVar("T")

#: Redis failures that follow DEDUP_ON_ERROR (connection lost, timeout, server
#: loading or failing over, a cluster down, resharding or unreachable, full memory);
#: anything else is a misconfigured or damaged filter and is raised.
TRANSIENT = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterError,  # CLUSTERDOWN, MASTERDOWN, redirections exhausted
    TryAgainError,
    SlotNotCoveredError,
    RedisClusterException,  # no node of the cluster reachable
    BusyLoadingError,  # LOADING
    OutOfMemoryError,  # OOM: full memory under noeviction
    NoScriptError,  # still after the reload: a master the client had not discovered
)

#: Failures after which a cluster client's map of slots may be out of date (a slot
#: moved, a node added or gone): the map is read again before the call is retried.
RESHARDING = (
    ClusterError,
    TryAgainError,
    AskError,
    SlotNotCoveredError,
    NoScriptError,
    ClientFailure,
)

#: Error codes redis-py has no class for that mean "not now" rather than "wrong": a
#: long script running, too few replicas acknowledged.
TRANSIENT_CODES = frozenset({"BUSY", "NOREPLICAS"})

#: What a failed dedup call raises (RedisClusterException is not a RedisError).
FAILURES = (RedisError, RedisClusterException, DedupBackendError)

#: The codes the package's scripts fail with (see ``lua/prelude.lua``).
SCRIPT_CODES = frozenset(
    {"FINGERPRINT", "WRONGTYPE", "STAMP", "BITMAP", "LAYERS", "SPLITS", "FIELD", "FULL", "REFUSED"}
)

#: The codes behind redis-py's classes, for a redis-py that does not keep them
#: (``status_code`` is redis-py >= 6).
_CLASS_CODES: tuple[tuple[type[Exception], str], ...] = (
    (OutOfMemoryError, "OOM"),
    (BusyLoadingError, "LOADING"),
    (ReadOnlyError, "READONLY"),
    (TryAgainError, "TRYAGAIN"),
    (AskError, "ASK"),
)

#: What a server appends to the error of a script: its SHA and line.
_SCRIPT_PLACE = re.compile(r"\s*script: [0-9a-f]{40}, on @user_script:\d+\.?\s*$")
#: What Redis 6.2 puts before a string a script raised (lua/prelude.lua, dedup_fail).
_SCRIPT_RAISED = re.compile(r"^Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: ")


@dataclass(frozen=True)
class ScriptFailure:
    """A script of this package refused its call (``dedup_fail``): before writing."""

    code: str
    message: str


def script_failure(exc: BaseException) -> ScriptFailure | None:
    """The code and message of ``exc`` if a script of this package failed with it."""
    if not isinstance(exc, ResponseError):
        return None
    text = _SCRIPT_RAISED.sub("", str(exc))  # (Redis 6.2's place before the text)
    if text.startswith("ERR "):  # a client that keeps the code in the message
        text = text[4:]
    if not text.startswith("dedup:"):
        return None
    code, _, message = text[len("dedup:") :].partition(" ")
    if code not in SCRIPT_CODES:
        return None
    return ScriptFailure(code, _SCRIPT_PLACE.sub("", message))


def code_of(exc: BaseException) -> str:
    """The error code of a failed call: the server's (``OOM``, ``BUSY``, ``WRONGTYPE``,
    ``ERR``...), ``dedup:<CODE>`` for the package's scripts, "" when the server did
    not answer with an error (a broken connection, say)."""
    failure = script_failure(exc)
    if failure is not None:
        return f"dedup:{failure.code}"
    if not isinstance(exc, ResponseError):
        return ""
    status = getattr(exc, "status_code", None)
    if status:
        return str(status)
    for cls, code in _CLASS_CODES:
        if isinstance(exc, cls):
            return code
    # A code redis-py has no entry for stays at the head of the message.
    first = str(exc).partition(" ")[0]
    return first if first.isalpha() and first.isupper() else "ERR"


def error_kind(exc: BaseException | None) -> str:
    """A failed call's kind, as the stats and metrics count it: its error code
    (:func:`code_of`: ``OOM``, ``dedup:WRONGTYPE``...), else the exception's class
    (``ConnectionError``, ``TimeoutError``...)."""
    if exc is None:
        return "unknown"
    return re.sub(r"[^A-Za-z0-9:_]", "_", code_of(exc) or type(exc).__name__)[:60]


def is_transient(exc: BaseException) -> bool:
    """Whether a failed call follows DEDUP_ON_ERROR: the server could not be reached
    or refused for now (full memory, busy script, cluster down, read only, too few
    replicas), or the client library failed on the way (:class:`ClientFailure`), as
    opposed to a filter that is misconfigured or damaged."""
    return isinstance(exc, (*TRANSIENT, ClientFailure)) or code_of(exc) in TRANSIENT_CODES


def as_failure(exc: Exception) -> Exception:
    """What a call raised, as a failure the error policy handles: a Redis error or an
    error of this package as it is; anything else the client library raised (an
    AttributeError from inside redis-py, say) as a :class:`ClientFailure`. Nothing a
    call raises escapes into Scrapy unhandled."""
    if isinstance(exc, (*FAILURES, DedupError)):
        return exc
    return ClientFailure(exc)


def cluster_node_error(exc: Exception) -> DedupConfigError:
    """The error for a plain client that was redirected (MOVED/ASK) by a cluster node."""
    return DedupConfigError(
        f"Redis answered {str(exc).splitlines()[0]!r}: REDIS_URL points at a node of a Redis "
        "Cluster. Set DEDUP_REDIS_CLUSTER = True so that the dupefilter uses a cluster client."
    )


#: The codes of a call refused because a key holds another type (the server's, a script's).
WRONG_TYPE = ("WRONGTYPE", "dedup:WRONGTYPE")


def coded(exc: BaseException) -> tuple[str, ScriptFailure | None]:
    """``exc``'s code (as :func:`code_of`) and, for a script of this package, its
    failure: the message read once."""
    failure = script_failure(exc)
    return (f"dedup:{failure.code}" if failure is not None else code_of(exc)), failure


def translate(exc: Exception, backend: Translated, fingerprint: str) -> DedupError:
    """The package's exception for a call of ``backend`` that failed for good (not
    transient) while checking ``fingerprint``."""
    if isinstance(exc, DedupError):
        return exc
    if isinstance(exc, AskError):
        return cluster_node_error(exc)
    code, failure = coded(exc)
    if code in WRONG_TYPE:
        # Find out which key, and report it exactly.
        try:
            backend.check_types(
                {**backend.expected_types(), **backend.fingerprint_types(fingerprint)}
            )
        except WrongKeyTypeError as precise:
            return precise
    if code == "dedup:FINGERPRINT":
        return InvalidFingerprintError(
            f"fingerprint {fingerprint!r} is not a hex digest of at least 16 bytes, which the "
            f"{backend.name} backend needs"
        )
    refused = permission_error(exc, backend.server)
    if refused is not None:  # the ACL: the same for every call, as a setting would be
        return refused
    said = failure.message if failure is not None else scripts.explain(str(exc))
    return DedupBackendError(f"Redis refused a {backend.name} dupefilter call: {said}")


def _never() -> bool:
    return False


def _nothing(error: Exception) -> None:
    return None


#: Immediate retries, whatever DEDUP_ON_ERROR says, of a call that failed while the
#: cluster was resharding (after the slot map is read again): the call is answered
#: by the slot's new owner instead of being let through unchecked.
RESHARDING_RETRIES = 2


class ErrorPolicy:
    """DEDUP_ON_ERROR and DEDUP_ERROR_RETRIES, and whether the crawl is closing (then a
    call that waits out an outage stops waiting)."""

    def __init__(self, on_error: str, retries: int) -> None:
        self.on_error = on_error
        self.retries = retries
        #: Called before a retry after a failure of :data:`RESHARDING` (the dupefilter
        #: reads the cluster's slot map again there).
        self.before_retry: Callable[[Exception], None] = _nothing
        #: Whether the crawl is closing (BatchDedupMiddleware sets it).
        self.closing: Callable[[], bool] = _never
        #: The failure of a batch that gave up while closing: the next give up at once.
        self.failed_while_closing: Exception | None = None

    @property
    def raises(self) -> bool:
        return self.on_error == "raise"

    def retry(
        self, attempt: Callable[[], T], error: Exception, patience: float = 0.0
    ) -> tuple[T | None, int, Exception]:
        """After ``error``, a transient failure: with DEDUP_ON_ERROR='raise', call
        ``attempt`` again at once (the reactor must not sleep), up to
        DEDUP_ERROR_RETRIES times (after a failure of resharding, at least
        RESHARDING_RETRIES times whatever the policy, the slot map read again before
        each); then, for ``patience`` seconds (a batch in its own thread only), again
        after growing pauses. Returns its answer (None if every
        retry failed, or none was made), the retries made and the last error. A
        failure that is not transient is raised as it came. Touches no stats (the
        batch path runs it in a thread)."""
        at_once = self.retries if self.raises else 0
        if isinstance(error, RESHARDING):
            at_once = max(at_once, RESHARDING_RETRIES)
        deadline = time.monotonic() + patience
        pause = 0.05
        retries = 0
        while True:
            if retries >= at_once:
                left = deadline - time.monotonic()
                if left <= 0 or self.closing():  # closing: a pause (1 s at most) ends it
                    return None, retries, error
                time.sleep(min(pause, left))
                pause = min(2 * pause, 1.0)
            retries += 1
            if isinstance(error, RESHARDING):
                self.before_retry(error)
            try:
                return attempt(), retries, error
            except Exception as exc:
                failure = as_failure(exc)
                if not is_transient(failure):
                    raise  # (a ClientFailure is transient: this is what was raised)
                error = failure
