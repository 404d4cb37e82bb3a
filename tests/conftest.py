"""Fixtures: one real redis-server, one real Redis Cluster (three masters from the
same binary) and one local web site per session; servers flushed per test.

A test module with ``ON_CLUSTER = True`` runs each test that uses ``server`` (or
``topology``) twice: on the single server and on the cluster (unless the test is
marked ``single_server``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from scrapy_dedup_suite.backends import (
    BloomBackend,
    DedupBackend,
    HashBackend,
    SetBackend,
    WindowedBloomBackend,
)
from scrapy_dedup_suite.bloom_math import BloomParams, Scaling
from scrapy_dedup_suite.embedded import EmbeddedCluster
from scrapy_dedup_suite.windows import WindowSpec

from .servers import RedisServer, Site, redis_server_binary

TOPOLOGIES = ["single", "cluster"]


def pytest_report_header(config: pytest.Config) -> str:
    return f"redis server binary: {redis_server_binary()}"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedCluster]:
    cluster = EmbeddedCluster(3, binary=redis_server_binary()).start()
    yield cluster
    cluster.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        "topology" in metafunc.fixturenames
        and getattr(metafunc.module, "ON_CLUSTER", False)
        and metafunc.definition.get_closest_marker("single_server") is None
    ):
        metafunc.parametrize("topology", TOPOLOGIES)


@pytest.fixture
def topology() -> str:
    """``"single"`` unless the module sets ON_CLUSTER (then also ``"cluster"``)."""
    return "single"


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, topology: str) -> str:
    """URL of the single server, or of the cluster's first node."""
    if topology == "cluster":
        return request.getfixturevalue("redis_cluster").url
    return request.getfixturevalue("redis_server").url


@pytest.fixture
def redis_settings(redis_url: str, topology: str) -> dict[str, Any]:
    """The Scrapy settings that reach the server under test."""
    return {"REDIS_URL": redis_url, "DEDUP_REDIS_CLUSTER": topology == "cluster"}


def connect(url: str, topology: str) -> Any:
    """A client as scrapy-redis builds it (bytes replies); a RedisCluster on the cluster."""
    if topology == "cluster":
        return RedisCluster.from_url(url)
    return redis.Redis.from_url(url)


@pytest.fixture
def server(redis_url: str, topology: str) -> Iterator[Any]:
    """A client on a flushed server (every master of the cluster flushed)."""
    client = connect(redis_url, topology)
    client.flushall()
    client.script_flush()
    yield client
    client.close()


def all_keys(client: Any) -> list[bytes]:
    """Every key on the server or on every master of the cluster, sorted."""
    return sorted(client.scan_iter(match="*", count=1000))


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    s = Site(pages=200, links=10).start()
    yield s
    s.stop()


# -- the one table of backends ------------------------------------------------------------------
# Each entry builds a backend on a client and key, small enough for tests.

BackendFactory = Callable[..., DedupBackend]

# Four blocks, so that on the cluster one filter spans several slots and masters.
SMALL = BloomParams.from_capacity(50_000, 0.001, blocks=4)

BACKENDS: dict[str, BackendFactory] = {
    "set": lambda server, key="t:dedup", **kw: SetBackend(server, key),
    "hash": lambda server, key="t:dedup", **kw: HashBackend(server, key, shards=4, **kw),
    "bloom": lambda server, key="t:dedup", **kw: BloomBackend(server, key, kw.get("params", SMALL)),
    "windowed-bloom": lambda server, key="t:dedup", **kw: WindowedBloomBackend(
        server, key, kw.get("params", SMALL), kw.get("window", WindowSpec.parse("day", 3))
    ),
}
#: The DEDUP_BACKEND names (crawls and processes take these).
NAMES = list(BACKENDS)

# Scalable variants, their first layer small enough that the shared tests grow
# them past it (2,500 fingerprints over layers of 1,000, 2,000, ...).
SCALING = Scaling(expansion=2)
FIRST_LAYER = SCALING.first_layer(1_000, 0.0001, blocks=4)
BACKENDS["bloom+scaling"] = lambda server, key="t:dedup", **kw: BloomBackend(
    server, key, kw.get("params", FIRST_LAYER), SCALING
)
BACKENDS["windowed-bloom+scaling"] = lambda server, key="t:dedup", **kw: WindowedBloomBackend(
    server,
    key,
    kw.get("params", FIRST_LAYER),
    kw.get("window", WindowSpec.parse("day", 3)),
    scaling=SCALING,
)


#: The settings that build each row of the table from a crawler.
SETTINGS_ROWS: dict[str, dict[str, Any]] = {
    "set": {"DEDUP_BACKEND": "set"},
    "hash": {"DEDUP_BACKEND": "hash"},
    "bloom": {"DEDUP_BACKEND": "bloom"},
    "windowed-bloom": {"DEDUP_BACKEND": "windowed-bloom"},
    "bloom+scaling": {"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_SCALING": True},
    "windowed-bloom+scaling": {"DEDUP_BACKEND": "windowed-bloom", "DEDUP_BLOOM_SCALING": True},
}
assert set(SETTINGS_ROWS) == set(BACKENDS)


@pytest.fixture(params=list(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_backend(server: redis.Redis, backend_name: str) -> Callable[..., DedupBackend]:
    def make(key: str = "t:dedup", client: Any = None, **kw: Any) -> DedupBackend:
        backend = BACKENDS[backend_name](client or server, key, **kw)
        return backend

    return make


def fingerprints(n: int, salt: str = "") -> list[str]:
    """n distinct 40-hex fingerprints (as scrapy-redis makes them)."""
    import hashlib

    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]
