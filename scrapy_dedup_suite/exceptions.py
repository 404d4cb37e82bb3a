"""Exception types. Every error this package raises derives from :class:`DedupError`;
and what a message may show of a server's URL (:func:`shown_url`)."""

from __future__ import annotations

import re

#: The password in a URL's "user:password@" (or ":password@").
_PASSWORD = re.compile(r"(?<=://)([^/@:]*):[^/@]*@")


def shown_url(url: str | None) -> str | None:
    """``url`` (or a text that holds URLs) as a message may show it: each password
    masked (``redis://admin:***@host:6379/0``), every other part as given."""
    return None if url is None else _PASSWORD.sub(lambda m: f"{m.group(1)}:***@", url)


class DedupError(Exception):
    """Base class of every error raised by scrapy_dedup_suite."""


class DedupConfigError(DedupError, ValueError):
    """A setting (or a constructor argument) has a value that cannot work.

    The message names the setting, the value found and the values allowed.
    """


class WrongKeyTypeError(DedupError):
    """A Redis key the backend owns holds another type (e.g. a set where a
    bitmap is expected). The key is left untouched."""

    def __init__(
        self, key: str, found: str, expected: str, hint: str = "", shown: str = ""
    ) -> None:
        self.key = key
        self.found = found
        self.expected = expected  # as TYPE names it; 'a|b' for either
        msg = (
            f"Redis key {key!r} holds a {found}, but this backend stores a "
            f"{shown or expected} there. "
            "Nothing was changed."
        )
        if hint:
            msg += " " + hint
        super().__init__(msg)


class FilterMismatchError(DedupError):
    """The parameters stored beside a filter differ from the ones configured.

    Opening the filter anyway would set and test the wrong bits, so it is refused.
    """


class DedupBackendError(DedupError):
    """Redis failed while checking a request (and ``DEDUP_ON_ERROR = "raise"``)."""


class ClientFailure(DedupBackendError):
    """The Redis client library raised something other than a Redis error while a call
    was under way (redis-py following a redirection to a cluster node it has not
    discovered, say). The call may or may not have run: a transient failure, handled
    as a lost connection is (DEDUP_ON_ERROR). ``__cause__`` is what it raised."""

    def __init__(self, exc: BaseException) -> None:
        text = str(exc).strip().splitlines()
        super().__init__(
            f"the Redis client failed with {type(exc).__name__}" + (f": {text[0]}" if text else "")
        )
        self.__cause__ = exc


class InvalidFingerprintError(DedupError, ValueError):
    """A fingerprint is not what the backend hashes (hex digest of >= 16 bytes)."""


class RedisUnreachableError(DedupError):
    """Redis could not be reached where the dupefilter must be sure of it (at open,
    in the commands). The message names the server, the setting that chose it, and
    what to check; the commands exit with :attr:`exit_code`."""

    exit_code = 6
