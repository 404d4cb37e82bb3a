"""Leases held: how many requests one worker of the frontier holds at a random moment,
against what docs/frontier.md says it can hold.

    python -m bench.frontier_held [--stops 20] [--pages 1500] [--server BINARY]

Each trial is a worker alone on a local tree-shaped site (``bench.frontier_kills``'s,
``CONCURRENT_REQUESTS`` 8, ``FRONTIER_PREFETCH`` 8); once it has parsed a random number
of pages it is frozen (SIGSTOP), and the leases in Redis are counted: all its own, as
it crawls alone, taken and not started, in its engine, or finished and not yet
acknowledged. Then it is killed. The bound it is compared with: 1.5 x the prefetch
taken or being leased (the next are leased once half are handed out) and the engine's
downloads (``CONCURRENT_REQUESTS``), 20 here; the responses waiting for their callback
and the pages finished in the last 0.2 s come on top.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from pathlib import Path

import redis

from .frontier_kills import SCHEDULERS, TreeSite, crawl_server, options, parsed, worker

LEASES = "{tree:requests}:frontier:leases"
CONCURRENT, PREFETCH = 8, 8


def trial(client: redis.Redis, url: str, site: str, stop_at: int) -> int:
    """Leases held by a worker frozen once it parsed ``stop_at`` pages."""
    with tempfile.TemporaryDirectory() as tmp:
        notes = Path(tmp) / "worker.notes"
        settings = {**SCHEDULERS["frontier"], "FRONTIER_LEASE": 60}
        proc = worker(url, site, settings, notes)
        while len(parsed(notes)) < stop_at and proc.poll() is None:
            time.sleep(0.002)
        if proc.poll() is not None:
            return -1
        os.kill(proc.pid, signal.SIGSTOP)
        held = int(client.hlen(LEASES))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return held


def main(argv: list[str] | None = None) -> int:
    opts = options("frontier_held", __doc__, argv, stops=20)
    rng = random.Random(opts.seed)
    site = TreeSite(opts.pages)
    bound = PREFETCH + PREFETCH // 2 + CONCURRENT
    with crawl_server(opts.server) as (client, url):
        held = []
        for _ in range(opts.stops):
            client.flushall()
            held.append(trial(client, url, site.url, rng.randint(1, opts.pages // 2)))
        seen = [n for n in held if n >= 0]
        if not seen:
            print("no worker lived to its stop: nothing measured")
            return 1
        print(
            f"{len(seen)} stops of a worker alone, tree of {opts.pages:,} pages: leases held "
            f"{min(seen)}-{max(seen)}, {sum(seen) / len(seen):.1f} on average; over the "
            f"bound of {bound}: {sum(1 for n in seen if n > bound)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
