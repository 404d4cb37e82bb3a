"""What only a Redis Cluster can show: keys spread over masters, slots shared where
one call needs them, a 10^9-capacity filter, and the errors of a wrong setup."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import (
    BloomBackend,
    HashBackend,
    WindowedBloomBackend,
    build_backend,
)
from scrapy_dedup_suite.core.bloom_math import BloomParams
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.server import scripts
from scrapy_dedup_suite.server.connection import get_redis

from .helpers import fingerprints


@pytest.fixture
def topology() -> str:
    return "cluster"


def masters_of(client: RedisCluster, keys: list[str]) -> set[str]:
    return {client.get_node_from_key(k).name for k in keys}


def test_the_cluster_has_three_masters(server):
    assert len(server.get_primaries()) == 3


def test_bloom_blocks_spread_over_every_master(server):
    backend = BloomBackend(server, "c:bloom", BloomParams.from_capacity(200_000, 0.001, blocks=12))
    backend.open()
    # Each block exists on the master that owns its slot ...
    for key in backend.block_keys:
        node = server.get_node_from_key(key)
        assert node.redis_connection.exists(key) == 1, (key, node.name)
    # ... and the twelve blocks land on all three masters.
    assert len(masters_of(server, backend.block_keys)) == 3
    # The record lives in its own slot.
    assert server.keyslot(backend.meta_key) != server.keyslot(backend.block_keys[0])
    fps = fingerprints(3000)
    assert backend.add_many(fps) >= 2998
    assert all(backend.contains_many(fps))
    info = backend.info()
    assert sum(info["nodes"].values()) == 25  # twelve blocks, their stamps and the record
    # Each block's stamp sits in the block's own slot.
    for block, stamp in zip(backend.block_keys, backend.stamp_keys):
        assert server.keyslot(stamp) == server.keyslot(block)
    assert len(info["nodes"]) == 3


def test_hash_shards_spread_over_every_master(server):
    backend = HashBackend(server, "c:hash", shards=16)
    backend.open()
    fps = fingerprints(2000)
    assert backend.add_many(fps) == 2000
    used = [k for k in backend.shard_keys if server.exists(k)]
    assert len(used) == 16
    assert len(masters_of(server, used)) == 3
    assert backend.info()["fields"] == 2000


def test_windowed_buckets_of_a_block_share_a_slot(server):
    backend = WindowedBloomBackend(
        server,
        "c:win",
        BloomParams.from_capacity(50_000, 0.001, blocks=6),
        WindowSpec.parse("day", 5),
    )
    backend.open()
    per_block = backend.live_keys()
    assert len(per_block) == 6 and all(len(keys) == 5 for keys in per_block)
    for keys in per_block:
        assert len({server.keyslot(k) for k in keys}) == 1
    assert len(masters_of(server, [keys[0] for keys in per_block])) >= 2
    fps = fingerprints(500)
    assert not any(backend.check_and_add(fp) for fp in fps)
    assert all(backend.check_and_add(fp) for fp in fps)


def test_a_billion_capacity_filter_is_a_normal_configuration(server):
    """10^9 fingerprints at 0.1%: about 1.8 GB of bits in blocks under 512 MB,
    allocated on every master."""
    params = BloomParams.from_capacity(1_000_000_000, 0.001, blocks=16)
    assert 1.7e9 < params.total_bits / 8 < 1.9e9
    assert params.block_bits / 8 < 512 * 2**20
    backend = BloomBackend(server, "c:billion", params)
    backend.open()
    per_master: dict[str, int] = {}
    for key in backend.block_keys:
        node = server.get_node_from_key(key)
        size = node.redis_connection.strlen(key)
        assert size == (params.block_bits + 7) // 8
        per_master[node.name] = per_master.get(node.name, 0) + size
    assert len(per_master) == 3
    assert sum(per_master.values()) == sum((params.block_bits + 7) // 8 for _ in range(16))
    fps = fingerprints(5000, salt="billion")
    assert backend.add_many(fps) == 5000
    assert all(backend.contains_many(fps))
    assert backend.check_and_add(fps[0]) is True
    assert backend.clear() == 33  # 16 blocks, their 16 stamps and the record
    assert not any(server.exists(k) for k in backend.block_keys)


def test_few_blocks_on_a_cluster_are_reported(server, caplog):
    # One block fits on one master only: the log says how to spread the filter.
    with caplog.at_level(logging.WARNING, logger="scrapy_dedup_suite.backends.base"):
        BloomBackend(server, "c:one", BloomParams.from_capacity(10_000, 0.001, blocks=1)).open()
    assert not caplog.records
    params = BloomParams.from_capacity(10_000, 0.001, blocks=2)
    for key in ("c:two", "c:two-b", "c:two-c", "c:two-d"):
        if len(masters_of(server, [f"{{{key}:0}}", f"{{{key}:1}}"])) == 1:
            break
    else:  # pragma: no cover - the four names were chosen so that one pair shares a master
        pytest.fail("no key pair on one master; choose other names")
    with caplog.at_level(logging.WARNING, logger="scrapy_dedup_suite.backends.base"):
        BloomBackend(server, key, params).open()
    assert "DEDUP_BLOOM_BLOCKS" in caplog.text


def test_settings_build_a_cluster_client(redis_cluster, server):
    settings = Settings(
        {
            "REDIS_URL": redis_cluster.url,
            "DEDUP_REDIS_CLUSTER": "True",  # as `-s DEDUP_REDIS_CLUSTER=True` passes it
            "REDIS_PARAMS": {"socket_timeout": 3},
            "DEDUP_BACKEND": "bloom",
            "DEDUP_BLOOM_CAPACITY": 10_000,
        }
    )
    client = get_redis(settings)
    assert isinstance(client, RedisCluster)
    # REDIS_PARAMS reach every node's connections.
    for node in client.get_primaries():
        assert node.redis_connection.connection_pool.connection_kwargs["socket_timeout"] == 3
    backend = build_backend(settings, "spider", server=client)
    backend.open()
    assert backend.check_and_add(fingerprints(1)[0]) is False


def test_plain_client_on_a_cluster_node_names_the_setting(redis_cluster, server):
    client = redis.Redis.from_url(redis_cluster.url)
    params = BloomParams.from_capacity(10_000, 0.001, blocks=8)  # some block on another node
    with pytest.raises(DedupConfigError, match="DEDUP_REDIS_CLUSTER = True"):
        BloomBackend(client, "c:plain", params).open()


def test_cluster_setting_on_a_single_server_is_an_error(redis_server):
    settings = Settings({"REDIS_URL": redis_server.url, "DEDUP_REDIS_CLUSTER": True})
    with pytest.raises(DedupConfigError, match="does not answer as a Redis Cluster node"):
        get_redis(settings)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"DEDUP_REDIS_CLUSTER": "yes please"}, "DEDUP_REDIS_CLUSTER must be True or False"),
        (
            {"DEDUP_REDIS_CLUSTER": True, "REDIS_URL": "unix:///tmp/redis.sock"},
            "is a Unix socket",
        ),
        (
            {"DEDUP_REDIS_CLUSTER": True, "REDIS_PARAMS": {"redis_cls": "redis.Redis"}},
            "remove redis_cls",
        ),
        ({"DEDUP_REDIS_URL": 6379}, "DEDUP_REDIS_URL must be a string"),
    ],
)
def test_bad_cluster_settings(settings, message):
    with pytest.raises(DedupConfigError, match=message):
        get_redis(Settings(settings))


def test_unreachable_cluster_is_a_clear_error():
    from scrapy_dedup_suite.embedded import free_port

    settings = Settings(
        {
            "REDIS_URL": f"redis://127.0.0.1:{free_port()}",
            "DEDUP_REDIS_CLUSTER": True,
            "REDIS_PARAMS": {"socket_connect_timeout": 0.5},
        }
    )
    with pytest.raises(DedupConfigError, match="Cannot reach the Redis Cluster at"):
        get_redis(settings)


def test_a_batch_keeps_the_calls_that_ran_when_one_master_keeps_refusing_its_script(server):
    """A master that still lacks the script after the reload (one the client had not
    discovered when it loaded it: a master added mid-crawl) refuses its own calls only:
    the answers of the calls that ran elsewhere are kept, never thrown away with the
    refusal (the batch's retry would then find their own writes and call new pages seen)."""
    keys = [f"{{c:{i}}}:set" for i in range(30)]
    by_master: dict[str, str] = {}
    for key in keys:
        by_master.setdefault(server.get_node_from_key(key).name, key)
    assert len(by_master) == 3
    refusing, *others = by_master.values()
    scripts.SET_ADD.load(server)
    server.get_node_from_key(refusing).redis_connection.script_flush()
    calls = [([key], ["fp"]) for key in (refusing, *others)]
    # The reload reaches the masters the client knows, never the refusing one.
    answers = scripts.run_many(server, scripts.SET_ADD, calls, lambda: None, keep_errors=True)
    assert isinstance(answers[0], NoScriptError)
    assert answers[1:] == [[0], [0]]  # each ran once: "new", kept
    assert server.exists(refusing) == 0


SECRET = "S3cretPassw0rd"


@pytest.mark.parametrize(
    "settings",
    [
        {
            "DEDUP_REDIS_CLUSTER": True,
            "DEDUP_REDIS_URL": f"redis://admin:{SECRET}@127.0.0.1:{{port}}/0",
        },
        {"DEDUP_REDIS_CLUSTER": True, "REDIS_URL": f"redis://:{SECRET}@127.0.0.1:{{port}}"},
        {"DEDUP_REDIS_CLUSTER": True, "REDIS_URL": f"unix://admin:{SECRET}@/tmp/redis.sock"},
        {"DEDUP_REDIS_URL": f"redis+sentinel://:{SECRET}@127.0.0.1:{{port}}"},
        {"DEDUP_REDIS_URL": f"redis+sentinel://:{SECRET}@127.0.0.1:{{port}}/primary/x"},
        {"REDIS_URL": f"redis+sentinel://:{SECRET}@127.0.0.1:{{port}}/primary"},
    ],
)
def test_a_connection_error_never_shows_the_password_of_the_url(settings):
    """Issue 53: 'Cannot reach the Redis Cluster at redis://admin:S3cretPassw0rd@...'
    printed the password; each message now shows the URL with its password masked."""
    from scrapy_dedup_suite.embedded import free_port

    port = free_port()
    given = {k: v.replace("{port}", str(port)) for k, v in settings.items() if isinstance(v, str)}
    given = {**settings, **given, "REDIS_PARAMS": {"socket_connect_timeout": 0.5}}
    with pytest.raises(DedupConfigError) as caught:
        get_redis(Settings(given))
    text = str(caught.value)
    assert SECRET not in text, text
    assert ":***@" in text, text
