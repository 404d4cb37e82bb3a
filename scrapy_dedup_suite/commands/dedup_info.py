"""``scrapy dedup-info``: what is stored for a spider, under every backend."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from scrapy.exceptions import UsageError
from scrapy.settings import Settings

from ..backends import BACKENDS, build_backend, dupefilter_key, get_backend_class
from ..backends.keys import as_str, failed_key, meta_key, read_hash, spider_key
from ..backends.reports import as_json
from ..core.config import human_bytes
from ..exceptions import DedupError
from ..frontier.figures import crawl_figures
from ..frontier.frontier_options import retry_wait
from ..frontier.queue import FrontierQueue
from ..operations.frontier_picture import History, picture
from ..server.connection import get_redis
from ..settings.table import read
from . import DedupCommand, spider_settings


class Command(DedupCommand):
    name = "dedup-info"
    doing = "for dedup-info"

    def syntax(self) -> str:
        return "--spider NAME [--json]"

    def short_desc(self) -> str:
        return "Show what is stored for a spider's dupefilter, under every backend"

    def long_desc(self) -> str:
        return (
            "For the operator who wonders why a crawl filtered everything or nothing: for "
            f"each backend ({', '.join(BACKENDS)}), at the key it would use for "
            "this spider, what Redis holds: keys, types, memory, fingerprints or fill, "
            "layers, buckets and their expiry, hash fields and the share expired; the "
            "parameters a filter was created with when they differ from the settings; the "
            "frontier scheduler's queue (where the crawl stands, requests waiting, leases "
            "per worker; with --watch, again every few seconds until Ctrl-C). Reads "
            "only. Exit codes: 0 done, 1 error, 2 usage, 6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="What to show")
        group.add_argument("--spider", metavar="NAME", help="the spider whose dupefilter to show")
        group.add_argument("--json", action="store_true", help="print it as JSON")
        group.add_argument(
            "--watch",
            type=float,
            metavar="SECONDS",
            help="show the frontier's queue and workers again every SECONDS (redrawn in a "
            "terminal; with --json one line a round) until Ctrl-C",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        self.no_arguments(args)
        if not opts.spider:
            raise UsageError("Say which spider: --spider NAME")
        if opts.watch is not None and not opts.watch > 0:
            raise UsageError("--watch must be a number of seconds > 0 (e.g. --watch 2)")
        # (no --key: it shows every backend's key for the spider)
        settings = spider_settings(self.settings, opts.spider, "")
        server = None
        with self.refusals(settings, lambda: server):
            # What a crawl refuses, dedup-info refuses: a misspelt DEDUP_BACKEND too.
            get_backend_class(read(settings, "DEDUP_BACKEND"))
            server = get_redis(settings)
            if opts.watch is not None:
                watch(settings, opts.spider, server, opts.watch, opts.json)
                return
            found = inspect(settings, opts.spider, server)
            if opts.json:
                print(json.dumps(found, default=as_json), flush=True)
            else:
                print(render(opts.spider, found), flush=True)


#: What a terminal takes to go to its top left corner and clear the screen.
CLEAR = "\x1b[H\x1b[2J"


def watch(settings: Settings, spider: str, server: Any, every: float, as_lines: bool) -> None:
    """The frontier's view every ``every`` seconds until Ctrl-C: redrawn where stdout is
    a terminal, else (and with ``as_lines``: JSON) one round after another. A round costs
    a call per queue shard, whatever the queue holds."""
    redraw = sys.stdout.isatty() and not as_lines
    queue = frontier_queue(settings, spider, server)
    history = History()
    try:
        while True:
            view = frontier_view(settings, spider, server, queue)
            history.add(time.monotonic(), view)
            if as_lines:
                text = json.dumps({"time": time.time(), **view})
            else:
                now = time.strftime("%Y-%m-%d %H:%M:%S")
                head = f"{now}, spider {spider!r}, every {every:g} s (Ctrl-C to stop)"
                first, *rest = _frontier_lines(view, drawn=True)
                text = "\n".join([head, first, *picture(view, history), *rest])
            print((CLEAR if redraw else "") + text, flush=True)
            time.sleep(every)
    except KeyboardInterrupt:
        return


def inspect(settings: Settings, spider: str, server: Any) -> dict[str, Any]:
    """Per backend: its key and what is stored there (``stored``: False if nothing)."""
    chosen = read(settings, "DEDUP_BACKEND")
    out: dict[str, Any] = {}
    for name in BACKENDS:
        key = dupefilter_key(settings, name, spider)
        entry: dict[str, Any] = {"key": key, "configured": name == chosen}
        one = settings.copy()
        one.set("DEDUP_BACKEND", name, priority="cmdline")
        backend = build_backend(one, spider, server=server, key=key)
        record = failed_key(key)
        kind = as_str(server.type(record))
        entry["failed_pages"] = int(server.hlen(record)) if kind == "hash" else 0
        if kind not in ("hash", "none"):
            entry["failed_record_problem"] = f"{record!r} holds a {kind}, not a hash of pages"
        try:
            stored = backend.verify()
        except DedupError as exc:
            # Stored with other parameters (or damaged): show what the record says.
            entry.update(
                stored=True,
                problem=str(exc),
                record=read_hash(server, meta_key(key)),
            )
            out[name] = entry
            continue
        entry["stored"] = stored
        if stored:
            info = backend.info()
            entry.update((name, value) for name, value in info.items() if name != "key")
            entry["contents"] = backend.contents(info)
            if backend.capabilities.report_fill:
                entry["filters"] = backend.filter_reports(info)
        out[name] = entry
    out[FRONTIER] = frontier_view(settings, spider, server)
    return out


#: dedup-info's entry for the frontier's queue (beside one per backend).
FRONTIER = "frontier"
#: The download slots listed, those with the most requests waiting.
BUSIEST_SLOTS = 10


def queue_key_of(settings: Settings, spider: str) -> str:
    return spider_key(read(settings, "SCHEDULER_QUEUE_KEY"), spider, "SCHEDULER_QUEUE_KEY")


def frontier_queue(settings: Settings, spider: str, server: Any) -> FrontierQueue:
    """The frontier scheduler's queue of ``spider``, beside the configured backend
    (built once: the hash backend reads which layout is stored)."""
    backend = build_backend(settings, spider, server=server)
    return FrontierQueue.for_backend(backend, queue_key_of(settings, spider))


def frontier_view(
    settings: Settings, spider: str, server: Any, queue: FrontierQueue | None = None
) -> dict[str, Any]:
    """The frontier scheduler's queue (``queue``, else :func:`frontier_queue`'s): its
    figures and status (:func:`~..frontier.figures.crawl_figures`), and scrapy-redis's
    own queue if one is there to take over."""
    queue = queue or frontier_queue(settings, spider, server)
    queue_key = queue_key_of(settings, spider)
    lease = read(settings, "FRONTIER_LEASE")
    view = crawl_figures(queue, lease, retry_wait(settings), slots=BUSIEST_SLOTS)
    kind = as_str(server.type(queue_key))
    view["scrapy_redis_queue"] = {
        "key": queue_key,
        "type": kind,
        "requests": int(server.zcard(queue_key) if kind == "zset" else server.llen(queue_key))
        if kind in ("zset", "list")
        else 0,
    }
    return view


def render(spider: str, found: dict[str, Any]) -> str:
    lines = [f"dupefilter of spider {spider!r}:"]
    for name, e in found.items():
        if name == FRONTIER:
            continue
        mark = " (DEDUP_BACKEND)" if e["configured"] else ""
        lines += _described(f"  {name}{mark} at {e['key']!r}: ", e)
        if "failed_record_problem" in e:
            lines.append(f"    {e['failed_record_problem']}: left as it is")
        if e.get("failed_pages"):
            lines.append(
                f"    {e['failed_pages']:,} page(s) recorded as failed for good "
                f"(scrapy dedup-forget --spider {spider} --failed)"
            )
    if FRONTIER in found:
        lines += _frontier_lines(found[FRONTIER])
    return "\n".join(lines)


def _frontier_lines(f: dict[str, Any], drawn: bool = False) -> list[str]:
    """The frontier's queue, in words; ``drawn``: without the status and the workers,
    which ``--watch``'s picture draws."""
    lines = [f"frontier scheduler's queue at {f['queue']!r} ({f['shards']} shard(s)):"]
    seen = f["workers_seen"]
    if not drawn:
        lines.append(f"  {f['status']}: {f['status_detail']}")
    if seen and not drawn:
        latest = sorted(seen.items(), key=lambda item: item[1])[:8]
        named = ", ".join(f"{w} {ago:,.0f} s ago" for w, ago in latest)
        more = f" and {len(seen) - 8:,} more" if len(seen) > 8 else ""
        lines.append(f"  workers' last calls (the last hour): {named}{more}")
    if not f["waiting"] and not f["leased"]:
        lines.append("  nothing waiting, nothing leased")
    else:
        per = f["bytes_per_request"]
        size = f", {per:,.0f} bytes per request held" if per else ""
        lines.append(
            f"  {f['waiting']:,} request(s) waiting, {human_bytes(f['memory_bytes'])}{size}"
        )
        workers = ", ".join(f"{w}: {n:,}" for w, n in sorted(f["leased_by"].items()))
        lines.append(f"  {f['leased']:,} leased" + (f" (by worker {workers})" if workers else ""))
        ends = f["oldest_lease_ends_in"]
        if ends is not None:
            when = f"ends in {ends:,.0f} s" if ends >= 0 else f"ended {-ends:,.0f} s ago"
            lines.append(f"  the oldest lease {when} (reclaimed by the next worker's call)")
    if f["reclaimed"]:
        lines.append(f"  {f['reclaimed']:,} lease(s) of dead workers reclaimed so far")
    lines += _slot_lines(f)
    if f["retry_later"]:
        due = f["next_retry_in"]
        when = f"in {due:,.0f} s" if due > 0 else "now (at the next worker's call)"
        lines.append(
            f"  {f['retry_later']:,} page(s) whose download failed wait to be tried again, "
            f"the first {when}"
        )
    if f["set_aside"]:
        lines.append(
            f"  {f['set_aside']:,} request(s) set aside at '...:frontier:aside': no worker "
            "could rebuild them (a callback or class gone?); the next worker's start puts "
            "them back in the queue"
        )
    if f["bad"]:
        lines.append(
            f"  {f['bad']:,} member(s) of the frontier's keys were not the frontier's and "
            "are kept at '...:frontier:bad' as found: read them, then delete that key"
        )
    old = f["scrapy_redis_queue"]
    if old["requests"]:
        lines.append(
            f"  scrapy-redis's queue {old['key']!r} holds {old['requests']:,} request(s) "
            "(the frontier scheduler takes them over when it opens)"
        )
    return lines


