"""A TCP proxy on 127.0.0.1 that adds a fixed delay to every byte, each way.

    python -m bench.latency_proxy LISTEN_PORT TARGET_PORT DELAY_MS

Each direction adds DELAY_MS / 2, so a request and its answer take DELAY_MS more
(a Redis on another host, 0.5 to 1 ms away). Order is kept: each chunk is sent
when its own deadline passes, after the chunks before it. Threads and
time.sleep, whose precision is tens of microseconds (an event loop's timers
round to milliseconds). Prints "ready" once listening.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import sys
import threading
import time


def pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    """Forward ``source`` to ``sink``, each chunk ``delay`` seconds after it came."""
    queue: collections.deque[tuple[float, bytes]] = collections.deque()
    ready = threading.Condition()

    def send() -> None:
        while True:
            with ready:
                while not queue:
                    ready.wait()
                deadline, data = queue.popleft()
            wait = deadline - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not data:
                break
            try:
                sink.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    threading.Thread(target=send, daemon=True).start()
    while True:
        try:
            data = source.recv(1 << 16)
        except OSError:
            data = b""
        with ready:
            queue.append((time.perf_counter() + delay, data))
            ready.notify()
        if not data:
            return


def handle(client: socket.socket, target: int, delay: float) -> None:
    upstream = socket.create_connection(("127.0.0.1", target))
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=pump, args=(client, upstream, delay), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client, delay), daemon=True).start()


def main() -> None:
    listen, target, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen))
    server.listen(64)
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        handle(client, target, delay_ms / 2000)


if __name__ == "__main__":
    main()
