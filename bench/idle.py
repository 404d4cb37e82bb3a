"""What an idle worker costs Redis: commands per second while a spider waits for work.

    python -m bench.idle [--seconds 30] [--warmup 5] [--server PATH]

Each row starts one worker in a process of its own: a scrapy-redis ``RedisSpider``
whose start-URL key is empty, so it waits for work and never closes (scrapy-redis's
``MAX_IDLE_TIME_BEFORE_CLOSE = 0``), as a fleet's workers wait between batches. After
``--warmup`` seconds, every command a client sends is counted for ``--seconds``
(MONITOR; the commands scripts run inside, and the counter's own, left out), then the
worker is stopped. Rows: scrapy-redis's scheduler and dupefilter (``sr scheduler``),
and this package's frontier (``frontier``). The ratio column is to ``sr scheduler``,
measured in the same run; the commands each sent are listed by name.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import redis

from scrapy_dedup_suite.embedded import EmbeddedRedis, server_binary

from .crawl import FRONTIER, SR_SCHEDULER, Monitor

ROOT = Path(__file__).resolve().parent.parent
ROWS = {"sr scheduler": SR_SCHEDULER, "frontier": FRONTIER}


def idle_calls(port: int, settings: dict, seconds: float, warmup: float) -> Counter[str]:
    """The commands one waiting worker sends in ``seconds``, after ``warmup``."""
    args = {"settings": {**settings, "REDIS_URL": f"redis://127.0.0.1:{port}/0"}}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.idle", "--child", json.dumps(args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        client = redis.Redis(port=port)
        while not any(c.get("name") == "bench-idle" for c in client.client_list()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        time.sleep(warmup)
        with Monitor(port) as counted:
            time.sleep(seconds)
        if proc.poll() is not None:
            raise RuntimeError(f"the worker stopped: {proc.stderr.read()[-2000:]}")
        return counted.names
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def child(args: dict) -> None:
    """One waiting worker, in this process, until stopped."""
    from scrapy.crawler import CrawlerProcess
    from scrapy_redis.spiders import RedisSpider

    class Waiting(RedisSpider):
        name = "idle"
        redis_key = "idle:start_urls"

    settings = {
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 0,  # (scrapy-redis: wait for start URLs forever)
        # (named, so that the bench knows it connected: its first command names it)
        "REDIS_PARAMS": {"client_name": "bench-idle"},
        **args["settings"],
    }
    process = CrawlerProcess(settings)
    process.crawl(Waiting)
    process.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--server", help="redis-server binary (default: found on PATH)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        child(json.loads(opts.child))
        return 0
    binary = opts.server or server_binary()
    rows = {}
    with EmbeddedRedis(binary=binary) as server:
        for name, settings in ROWS.items():
            redis.Redis(port=server.port).flushall()
            rows[name] = idle_calls(server.port, settings, opts.seconds, opts.warmup)
    base = sum(rows["sr scheduler"].values()) / opts.seconds
    print(f"an idle worker's commands per second, over {opts.seconds:.0f} s ({binary})")
    print(f"{'row':<14} {'calls/s':>8} {'ratio':>6}  commands")
    for name, names in rows.items():
        rate = sum(names.values()) / opts.seconds
        ratio = f"{rate / base:.2f}" if base else "-"
        listed = ", ".join(f"{cmd} {n}" for cmd, n in names.most_common())
        print(f"{name:<14} {rate:>8.2f} {ratio:>6}  {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
