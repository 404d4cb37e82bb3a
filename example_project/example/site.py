"""The local web site the example crawls: deterministic, on 127.0.0.1, no internet.

``/page/N`` for N < pages; each page links to the next one (so every page is
reachable from page 0) and to ``links - 1`` others chosen by a fixed formula,
so most links a crawl discovers point at pages it has already seen.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def links_of(page: int, pages: int, links: int) -> list[int]:
    return [(page + 1) % pages] + [(page * 31 + i * 97 + 7) % pages for i in range(1, links)]


def render(page: int, pages: int, links: int) -> bytes:
    items = "".join(
        f'<li><a href="/page/{n}">page {n}</a></li>' for n in links_of(page, pages, links)
    )
    return f"<html><body><h1>Page {page}</h1><ul>{items}</ul></body></html>".encode()


def make_server(port: int, pages: int, links: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms stalls

        def do_GET(self) -> None:
            head, _, number = self.path.rpartition("/")
            if head != "/page" or not number.isdigit() or int(number) >= pages:
                self.send_error(404)
                return
            body = render(int(number), pages, links)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        # The default listen backlog (5) overflows under 32 concurrent
        # connects, and each dropped SYN costs the crawler a 1 s retransmit.
        request_queue_size = 256

    return Server(("127.0.0.1", port), Handler)


class LocalSite:
    """The site served by a child process (its threads would otherwise compete
    with the crawler's reactor for the GIL)."""

    def __init__(self, port: int, pages: int, links: int) -> None:
        self.port = port
        try:  # fail here, with a clear message, if the port is taken
            make_server(port, pages, links).server_close()
        except OSError as exc:
            raise RuntimeError(
                f"cannot serve the example site on 127.0.0.1:{port} ({exc}); "
                "choose another port with -s EXAMPLE_SITE_PORT=..."
            ) from None
        root = Path(__file__).resolve().parent.parent
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "example.site", str(port), str(pages), str(links)], env=env
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the example site did not start") from None
                time.sleep(0.05)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


if __name__ == "__main__":
    port, pages, links = map(int, sys.argv[1:4])
    make_server(port, pages, links).serve_forever()
