"""Property-based: random request sequences against an exact model of each backend."""

from __future__ import annotations

import hashlib

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import BACKENDS, ROWS

# Operations on a small universe of fingerprints, so that repeats are frequent.
OPS = st.lists(
    st.tuples(st.sampled_from(["add", "contains", "add_many", "contains_many"]),
              st.lists(st.integers(0, 60), min_size=1, max_size=8)),
    min_size=1, max_size=40,
)  # fmt: skip


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


common = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("row", ROWS)
@common
@given(ops=OPS)
def test_every_backend_matches_an_exact_model(redis_server, row, ops):
    # At most 61 distinct fingerprints in filters sized for thousands: a false
    # positive is possible in principle but below 1e-6 per sequence, so exact too.
    with redis.Redis.from_url(redis_server.url) as client:  # one per example, closed
        client.flushall()
        run(BACKENDS[row](client, "p:test"), ops, exact=True)
