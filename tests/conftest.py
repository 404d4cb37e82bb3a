"""Fixtures: one real redis-server and one local web site per session, flushed per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from scrapy_dedup_suite.backends import (
    BloomBackend,
    DedupBackend,
    HashBackend,
    SetBackend,
    WindowedBloomBackend,
)
from scrapy_dedup_suite.bloom_math import BloomParams
from scrapy_dedup_suite.windows import WindowSpec

from .servers import RedisServer, Site, redis_server_binary


def pytest_report_header(config: pytest.Config) -> str:
    return f"redis server binary: {redis_server_binary()}"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


@pytest.fixture
def server(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client as scrapy-redis builds it (bytes replies), on a flushed server."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.script_flush()
    yield client
    client.close()


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    s = Site(pages=200, links=10).start()
    yield s
    s.stop()


# -- the one table of backends ------------------------------------------------------------------
# Each entry builds a backend on a client and key, small enough for tests.

BackendFactory = Callable[..., DedupBackend]

SMALL = BloomParams.from_capacity(50_000, 0.001)

BACKENDS: dict[str, BackendFactory] = {
    "set": lambda server, key="t:dedup", **kw: SetBackend(server, key),
    "hash": lambda server, key="t:dedup", **kw: HashBackend(server, key, shards=4, **kw),
    "bloom": lambda server, key="t:dedup", **kw: BloomBackend(server, key, kw.get("params", SMALL)),
    "windowed-bloom": lambda server, key="t:dedup", **kw: WindowedBloomBackend(
        server, key, kw.get("params", SMALL), kw.get("window", WindowSpec.parse("day", 3))
    ),
}

BLOOM_BACKENDS = ["bloom", "windowed-bloom"]


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
