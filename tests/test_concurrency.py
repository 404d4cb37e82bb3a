"""Many crawler processes at once: each distinct request is admitted exactly once."""

from __future__ import annotations

import pytest

from .conftest import ROWS
from .helpers import REQUESTS, SETTINGS_ROWS, run_crowd

ON_CLUSTER = True  # the crowd also runs against the three-master cluster


@pytest.mark.parametrize("backend", ROWS)
def test_concurrent_crawlers_admit_each_request_once(redis_url, topology, server, backend):
    settings = dict(SETTINGS_ROWS[backend])
    admitted = run_crowd(redis_url, topology, settings.pop("DEDUP_BACKEND"), REQUESTS, settings)
    # Never admitted twice, by any two processes.
    assert max(admitted.values()) == 1
    if backend in ("set", "hash", "compact"):  # exact
        assert sum(admitted.values()) == REQUESTS
    else:
        # A Bloom filter may take a new request for a duplicate (3,000 items in a
        # filter for 100,000 at 0.1%: the expected number is far below one).
        assert REQUESTS - 2 <= sum(admitted.values()) <= REQUESTS
