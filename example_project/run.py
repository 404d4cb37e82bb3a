"""The example's main job: real crawls of a local site with Redis deduplication.

    python example_project/run.py                  # one crawl with the bloom backend
    python example_project/run.py --backend hash   # ... with another backend
    python example_project/run.py --all            # every backend without a module, one table
    python example_project/run.py --windowed       # fingerprints forgotten after a window
    python example_project/run.py --migration      # scrapy-redis set -> Bloom filter

Without REDIS_URL in the environment it starts an embedded Valkey server (the
``embedded`` extra) for the run and stops it at the end. With REDIS_URL it uses
that server and touches only the example spiders' keys (``example-*``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
BACKENDS = ("set", "hash", "compact", "bloom", "windowed-bloom")


def scrapy(redis_url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a scrapy command in the example project; its log goes to the terminal."""
    env = {**os.environ, "REDIS_URL": redis_url}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    sys.stdout.flush()
    proc = subprocess.run([sys.executable, "-m", "scrapy.cmdline", *args], cwd=HERE, env=env)
    if check and proc.returncode != 0:
        raise SystemExit(f"`scrapy {' '.join(args)}` failed with exit code {proc.returncode}")
    return proc


def crawl(redis_url: str, spider: str, *settings: str) -> dict:
    """One crawl; returns the dedup summary the DedupSummary extension wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "summary.json")
        options = [arg for s in settings for arg in ("-s", s)]
        scrapy(redis_url, "crawl", spider, "-s", f"DEDUP_SUMMARY_JSON={path}", *options)
        return json.loads(path.read_text())


def reset(redis_url: str, spider: str, backend: str) -> None:
    """Delete the example spider's queue and dupefilter, through the backend's own clear()."""
    import redis
    from scrapy.settings import Settings

    from scrapy_dedup_suite.backends import build_backend

    sys.path.insert(0, str(HERE))
    from example import settings as project

    settings = Settings({k: v for k, v in vars(project).items() if k.isupper()})
    settings.set("DEDUP_BACKEND", backend)
    settings.set("REDIS_URL", redis_url)
    if spider == "example-news":
        from example.spiders.site import NewsSpider

        settings.setdict(NewsSpider.custom_settings, priority="spider")
    build_backend(settings, spider).clear()
    redis.Redis.from_url(redis_url).delete(f"{spider}:requests")


def site_port_problem(extra: list[str]) -> str:
    """Why the example site cannot be served (its port taken), or "" if it can: the
    spider would fail at start and the table would be all zeros."""
    sys.path.insert(0, str(HERE))
    from example import settings as project
    from example.site import make_server

    port = project.EXAMPLE_SITE_PORT
    for setting in extra:
        name, _, value = setting.partition("=")
        if name == "EXAMPLE_SITE_PORT":
            port = int(value)
    try:
        make_server(port, 1, 1).server_close()
    except OSError as exc:
        return (
            f"cannot serve the example site on 127.0.0.1:{port} ({exc.strerror or exc}); "
            "stop what uses that port, or pass -s EXAMPLE_SITE_PORT=<a free port>"
        )
    return ""


def print_table(rows: list[dict], title: str) -> None:
    from scrapy_dedup_suite.operations.summary import table

    print(f"\n{title}\n{table(rows)}\n", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--backend", choices=BACKENDS, default="bloom")
    mode.add_argument(
        "--all",
        action="store_true",
        help="set, hash, compact, bloom and windowed-bloom, one after the other",
    )
    mode.add_argument("--windowed", action="store_true", help="the time-window demo")
    mode.add_argument("--migration", action="store_true", help="set -> migrate -> bloom")
    parser.add_argument("--window", type=int, default=10, help="seconds per bucket (--windowed)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "-s", dest="settings", action="append", default=[], metavar="NAME=VALUE",
        help="extra Scrapy setting for every crawl (repeatable)",
    )  # fmt: skip
    opts = parser.parse_args(argv)
    extra = opts.settings
    problem = site_port_problem(extra)
    if problem:
        print(f"demo: {problem}", file=sys.stderr)
        return 1

    with ExitStack() as stack:
        url = os.environ.get("REDIS_URL")
        if not url:
            from scrapy_dedup_suite.embedded import EmbeddedRedis

            server = stack.enter_context(EmbeddedRedis())
            url = server.url
            print(f"Embedded Valkey server on {url} (set REDIS_URL to use your own Redis)")
        results: dict[str, object] = {}

        if opts.windowed:
            window = [f"DEDUP_WINDOW={opts.window}", "DEDUP_WINDOW_COUNT=2", *extra]
            reset(url, "example-news", "windowed-bloom")
            runs = []
            for label in ("first run", "again, within the window"):
                runs.append({**crawl(url, "example-news", *window), "run": label})
            wait = 2 * opts.window + 1
            print(f"Waiting {wait} s: every bucket leaves the window and Redis expires it ...")
            time.sleep(wait)
            runs.append({**crawl(url, "example-news", *window), "run": "after the window"})
            print_table(runs, f"windowed-bloom, 2 buckets of {opts.window} s:")
            for r in runs:
                print(f"  {r['run']:<26} new pages fetched: {r['new']:,}")
            results["windowed"] = runs
        elif opts.migration:
            steps = []
            reset(url, "example-site", "set")
            reset(url, "example-site", "bloom")
            steps.append(crawl(url, "example-site", "DEDUP_BACKEND=set", *extra))
            print("\n$ scrapy migrate-set-to-bloom --spider example-site", flush=True)
            scrapy(url, "migrate-set-to-bloom", "--spider", "example-site", *(
                arg for s in extra for arg in ("-s", s)
            ))  # fmt: skip
            steps.append(crawl(url, "example-site", "DEDUP_BACKEND=bloom", *extra))
            print_table(
                steps, "scrapy-redis set, then the same crawl on the migrated Bloom filter:"
            )
            results["migration"] = steps
        else:
            rows = []
            for backend in BACKENDS if opts.all else (opts.backend,):
                reset(url, "example-site", backend)
                rows.append(crawl(url, "example-site", f"DEDUP_BACKEND={backend}", *extra))
            print_table(rows, "Deduplication of the example crawl:")
            results["crawls"] = rows
        if opts.json:
            Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
