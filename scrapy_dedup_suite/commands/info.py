"""``scrapy dedup-info``: what is stored for a spider, under every backend."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.settings import Settings

from ..backends import BACKENDS, build_backend, dupefilter_key, get_backend_class
from ..backends.base import as_str
from ..backends.keys import meta_key
from ..config import human_bytes
from ..connection import UNREACHABLE, get_redis
from ..exceptions import DedupError
from ..reports import FilterFill
from ..settings_table import read
from . import say_unreachable, spider_settings

#: Fields of a hash shard read per shard to estimate how many have expired.
SAMPLE = 1000


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return "--spider NAME [--json]"

    def short_desc(self) -> str:
        return "Show what is stored for a spider's dupefilter, under every backend"

    def long_desc(self) -> str:
        return (
            "For the operator who wonders why a crawl filtered everything or nothing: for "
            "each backend (set, hash, bloom, windowed-bloom), at the key it would use for "
            "this spider, what Redis holds: keys, types, memory, fingerprints or fill, "
            "layers, buckets and their expiry, hash fields and the share expired; the "
            "parameters a filter was created with when they differ from the settings. Reads "
            "only. Exit codes: 0 done, 1 error, 2 usage, 6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="What to show")
        group.add_argument("--spider", metavar="NAME", help="the spider whose dupefilter to show")
        group.add_argument("--json", action="store_true", help="print it as JSON")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if args:
            raise UsageError(f"unexpected arguments: {' '.join(args)}")
        if not opts.spider:
            raise UsageError("Say which spider: --spider NAME")
        settings = spider_settings(self.settings, opts.spider, "or name the key with --key KEY")
        try:
            # What a crawl refuses, dedup-info refuses: a misspelt DEDUP_BACKEND too.
            get_backend_class(read(settings, "DEDUP_BACKEND"))
            server = get_redis(settings)
        except DedupError as exc:
            print(f"dedup-info: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        try:
            found = inspect(settings, opts.spider, server)
        except UNREACHABLE as exc:
            say_unreachable(self, "dedup-info", server, exc, settings, "for dedup-info")
            return
        except DedupError as exc:
            print(f"dedup-info: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        if opts.json:
            print(json.dumps(found, default=as_json), flush=True)
        else:
            print(render(opts.spider, found), flush=True)


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
        try:
            stored = backend.verify()
        except DedupError as exc:
            # Stored with other parameters (or damaged): show what the record says.
            record = server.hgetall(meta_key(key))
            entry.update(
                stored=True,
                problem=str(exc),
                record={as_str(k): as_str(v) for k, v in record.items()},
            )
            out[name] = entry
            continue
        entry["stored"] = stored
        if stored:
            info = backend.info()
            info.pop("key", None)
            entry.update(info)
            if backend.capabilities.report_fill:
                entry["filters"] = backend.filter_reports()
            purged = backend.purge_keys() if backend.capabilities.purge_expired else []
            if purged:  # (none where the server expires a hash filter's fields)
                entry.update(expired_share(server, purged))
        out[name] = entry
    return out


def as_json(value: Any) -> Any:
    """A typed report (FilterFill) as its fields; anything else as text."""
    return value.as_dict() if isinstance(value, FilterFill) else str(value)


def expired_share(server: Any, shards: list[str]) -> dict[str, Any]:
    """Of up to SAMPLE random fields per shard (each holds its own expiry), how many
    have expired and when the last of them expires (server time)."""
    seconds, micros = server.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    expiries = []
    for shard in shards:
        flat = server.hrandfield(shard, SAMPLE, withvalues=True) or []
        expiries += [int(as_str(v)) for v in flat[1::2] if as_str(v).isdigit()]
    found: dict[str, Any] = {
        "fields_sampled": len(expiries),
        "expired_in_sample": sum(1 for ms in expiries if ms <= now_ms),
    }
    if expiries:
        found["last_expiry_in_sample_s"] = max(0.0, (max(expiries) - now_ms) / 1000)
    return found


def render(spider: str, found: dict[str, Any]) -> str:
    lines = [f"dupefilter of spider {spider!r}:"]
    for name, e in found.items():
        mark = " (DEDUP_BACKEND)" if e["configured"] else ""
        head = f"  {name}{mark} at {e['key']!r}: "
        if not e["stored"]:
            lines.append(head + "nothing stored")
            continue
        if "problem" in e:
            lines.append(head + f"stored with other parameters: {e['record']}")
            lines.append(f"    {e['problem']}")
            continue
        memory = human_bytes(e.get("memory_bytes", 0))
        lines.append(head + f"{e['keys']} key(s), {memory}")
        if "fingerprints" in e:
            lines.append(f"    {e['fingerprints']:,} fingerprints (exact)")
        if "fields" in e:
            freed = (
                "the server frees expired ones itself (hash-field expiry)"
                if e.get("expired_by") == "server"
                else "the janitor purges expired ones"
            )
            lines.append(f"    {e['fields']:,} fields in {e['shards']} shard(s) ({freed})")
            if e.get("fields_sampled"):
                lines.append(
                    f"    of {e['fields_sampled']:,} sampled, {e['expired_in_sample']:,} "
                    f"expired; the last expires in {e['last_expiry_in_sample_s']:,.0f} s"
                )
            lines.append(
                f"    each field keeps the expiry it was written with; new ones get "
                f"{e['expire']:g} s (DEDUP_EXPIRE as configured now, or meta['dedup_expire'])"
            )
        if "capacity" in e:
            lines.append(
                f"    capacity {e['capacity']:,} at error rate {e['error_rate']:.3g}, "
                f"{e['blocks']} block(s)"
            )
        if "sub_filters" in e:
            growth = f"expansion {e['expansion']}" if e["expansion"] else "NONSCALING"
            lines.append(
                f"    the server's own Bloom filters (BF.*), {growth}: up to "
                f"{e['sub_filters']} sub-filter(s) per block, room for {e['capacity_now']:,} items"
            )
        if "capacity_per_bucket" in e:
            lines.append(
                f"    {e['window_count']} buckets of one {e['window']} ({e['window_tz']}), "
                f"{e['capacity_per_bucket']:,} fingerprints each at {e['error_rate']:.3g}"
            )
        lines += [f"    {fill.describe()}" for fill in e.get("filters", [])]
    return "\n".join(lines)
