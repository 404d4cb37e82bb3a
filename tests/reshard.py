"""Resharding a live Redis Cluster one step at a time, as ``redis-cli --cluster add-node``
and ``--cluster reshard`` do: a master added (started, met, known to every node), then
each chosen slot moved key by key (IMPORTING on the target, MIGRATING on the source,
MIGRATE one key a step, then SETSLOT NODE on every node).

:class:`Reshard` is driven by ``step()`` calls (a test site calls it once a page it
serves), so a crawl runs between any two steps and meets every state a slot goes
through: ASK redirections to a node its client has not discovered, TRYAGAIN for a
script whose keys are split between two nodes, MOVED once a slot has moved.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import redis

from scrapy_dedup_suite.embedded import EmbeddedCluster, EmbeddedRedis

from .servers import poll_until


def node_id(client: redis.Redis) -> str:
    answer = client.execute_command("CLUSTER", "MYID")
    return answer.decode() if isinstance(answer, bytes) else str(answer)


def knows_all(client: redis.Redis, nodes: int) -> bool:
    """Whether ``client``'s node knows ``nodes`` nodes and serves (its state is ok)."""
    info = client.execute_command("CLUSTER INFO")
    return int(info["cluster_known_nodes"]) == nodes and info["cluster_state"] == "ok"


def add_master(cluster: EmbeddedCluster) -> EmbeddedRedis:
    """Start a node with no slots and introduce it: returns it once every node knows it."""
    first = cluster.nodes[0]
    node = EmbeddedRedis(binary=first.binary, extra_args=first.extra_args, cluster_bus=True)
    cluster.nodes.append(node.start())
    with redis.Redis(port=first.port, decode_responses=True) as c:
        c.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
    clients = [redis.Redis(port=n.port, decode_responses=True) for n in cluster.nodes]
    try:
        poll_until(lambda: all(knows_all(c, len(clients)) for c in clients), timeout=60)
    finally:
        for c in clients:
            c.close()
    return node


def owner(cluster: EmbeddedCluster, slot: int) -> EmbeddedRedis:
    """The node that serves ``slot`` now."""
    with redis.Redis(port=cluster.nodes[0].port, decode_responses=True) as c:
        for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                port = int(master[1])
                return next(n for n in cluster.nodes if n.port == port)
    raise AssertionError(f"slot {slot} is served by no node")


def slots_of(cluster: EmbeddedCluster, pattern: str) -> list[int]:
    """The slots holding keys that match ``pattern``, in the order of their first key."""
    found: dict[int, None] = {}
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as c:
            for key in c.scan_iter(match=pattern, count=1000):
                found[int(c.execute_command("CLUSTER", "KEYSLOT", key))] = None
    return list(found)


class Reshard:
    """Moves slots while something else runs; ``step()`` does the next thing, if any.

    ``plan(cluster)`` is called at the first step and returns ``[(slot, target), ...]``
    where target is a node of the cluster or ``"new"`` (a master added then)."""

    def __init__(self, cluster: EmbeddedCluster, plan: Any, after: int = 0) -> None:
        self.cluster = cluster
        self.plan = plan
        self.after = after  # calls of step() that do nothing first
        self.calls = 0
        self.moved: list[tuple[int, int, int]] = []  # (slot, from port, to port)
        self.keys_moved = 0
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._steps: Iterator[None] | None = None
        self.done = False

    def step(self) -> None:
        with self._lock:
            self.calls += 1
            if self.done or self.calls <= self.after:
                return
            if self._steps is None:
                self._steps = self._run()
            try:
                next(self._steps)
            except StopIteration:
                self.done = True
            except BaseException as exc:  # seen by the test, not lost in a server thread
                self.error = exc
                self.done = True

    def finish(self) -> None:
        """Run every step left (the test's own thread)."""
        while not self.done:
            self.calls = max(self.calls, self.after)
            self.step()
        if self.error is not None:
            raise self.error

    def _run(self) -> Iterator[None]:
        new: EmbeddedRedis | None = None
        for slot, target in self.plan(self.cluster):
            if target == "new":
                if new is None:
                    new = add_master(self.cluster)
                    yield
                target = new
            source = owner(self.cluster, slot)
            if source is target:
                continue
            yield from self._move(slot, source, target)

    def _move(self, slot: int, source: EmbeddedRedis, target: EmbeddedRedis) -> Iterator[None]:
        src = redis.Redis(port=source.port)
        dst = redis.Redis(port=target.port)
        try:
            src_id, dst_id = node_id(src), node_id(dst)
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            yield
            while True:
                keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)
                if not keys:
                    break
                src.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 10_000, "KEYS", *keys
                )
                self.keys_moved += len(keys)
                yield  # the crawl meets the slot split between the two nodes
            for node in self.cluster.nodes:
                with redis.Redis(port=node.port) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            self.moved.append((slot, source.port, target.port))
            yield
        finally:
            src.close()
            dst.close()
