"""Start trials: how soon a second worker gets work when two start at once.

    python -m bench.frontier_start [--trials 8] [--pages 1500] [--server BINARY]

Each trial is a crawl of a local tree-shaped site by two workers of the frontier
scheduler started at the same moment (the site and workers of ``bench.frontier_kills``).
Per trial: seconds from the start to each worker's first parsed page, the pages each
parsed, and the crawl's time. A worker that finds nothing to take while the other holds
every request asks again half a second later (not at the engine's heartbeat, 5 s), and
goes idle only on what the queue says at that moment.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .frontier_kills import SCHEDULERS, TreeSite, crawl_server, options, parsed, worker


def trial(url: str, site: str, settings: dict) -> tuple[list[float | None], list[int], float]:
    """One start: (seconds to each worker's first page, pages each parsed, crawl time)."""
    with tempfile.TemporaryDirectory() as tmp:
        notes = [Path(tmp) / f"{name}.notes" for name in ("a", "b")]
        began = time.monotonic()
        procs = [worker(url, site, settings, path) for path in notes]
        first: list[float | None] = [None, None]
        while any(proc.poll() is None for proc in procs):
            for i, path in enumerate(notes):
                if first[i] is None and parsed(path):
                    first[i] = time.monotonic() - began
            time.sleep(0.005)
        return first, [len(parsed(path)) for path in notes], time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    opts = options("frontier_start", __doc__, argv, trials=8)
    site = TreeSite(opts.pages)
    print(f"{opts.trials} starts of 2 workers at once, tree of {opts.pages:,} pages")
    with crawl_server(opts.server) as (client, url):
        for n in range(opts.trials):
            client.flushall()
            first, pages, took = trial(url, site.url, SCHEDULERS["frontier"])
            shown = ", ".join("never" if s is None else f"{s:.2f} s" for s in first)
            print(
                f"  trial {n}: first page at {shown}; pages {pages}; crawl {took:.1f} s", flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
