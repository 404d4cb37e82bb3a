"""Finish trials: how soon every worker ends once the crawl is done, and none before.

    python -m bench.frontier_finish [--trials 20] [--pages 1500] [--workers 3]
                                    [--server BINARY]

Each trial is a crawl of a local tree-shaped site by WORKERS workers of the frontier
scheduler started at once (the site and workers of ``bench.frontier_kills``). Per
trial: the seconds from the last page parsed (by any worker) to each worker's exit,
and any worker that exited before that last page (early: it closed while another
still had work whose pages could yield more). A worker ends once nothing waits and no
lease is held, SCHEDULER_IDLE_BEFORE_CLOSE (0 here, as scrapy-redis's default) after
it last saw work; it notices at its next turn: its engine's heartbeat (5 s) at most.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from .frontier_kills import SCHEDULERS, TreeSite, crawl_server, options, parsed, worker


def trial(url: str, site: str, settings: dict, workers: int) -> tuple[list[float], int, int]:
    """One crawl: (seconds from the last page to each worker's exit, pages parsed in
    all, workers that exited before the last page)."""
    with tempfile.TemporaryDirectory() as tmp:
        notes = [Path(tmp) / f"w{n}.notes" for n in range(workers)]
        procs = [worker(url, site, settings, path) for path in notes]
        sizes = [0] * workers
        last_page = time.monotonic()
        exits: list[float | None] = [None] * workers
        while any(e is None for e in exits):
            now = time.monotonic()
            for i, path in enumerate(notes):
                size = path.stat().st_size if path.exists() else 0
                if size != sizes[i]:
                    sizes[i], last_page = size, now
                if exits[i] is None and procs[i].poll() is not None:
                    exits[i] = now
            time.sleep(0.005)
        ended = [e for e in exits if e is not None]
        pages = sum(len(parsed(path)) for path in notes)
        return [e - last_page for e in ended], pages, sum(e < last_page for e in ended)


def main(argv: list[str] | None = None) -> int:
    opts = options("frontier_finish", __doc__, argv, trials=20, workers=3)
    site = TreeSite(opts.pages)
    print(f"{opts.trials} crawls by {opts.workers} workers, tree of {opts.pages:,} pages")
    gaps: list[float] = []
    early = 0
    with crawl_server(opts.server) as (client, url):
        for n in range(opts.trials):
            client.flushall()
            after, pages, before = trial(url, site.url, SCHEDULERS["frontier"], opts.workers)
            gaps += after
            early += before
            shown = ", ".join(f"{s:.2f} s" for s in sorted(after))
            print(
                f"  trial {n}: {pages:,} pages; exits after the last page: {shown}"
                + (f"; {before} before it" if before else ""),
                flush=True,
            )
    print(
        f"every exit after the last page: {min(gaps):.2f}-{max(gaps):.2f} s, median "
        f"{statistics.median(gaps):.2f} s; exits before it: {early}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
