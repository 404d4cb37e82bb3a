"""Removing fingerprints from an exact filter (the ``forget`` capability).

A fingerprint of ``set`` is a member of its set, one of ``compact`` and ``hash`` a field
of a hash (a bucket's, or a shard's): removed by SREM or HDEL, one command per key for
up to :data:`~.keys.BATCH` of them, pipelined (on a cluster, each to its key's master).
Removing is idempotent, so a command the client sends again after a redirection or a
broken connection does no harm. A Bloom filter's bits are shared by other members: it
cannot remove one (:func:`cannot_forget` says what to do instead).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .keys import chunks

if TYPE_CHECKING:
    from .base import DedupBackend

#: Keys per pipeline: a forget of millions of fingerprints sends them in rounds.
KEYS_PER_ROUND = 1000


def remove(server: Any, command: str, members: Iterable[tuple[str, Any]]) -> int:
    """``command`` (SREM, HDEL) for each ``(key, member)``, grouped by key: how many of
    them were there."""
    by_key: dict[str, list[Any]] = {}
    for key, member in members:
        by_key.setdefault(key, []).append(member)
    removed = 0
    for keys in chunks(by_key, KEYS_PER_ROUND):
        pipe = server.pipeline(transaction=False)
        for key in keys:
            for part in chunks(by_key[key]):
                pipe.execute_command(command, key, *part)
        removed += sum(int(n) for n in pipe.execute())
    return removed


def cannot_forget(backend: DedupBackend) -> str:
    """Why ``backend`` cannot forget a fingerprint, and what to do instead: one line."""
    caps = backend.capabilities
    if caps.expiring_keys and caps.probabilistic:
        return (
            f"The {backend.name} filter at {backend.key!r} cannot remove a fingerprint (a "
            "Bloom filter's bits are shared by other pages); a page comes back by itself when "
            "the time bucket that holds it leaves the window (DEDUP_WINDOW_COUNT buckets of "
            "DEDUP_WINDOW), or crawl it now with dont_filter=True"
        )
    return (
        f"The {backend.name} filter at {backend.key!r} cannot remove a fingerprint (a Bloom "
        "filter's bits are shared by other pages); crawl the page with dont_filter=True, or "
        "keep fingerprints in an exact backend (DEDUP_BACKEND = 'compact', 'set' or 'hash')"
    )
