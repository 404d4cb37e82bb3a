"""The server's clock as this process's (:class:`ServerClock`): a request held for its
download slot's turn is held until a time the server counted."""

from __future__ import annotations

import threading


class ServerClock:
    """The server's clock against ``time.monotonic()``, from the calls' answers: the
    offset of the quickest call of the last minute (the least uncertain)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.rtt = float("inf")
        self.at = -float("inf")
        self._lock = threading.Lock()  # (calls answer in several threads)

    def ahead(self, server_now: float, sent: float, received: float) -> float:
        """Seconds to add to a wait the server counted from ``server_now`` (its time in
        a call sent and answered at those monotonic times), counted from ``received``."""
        rtt = received - sent
        with self._lock:
            if rtt <= self.rtt or received - self.at > 60.0:
                self.offset, self.rtt, self.at = server_now - (sent + received) / 2, rtt, received
            return server_now - self.offset - received
