"""The per-request step around the call to Redis, written once (:class:`RequestStep`).

Before the call: the request's fingerprint, then the local cache (a fingerprint this
process saw answers "seen" with no round trip), then its expiry (the backends that keep
one). After it: what the local cache learns. The dupefilter's ``request_seen``, its
batch path and the frontier's record-and-enqueue all take these steps through one
object; each counts its answers itself (one request at a time, or once per batch).

The steps are the cache's and the expiry's own bound methods, chosen once, so the hot
path pays no call more than it did with them written out in place
(``python -m bench.request_seen --calls``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from scrapy import Request

    from .local_cache import KnownFingerprints
    from .request_expiry import RequestExpiry


class Before(NamedTuple):
    """What the step found before the call: the fingerprint, whether the local cache
    knows it (then no call is made), and its expiry (None: none, or not needed)."""

    fingerprint: str
    cached: bool
    expire: float | None


class RequestStep:
    """Fingerprints with ``fingerprint_of``, asks and teaches the local cache
    (``known``: None when DEDUP_LOCAL_CACHE is 0), and reads the expiry from
    ``expiry`` (None for a backend that keeps none)."""

    def __init__(
        self,
        fingerprint_of: Callable[[Request], str],
        known: KnownFingerprints | None,
        expiry: RequestExpiry | None,
    ) -> None:
        self.fingerprint_of = fingerprint_of
        # Each step below is None when there is nothing to do (no local cache, a backend
        # that keeps no expiry): the caller skips it without a call.
        #: Whether the local cache knows a fingerprint (seen: no call needed).
        self.cached: Callable[[str], bool] | None = None
        #: Redis answered for a fingerprint (seen, or new and now recorded): cache it.
        self.learn: Callable[[str], None] | None = None
        if known is not None:  # (not "if known": an empty cache is falsy)
            self.cached, self.learn = known.__contains__, known.add
        #: The request's expiry (``meta['dedup_expire']``; a bad one is counted).
        self.expire: Callable[[Request], float | None] | None = (
            expiry.of if expiry is not None else None
        )

    def before(self, request: Request) -> Before:
        """The three steps before the call (the expiry only for a call to make)."""
        fp = self.fingerprint_of(request)
        if self.cached is not None and self.cached(fp):
            return Before(fp, True, None)
        return Before(fp, False, self.expire(request) if self.expire is not None else None)

    def learned(self, fingerprint: str) -> None:
        """:attr:`learn`, for a caller off the hot path."""
        if self.learn is not None:
            self.learn(fingerprint)
