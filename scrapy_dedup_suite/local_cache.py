"""DEDUP_LOCAL_CACHE: fingerprints this process knows are recorded, answered "seen"
without a round trip."""

from __future__ import annotations

from collections import OrderedDict


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