def _slot_lines(f: dict[str, Any]) -> list[str]:
    """The download slots with the most requests waiting (FRONTIER_POLITENESS)."""
    busiest = f.get("busiest_slots") or []
    if not busiest:
        return []
    lines = [f"  {f['slots']:,} download slot(s); the most waiting:"]
    for s in busiest:
        state = f"next in {s['next_in']:,.1f} s" if s["next_in"] else "ready"
        if s["blocked_for"] is not None:
            state = f"blocked for {s['blocked_for']:,.0f} s more (refusal {s['refusals']})"
        lines.append(
            f"    {s['name']}: {s['waiting']:,} waiting, {s['leased']}/{s['concurrency']} "
            f"leased, delay {s['delay']:g} s, {state}"
        )
    return lines


def _described(head: str, e: dict[str, Any]) -> list[str]:
    """What one backend's key holds, a line and its details."""
    if not e["stored"]:
        return [head + "nothing stored"]
    if "problem" in e:
        return [head + f"stored with other parameters: {e['record']}", f"    {e['problem']}"]
    memory = human_bytes(e.get("memory_bytes", 0))
    return [
        head + f"{e['keys']} key(s), {memory}",
        *(f"    {line}" for part in e["contents"] for line in part.describe()),
        *(f"    {fill.describe()}" for fill in e.get("filters", [])),
    ]
