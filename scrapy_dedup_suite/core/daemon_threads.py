"""Threads that never hold the crawler's process at exit.

Scrapy's forced shutdown (a second Ctrl-C or SIGTERM) stops the reactor without closing
the spider, so nothing that waits for ``spider_closed`` runs. Python then waits, before
it exits, for every thread that is not a daemon: a Twisted ``ThreadPool``'s idle worker
waits for work for ever, and the process with it. The package's threads (the batch
middleware's pool, the frontier's lease calls) are daemons: a forced exit ends them
where they are, as a kill would, which the frontier is built to survive (a lease not
acknowledged comes back to the queue when it ends).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool


def daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    """A ``threading.Thread`` that is a daemon."""
    return threading.Thread(*args, daemon=True, **kwargs)


class DaemonThreadPool(ThreadPool):
    """A Twisted thread pool whose workers are daemon threads (see the module)."""

    threadFactory = staticmethod(daemon_thread)  # type: ignore[assignment]


class DaemonThreads:
    """``threads(call, *args)``: ``call`` run in one of ``size`` daemon threads (started
    when first used), its answer a Deferred fired on the reactor; :meth:`stop` at the
    close (after the calls running answered)."""

    def __init__(self, name: str, size: int, keep: int = 0) -> None:
        self.name = name
        self.size = size
        self.keep = keep  # threads kept waiting for work
        self.pool: DaemonThreadPool | None = None

    def __call__(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
        from twisted.internet import reactor  # the one Scrapy installed

        if self.pool is None:
            self.pool = DaemonThreadPool(self.keep, self.size, name=self.name)
            self.pool.start()
        return deferToThreadPool(reactor, self.pool, call, *args, **kwargs)

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None
