"""Where a backend's fingerprints live, and how one call of its add script is built.

A layout is one object a backend holds (``backend.layout``). It owns the keys a
fingerprint's check-and-add touches, in groups (a block, a shard, a bucket: every key
of a group in one cluster slot, its stamp first), and what the backend's scripts take
and answer. :mod:`.calls` asks it, for one add call: :meth:`Layout.context` once,
:meth:`Layout.header`, per fingerprint :meth:`Layout.place` (its group and its
arguments), per group :meth:`Layout.keys`, then :meth:`Layout.pack` for the call's keys
and arguments; per answer :meth:`Layout.again`, then
:meth:`Layout.learn` before calling again; after an add answered < 0,
:meth:`Layout.grown`.

The add script's KEYS are the groups' keys, in the order the call numbers the groups;
its ARGV the header, then per fingerprint its group's number in the call (from 1) and
its arguments (:meth:`Layout.pack`'s, which a layout may pack otherwise). It answers
one integer per fingerprint: > 0 "seen", 0 "new", < 0 "new" with news for
:meth:`Layout.grown`, or what :meth:`Layout.again` recognises (nothing was written for
it).

:class:`Blocks` is the layout of the Bloom filters, split into blocks with a stamp
each; :class:`Buckets` the layout of ``compact`` and ``hash``: small hashes a
fingerprint's digest chooses; the shards of ``hash`` layout 1 are :class:`~.hash.Shards`.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.windows import LiveBuckets
from ..exceptions import FilterMismatchError
from ..server.scripts import LuaScript
from .keys import META, bucket_prefix, shard_key, slot_sibling

#: Bytes of a fingerprint's SHA1 that choose its bucket, and bytes kept as its field
#: (:class:`Buckets`).
BUCKET_BYTES, FIELD_BYTES = 4, 8


class Layout(ABC):
    """Where fingerprints live and what one call of the add script is."""

    @property
    @abstractmethod
    def add_script(self) -> LuaScript:
        """The check-and-add, of one fingerprint or many (see the module's docstring);
        a class attribute in most layouts."""

    @property
    def contains_script(self) -> LuaScript | None:
        """Whether one fingerprint is recorded (:meth:`contains_call`): > 0 "present";
        None where the backend answers ``contains`` itself."""
        return None

    @property
    def retries(self) -> int:
        """How many times a call may be made again (a scalable filter asking for layers)."""
        return 0

    def context(self, server: Any) -> Any:
        """What every group of one call shares (the time, say), made once a call."""
        return None

    def header(self, context: Any, stamp: str) -> list[Any]:
        """The arguments before the fingerprints (``stamp``: what each group's stamp
        must say, the backend's parameter record in one string)."""
        return [stamp]

    @abstractmethod
    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        """The group whose keys ``fingerprint``'s check-and-add touches, and its
        arguments (``expire``: its expiry in seconds, None for the filter's own)."""

    @abstractmethod
    def keys(self, group: int, context: Any) -> list[str]:
        """The keys of one group, all in one cluster slot, its stamp first."""

    @abstractmethod
    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        """Keys and arguments of :attr:`contains_script` for one fingerprint."""

    def pack(
        self,
        groups: Sequence[int],
        keys: Mapping[int, list[str]],
        placed: Sequence[tuple[int, list[Any]]],
        header: list[Any],
    ) -> tuple[list[str], list[Any]]:
        """One add call's KEYS and ARGV, for the ``groups`` it touches (their ``keys``)
        and its fingerprints (each ``placed``: its group and arguments, in the order of
        the answers): each group's keys in turn; the header, then per fingerprint its
        group's number in the call (from 1) and its arguments."""
        number = {group: n for n, group in enumerate(groups, 1)}
        args = list(header)
        for group, more in placed:
            args += [number[group], *more]
        return [key for group in groups for key in keys[group]], args

    def again(self, answer: Any) -> bool:
        """Whether an answer asks for the call to be made again (nothing was written)."""
        return False

    def learn(self, answers: Sequence[Any], fingerprints: Sequence[str]) -> None:  # noqa: B027
        """Act on the answers :meth:`again` recognised (of ``fingerprints``), before
        calling again (an optional hook)."""

    def grown(self, answer: int, fingerprint: str) -> None:  # noqa: B027 - optional hook
        """``fingerprint`` was added and its answer was < 0 (a scalable filter grew, a
        growing layout's bucket split)."""

    def again_error(self, name: str, key: str) -> Exception:
        """What a call that asked for more than :attr:`retries` times raises."""
        return FilterMismatchError(
            f"The {name} filter at {key!r} asked for its call to be made again more than "
            f"{self.retries} times; use the settings it was created with."
        )


class Blocks(Layout, ABC):
    """A filter split into blocks, each in its own slot with its stamp; per block the
    filters a call checks, the one that receives new fingerprints first: one filter per
    block, or (``live``) a windowed filter's live time buckets of the block. A group is
    a block."""

    def __init__(self, stamp_keys: list[str], filters: list[list[str]]) -> None:
        self.stamp_keys = stamp_keys
        self._filters = filters
        #: A windowed filter's live buckets (set by it): the filters by the time.
        self.live: LiveBuckets | None = None

    @abstractmethod
    def block(self, fingerprint: str) -> int:
        """The block that holds ``fingerprint``."""

    def context(self, server: Any) -> Any:
        return None if self.live is None else self.live.context(server)

    def filters(self, context: Any) -> list[list[str]]:
        """Per block, the keys of the filters a call checks, the receiving one first."""
        return self._filters if context is None else context[1].keys

    def ttl_ms(self, context: Any) -> int:
        """The expiry (ms) the keys an add creates must carry; 0 for none."""
        return 0 if context is None else LiveBuckets.ttl_ms(context)

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        return self.block(fingerprint), [fingerprint]


class Buckets(Layout, ABC):
    """Where compact's and hash's fingerprints live: a fingerprint's SHA1 chooses its
    bucket (BUCKET_BYTES) and its field there (the next FIELD_BYTES); bucket ``b`` is in
    group ``b % shards``, whose stamp is in the group's slot. A call's group is a bucket."""

    def __init__(self, key: str, shards: int, count: Callable[[], int]) -> None:
        """``count``: finds how many buckets, when first needed (the backend's)."""
        groups = [shard_key(key, g) for g in range(shards)]
        self.shards = shards
        #: Each group's stamp, and the prefix of its buckets' keys, in the group's slot.
        self.stamp_keys = [slot_sibling(group, META) for group in groups]
        self.prefixes = [bucket_prefix(group) for group in groups]
        #: How many buckets: the stored filter's, or what the settings and the server
        #: give a new one; found by ``count`` at the first use, again at each open.
        self.buckets = 0
        self._count = count

    def locate(self, fingerprint: str) -> tuple[int, bytes]:
        """The bucket that holds ``fingerprint`` and its field there."""
        digest = hashlib.sha1(fingerprint.encode("utf-8")).digest()
        bucket = int.from_bytes(digest[:BUCKET_BYTES], "big") % (self.buckets or self._count())
        return bucket, digest[BUCKET_BYTES : BUCKET_BYTES + FIELD_BYTES]

    def bucket_key(self, bucket: int) -> str:
        return f"{self.prefixes[bucket % self.shards]}{bucket}"

    def place(self, fingerprint: str, expire: float | None) -> tuple[int, list[Any]]:
        bucket, field = self.locate(fingerprint)
        return bucket, [field]

    def keys(self, group: int, context: Any) -> list[str]:
        return [self.stamp_keys[group % self.shards], self.bucket_key(group)]

    def contains_call(self, fingerprint: str, context: Any) -> tuple[list[str], list[Any]]:
        bucket, field = self.locate(fingerprint)
        return [self.bucket_key(bucket)], [field]
