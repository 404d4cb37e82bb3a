"""What the frontier does with a call that failed: a key of another type stops the
worker with one line; anything else is transient, said quietly and tried again.

A key of the frontier's that holds another type (a priority's list that is a string,
the queue a hash...) makes every call to its shard fail the same way: retried each
second, the worker said it had work pending for ever and never ended. It is refused by
name, once, and the spider closes with reason ``frontier_key_refused``; the key is
left as it is (another program's, or a mistake to look at), and the worker's leases
come back to the queue when they end.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_from_coro

from ..exceptions import WrongKeyTypeError
from ..server.failures import WRONG_TYPE, coded

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: The spider's close reason when a key of the frontier holds another type.
REASON = "frontier_key_refused"


def wrong_type(exc: BaseException | None) -> str | None:
    """The refusal's text when ``exc`` says a key holds another type, else None."""
    if exc is None:
        return None
    if isinstance(exc, WrongKeyTypeError):
        return str(exc)
    code, failure = coded(exc)
    if code in WRONG_TYPE:
        return failure.message if failure is not None else str(exc)
    return None


class Refusals:
    """See the module. ``quiet``: the frontier's rate-limited warnings."""

    def __init__(self, crawler: Crawler, quiet: Any) -> None:
        self.crawler = crawler
        self.quiet = quiet
        #: Set once a key was refused: the worker is closing, nothing is pending.
        self.stopping = False
        self._asked = False

    def failed(self, exc: BaseException | None, doing: str, close: bool = True) -> None:
        """A call that failed while the frontier was ``doing`` (e.g. "lease requests");
        ``close``: the spider is closed now (else by :meth:`close`: while the engine
        opens the spider, the scheduler's first request call does it)."""
        refused = wrong_type(exc)
        if refused is None:
            self.quiet.warn("The frontier could not %s: %s", doing, exc)
            return
        if self.stopping:
            return
        self.stopping = True
        logger.error(
            "The frontier cannot %s: %s. It would fail each call the same way, so this "
            "worker stops (reason %s); the key is left as it is: move or delete it",
            doing,
            refused,
            REASON,
        )
        if close:
            self.close()

    def refuse(self, exc: BaseException) -> None:
        """Stop the worker at its open with ``exc``'s one line (scrapy-redis's queue it
        may not read): closed by the first request call, as a key refused at the open."""
        if self.stopping:
            return
        self.stopping = True
        logger.error("%s. This worker stops (reason %s)", exc, REASON)

    def close(self) -> None:
        """Close the spider (once), as :meth:`failed` does unless told not to."""
        if self._asked:
            return
        self._asked = True
        engine = getattr(self.crawler, "engine", None)
        if engine is None:
            return
        close_async = getattr(engine, "close_spider_async", None)  # Scrapy >= 2.14
        if close_async is not None:
            deferred_from_coro(close_async(reason=REASON))
        else:
            engine.close_spider(self.crawler.spider, REASON)
