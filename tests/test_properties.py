"""Property-based: random request sequences against an exact model of each backend."""

from __future__ import annotations

import hashlib

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_dedup_suite.backends import BloomBackend, HashBackend, SetBackend, WindowedBloomBackend
from scrapy_dedup_suite.bloom_math import BloomParams
from scrapy_dedup_suite.windows import WindowSpec

# Operations on a small universe of fingerprints, so that repeats are frequent.
OPS = st.lists(
    st.tuples(st.sampled_from(["add", "contains", "add_many", "contains_many"]),
              st.lists(st.integers(0, 60), min_size=1, max_size=8)),
    min_size=1, max_size=40,
)  # fmt: skip
SMALL = BloomParams.from_capacity(10_000, 0.001)


def fp(i: int) -> str:
    return hashlib.sha1(str(i).encode()).hexdigest()


def run(backend, ops, exact: bool) -> None:
    backend.open()
    model: set[str] = set()
    for op, items in ops:
        fps = [fp(i) for i in items]
        if op == "add":
            for f in fps:
                seen = backend.check_and_add(f)
                if f in model:
                    assert seen, "false negative"
                elif exact:
                    assert not seen
                model.add(f)
        elif op == "add_many":
            new = backend.add_many(fps)
            distinct_new = len(set(fps) - model)
            assert new <= distinct_new if not exact else new == distinct_new
            model.update(fps)
        else:
            found = (
                backend.contains_many(fps)
                if op == "contains_many"
                else [backend.contains(f) for f in fps]
            )
            for f, hit in zip(fps, found):
                if f in model:
                    assert hit, "false negative"
                elif exact:
                    assert not hit


def with_flush(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    return client


common = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@common
@given(ops=OPS)
def test_set_backend_is_exact(redis_server, ops):
    run(SetBackend(with_flush(redis_server), "p:set"), ops, exact=True)


@common
@given(ops=OPS)
def test_hash_backend_is_exact(redis_server, ops):
    run(HashBackend(with_flush(redis_server), "p:hash", shards=3), ops, exact=True)


@common
@given(ops=OPS)
def test_bloom_backend_never_forgets(redis_server, ops):
    # 61 distinct items in a filter for 10,000 at 0.1%: a false positive is
    # possible but its probability is below 1e-20 per check, so exact too.
    run(BloomBackend(with_flush(redis_server), "p:bloom", SMALL), ops, exact=True)


@common
@given(ops=OPS)
def test_windowed_backend_never_forgets_within_the_window(redis_server, ops):
    backend = WindowedBloomBackend(
        with_flush(redis_server), "p:win", SMALL, WindowSpec.parse("day", 3)
    )
    run(backend, ops, exact=True)
