"""Every backend row on every server this machine can run: the suite's own
redis-server (Debian's Redis 7.0 here), Redis 8 (single and a three-master
cluster, RedisBloom loaded), Valkey 8 and Valkey 9.

What each server offers is read from the server itself (its version, its modules),
not from the package, and the package must have made the matching choice: the
hash backend lets the server expire fields exactly where it can, native rows work
exactly where BF.* exists and are refused in one line elsewhere. On each: answers,
a second worker, the data lost under a running worker (FLUSHALL: nothing new may
look seen) and clear().

The rest of the suite runs on the suite's own server and cluster; this table is
what backs the documentation's "Which server gives what" (docs/servers.md).
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_dedup_suite.backends.native import NoBloomModuleError
from scrapy_dedup_suite.embedded import EmbeddedRedis, EmbeddedServerError

from .conftest import BACKENDS, NATIVE_ROWS, ROWS
from .helpers import all_keys, connect, fingerprints
from .wheels import packaged_file

#: The servers, by the fixture that starts each (it skips, saying why, without it).
KINDS = {
    "suite-server": "redis_server",
    "redis-8": "redis8_server",
    "redis-8-cluster": "redis8_cluster",
    "valkey-8": "valkey8_server",
    "valkey-9": "valkey9_server",
}


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


@dataclass(frozen=True)
class Offers:
    """What a server offers, from its own INFO and MODULE LIST."""

    name: str
    field_expiry: bool
    bloom: bool

    @classmethod
    def of(cls, client: Any, topology: str) -> Offers:
        nodes = client.get_primaries() if topology == "cluster" else [None]
        infos, modules = [], []
        for node in nodes:
            kw = {"target_nodes": node} if node is not None else {}
            infos.append(client.info("server", **kw))
            listed = client.execute_command("MODULE LIST", **kw)
            if isinstance(listed, dict):  # a cluster client answers per node
                listed = next(iter(listed.values()))
            modules.append({dict(_pairs(m)).get(b"name", b"").lower() for m in listed})
        first = infos[0]
        if "valkey_version" in first:
            name = f"valkey {first['valkey_version']}"
            expiry = all(version(i["valkey_version"]) >= (9, 0) for i in infos)
        else:
            name = f"redis {first['redis_version']}"
            expiry = all(version(i["redis_version"]) >= (7, 4) for i in infos)
        return cls(name, expiry, all(b"bf" in m for m in modules))


def _pairs(entry: Any) -> list[tuple[bytes, Any]]:
    if isinstance(entry, dict):
        return [(k if isinstance(k, bytes) else str(k).encode(), v) for k, v in entry.items()]
    return list(zip(entry[::2], entry[1::2]))


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> tuple[Any, Offers]:
    started = request.getfixturevalue(KINDS[request.param])
    topology = "cluster" if request.param.endswith("cluster") else "single"
    client = connect(started.url, topology)
    client.flushall()
    request.addfinalizer(client.close)
    return client, Offers.of(client, topology)


@pytest.mark.own_servers
@pytest.mark.parametrize("row", ROWS)
def test_every_backend_on_every_server(kind, row):
    client, offers = kind
    make = BACKENDS[row]
    backend = make(client, "t:kinds")
    if row in NATIVE_ROWS and not offers.bloom:
        with pytest.raises(NoBloomModuleError, match=r"no BF.* commands.*Redis 8.*valkey-bloom"):
            backend.open()
        assert all_keys(client) == []  # nothing written
        return
    backend.open()
    if row == "hash":
        # A new filter's buckets take the server's field expiry where the server keeps
        # such a hash in a listpack (Redis >= 7.4); Valkey 9 would make it a hashtable.
        listpack_ttl = offers.field_expiry and offers.name.startswith("redis")
        assert backend.expiry.name == ("server" if listpack_ttl else "janitor"), offers

    fps = fingerprints(300, row)
    assert backend.check_and_add_many(fps + fps[:10]) == [False] * 300 + [True] * 10
    assert backend.check_and_add(fps[0]) is True
    other = make(client, "t:kinds")  # a second worker
    other.open()
    assert all(other.contains_many(fps))

    # The server loses its data under both workers: nothing new may look seen, and
    # what is recorded afterwards is what both answer from.
    client.flushall()
    new = fingerprints(50, f"{row}:after")
    assert backend.check_and_add_many(new) == [False] * 50
    assert [other.check_and_add(fp) for fp in new] == [True] * 50
    later = make(client, "t:kinds")
    later.open()
    assert later.contains_many(new) == [True] * 50

    backend.clear()
    assert other.check_and_add_many(new[:10]) == [False] * 10


def test_a_packaged_server_is_copied_once_executable_and_whole(tmp_path, monkeypatch):
    """Wheels may drop the execute bit: the file is copied with it, once per source
    file (every later call and process reuses it), and a changed source gets a new copy."""
    source = tmp_path / "fake-server"
    source.write_bytes(b"#!/bin/sh\necho one\n")
    source.chmod(0o644)
    monkeypatch.setenv("DEDUP_TEST_FAKE_SERVER", str(source))
    first, why = packaged_file("DEDUP_TEST_FAKE_SERVER", "unused", "fake-server")
    assert why == "" and first is not None and first != str(source)
    assert os.stat(first).st_mode & stat.S_IXUSR
    again, _ = packaged_file("DEDUP_TEST_FAKE_SERVER", "unused", "fake-server")
    assert again == first
    source.write_bytes(b"#!/bin/sh\necho two, longer\n")
    changed, _ = packaged_file("DEDUP_TEST_FAKE_SERVER", "unused", "fake-server")
    assert changed != first and Path(changed).read_bytes() == source.read_bytes()
    monkeypatch.setenv("DEDUP_TEST_FAKE_SERVER", str(tmp_path / "missing"))
    assert packaged_file("DEDUP_TEST_FAKE_SERVER", "unused", "fake-server") == (
        None,
        f"no fake-server at {tmp_path / 'missing'}",
    )


@pytest.mark.parametrize("taken", ["port", "bus_port"])
def test_an_embedded_server_whose_port_was_taken_starts_on_another(redis_server, taken):
    """Ports are picked free, then bound by the server: another process (a parallel test
    worker, say) may bind one in between. A port picked here is picked again; one the
    caller gave is an error that names it."""
    server = EmbeddedRedis(
        binary=redis_server.binary,
        cluster_bus=taken == "bus_port",
        extra_args=["--cluster-enabled", "yes"] if taken == "bus_port" else [],
    )
    busy = getattr(server, taken)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        with server:
            assert getattr(server, taken) != busy
            with redis.Redis(port=server.port) as client:
                assert client.ping()
            port = server.port
            server.stop()
            server.start()  # started again: on the same port (a cluster node's nodes.conf)
            assert server.port == port
        given = EmbeddedRedis(port=busy, binary=redis_server.binary)
        if taken == "port":
            with pytest.raises(EmbeddedServerError, match=f"did not start on port {busy}"):
                given.start()
