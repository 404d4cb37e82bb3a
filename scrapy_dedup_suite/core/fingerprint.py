"""Request fingerprints.

The default is scrapy-redis's own (``RFPDupeFilter.request_fingerprint``,
scrapy-redis 0.9.1): the SHA1 hex digest of a JSON document of method,
canonical URL and body. It ignores headers, unlike Scrapy's fingerprinter, and
an existing scrapy-redis fingerprint set holds exactly these strings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from w3lib.url import canonicalize_url

from ..exceptions import InvalidFingerprintError
from .bloom_math import MIN_FINGERPRINT_HEX
from .config import check_choice

FINGERPRINTERS = ("scrapy-redis", "scrapy")


def scrapy_redis_fingerprint(request: Request) -> str:
    """Exactly ``scrapy_redis.dupefilter.RFPDupeFilter.request_fingerprint``."""
    method = request.method
    if isinstance(method, bytes):
        method = method.decode("utf-8")
    data = {
        "method": method,
        "url": canonicalize_url(request.url),
        "body": (request.body or b"").hex(),
    }
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()


def scrapy_fingerprinter(crawler: Any, uniform: bool = False) -> Callable[[Request], str]:
    """``crawler.request_fingerprinter`` (REQUEST_FINGERPRINTER_CLASS), as hex.

    With ``uniform`` (the Bloom backends, which take bit positions from the first
    32 hex digits), what a fingerprinter other than Scrapy's own returns is hashed
    with SHA1 first: a custom fingerprint may be a prefixed digest or raw URL
    bytes, whose first bytes are the same for every request.
    """
    fingerprinter = crawler.request_fingerprinter
    rehash = uniform and type(fingerprinter) is not RequestFingerprinter

    def fingerprint(request: Request) -> str:
        digest = fingerprinter.fingerprint(request)
        if rehash and isinstance(digest, bytes) and digest:
            return hashlib.sha1(digest).hexdigest()
        if not isinstance(digest, bytes) or len(digest) * 2 < MIN_FINGERPRINT_HEX:
            raise InvalidFingerprintError(
                f"{type(fingerprinter).__name__}.fingerprint() returned {digest!r}; "
                "DEDUP_FINGERPRINTER='scrapy' needs bytes of a digest at least 16 bytes long "
                "(Scrapy's own fingerprinter returns 20)"
            )
        return digest.hex()

    return fingerprint


def get_fingerprinter(
    name: object, crawler: Any, uniform: bool = False
) -> Callable[[Request], str]:
    """The fingerprint function DEDUP_FINGERPRINTER names; ``uniform``: the backend
    derives bit positions from it (see :func:`scrapy_fingerprinter`)."""
    check_choice("DEDUP_FINGERPRINTER", name, FINGERPRINTERS)
    if name == "scrapy":
        return scrapy_fingerprinter(crawler, uniform)
    return scrapy_redis_fingerprint
