"""What both conversions of a filter into another layout at the same key share
(``scrapy convert-hash-layout``: hash_layout.py; ``scrapy convert-to-growing``:
growing_layout.py): their options, the state kept in ``K:migration`` (what a rerun goes
on with), the switch of the stamps and the record, and the order of a run: check, keep
the state, switch, copy, verify, forget the state, then (if asked) delete the source."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

from redis.exceptions import ResponseError

from ...backends.keys import meta_key, migration_state_key, read_hash
from ...exceptions import DedupError
from ...server import scripts
from ...server.failures import script_failure
from .errors import MigrationError, TargetError

logger = logging.getLogger(__name__)


class Stamped(Protocol):
    """What a switch reads of the two layouts (both backends)."""

    stamp_keys: list[str]

    def meta_spec(self) -> Any: ...

    def verify(self) -> bool: ...


class Timed(Protocol):
    """What a run fills in of its report."""

    seconds: float


class InPlaceConversion(ABC):
    """Convert the ``backend`` filter at ``key`` into another of its layouts (see the
    module)."""

    #: What ``K:migration`` says while a conversion is under way: the command's name.
    mode: ClassVar[str]
    #: The backend whose layouts it converts between.
    backend: ClassVar[str]

    def __init__(
        self,
        server: Any,
        key: str,
        *,
        batch: int = 1000,
        verify: str = "sample",
        sample: int = 10_000,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        if verify not in ("sample", "all"):
            raise MigrationError(f"verify must be 'sample' or 'all', got {verify!r}")
        self.server = server
        self.key = key
        self.batch = batch
        self.verify_mode = verify
        self.sample = sample
        self.progress = progress
        self.state_key = migration_state_key(key)
        #: Whether plan() found a conversion under way (its parameters in K:migration).
        self._under_way = False

    # -- checks ----------------------------------------------------------------------------

    def read_state(self) -> dict[str, str]:
        """``K:migration``; notes whether it holds a conversion of this kind under way."""
        state = read_hash(self.server, self.state_key)
        self._under_way = state.get("mode") == self.mode
        return state

    def same_settings(self, started: Mapping[str, tuple[int, int]]) -> None:
        """A conversion under way goes on with the settings it was started with (the
        crawl that follows uses the settings): ``started``, per setting, (then, now)."""
        for name, (was, now) in started.items():
            if was != now:
                raise TargetError(
                    f"The conversion of {self.key!r} under way was started with {name} = "
                    f"{was}, and the settings say {now}; the crawl must use the filter's. "
                    f"Set {name} = {was} (in the project's settings) and run it again."
                )

    def check_opens(self, backend: Stamped) -> None:
        """``backend`` opens the stored filter with these settings (else refused)."""
        try:
            backend.verify()
        except DedupError as exc:
            raise TargetError(f"The filter at {self.key!r} refuses these settings: {exc}") from exc

    def no_source(self) -> str:
        """Why there is nothing to convert at the key: another backend's filter, or none."""
        record = read_hash(self.server, meta_key(self.key))
        if record.get("backend") not in (None, self.backend):
            return (
                f"{self.key!r} holds a {record['backend']} filter, not a {self.backend} "
                f"filter; nothing was written. Give the key of a {self.backend} filter (--key, "
                f"or --spider with DEDUP_BACKEND = '{self.backend}')."
            )
        return (
            f"No {self.backend} filter at {self.key!r}; nothing was written. Give the key a "
            f"crawl with DEDUP_BACKEND = '{self.backend}' wrote (--key KEY, or --spider NAME)."
        )

    # -- the run -------------------------------------------------------------------------

    def run(self, *, delete_source: bool = False) -> Any:
        """Check (:meth:`plan`); unless there is nothing to convert, keep the state of a
        conversion started (:meth:`state`), :meth:`convert` (switch, copy, verify),
        forget the state, and with ``delete_source`` :meth:`delete_copied`. Returns the
        report."""
        started = time.monotonic()
        plan = self.plan()
        report = self.report(plan)
        if plan.state == "done":
            self.server.unlink(self.state_key)
            return report
        if plan.state == "start":  # (switched already: the record says the target)
            self.server.hset(self.state_key, mapping={"mode": self.mode, **self.state(plan)})
        try:
            self.convert(plan, report)
        except ResponseError as exc:
            failure = script_failure(exc)
            if failure is None:
                raise
            raise TargetError(
                f"The {self.backend} filter at {self.key!r} refused the copy "
                f"(dedup:{failure.code}): {failure.message}. The conversion stopped there; "
                "run it again once that is done, it goes on where it stopped."
            ) from exc
        self.server.unlink(self.state_key)
        if delete_source:
            self.delete_copied(report)
        report.seconds = time.monotonic() - started
        return report

    @abstractmethod
    def plan(self) -> Any:
        """Check everything and say what a run would do (its ``state``: "start",
        "resume" or "done"); writes nothing."""

    @abstractmethod
    def report(self, plan: Any) -> Timed:
        """An empty report of a run of ``plan``."""

    @abstractmethod
    def state(self, plan: Any) -> dict[str, Any]:
        """What ``K:migration`` keeps of a conversion started: its target's parameters
        and where the copy is."""

    @abstractmethod
    def convert(self, plan: Any, report: Any) -> None:
        """Switch, copy and verify (:class:`VerificationError` when it fails)."""

    @abstractmethod
    def delete_copied(self, report: Any) -> None:
        """Delete from the source what the target holds."""

    def switch(self, source: Stamped, target: Stamped, field: str, was: str, now: str) -> None:
        """Every stamp, then the record, say the target's layout (both idempotent):
        ``field`` of the record tells the layouts apart, ``was`` in the source's, ``now``
        in the target's. From then on a worker on the source's layout is refused."""
        assert source.stamp_keys == target.stamp_keys  # same keys, same slots
        old, new = source.meta_spec(), target.meta_spec()
        switched = sum(
            int(scripts.STAMP_SWITCH(self.server, [key], [old.stamp, new.stamp]))
            for key in target.stamp_keys
        )
        replaced = scripts.RECORD_SWITCH(
            self.server, [new.key], [self.backend, field, was, now, *new.flat_fields]
        )
        if switched or replaced:
            logger.info(
                "%s: %r now opens in its new layout (%d stamp(s) and %s record rewritten)",
                self.mode,
                self.key,
                switched,
                "the" if replaced else "no",
            )
