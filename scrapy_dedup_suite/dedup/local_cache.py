"""DEDUP_LOCAL_CACHE: fingerprints this process knows are recorded, answered "seen"
without a round trip."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backends.base import DedupBackend

logger = logging.getLogger(__name__)


class KnownFingerprints:
    """A bounded set of fingerprints this process knows are recorded (least recently
    used dropped first), for backends whose answer never turns from seen back to new
    (``capabilities.stable_answers``). Used on the reactor thread only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._fps: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, fp: object) -> bool:
        if fp in self._fps:
            self._fps.move_to_end(fp)  # type: ignore[arg-type]
            return True
        return False

    def __len__(self) -> int:
        return len(self._fps)

    def add(self, fp: str) -> None:
        self._fps[fp] = None
        self._fps.move_to_end(fp)
        if len(self._fps) > self.size:
            self._fps.popitem(last=False)

    def clear(self) -> None:
        self._fps.clear()

    def discard(self, fp: str) -> bool:
        """Forget ``fp``; whether it was remembered."""
        if fp in self._fps:
            del self._fps[fp]
            return True
        return False


#: The most fingerprints :class:`Unrecorded` remembers (about 150 bytes each).
UNRECORDED_LIMIT = 100_000


class Unrecorded(KnownFingerprints):
    """Fingerprints this process let through while Redis could not record them (a
    failure under DEDUP_ON_ERROR='allow', full memory, a damaged key): a later request
    for one is answered "seen" without Redis, and when Redis records it again, so each
    such page is crawled at most once more by this process, not at every link to it,
    however long Redis fails. Bounded (least recently seen dropped first)."""

    def __init__(self, size: int = UNRECORDED_LIMIT) -> None:
        super().__init__(size)
        #: The fingerprints (a dict: whether it is empty costs no Python call, which
        #: the per-request path asks each time).
        self.held = self._fps
        #: Requests of a batch answered "seen" here (the dupefilter counts them).
        self.let_through_again = 0


def local_cache_for(backend: DedupBackend, size: int) -> KnownFingerprints | None:
    """DEDUP_LOCAL_CACHE for ``backend``: a cache of ``size`` fingerprints, or None
    (0, or a backend whose answers expire: said in one WARNING)."""
    if size and backend.capabilities.stable_answers:
        return KnownFingerprints(size)
    if size:
        logger.warning(
            "DEDUP_LOCAL_CACHE is ignored for the %s backend: its answers turn from seen "
            "back to new when fingerprints expire, which a local cache cannot know",
            backend.name,
        )
    return None
