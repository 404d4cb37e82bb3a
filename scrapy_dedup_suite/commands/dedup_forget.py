"""``scrapy dedup-forget``: make pages new again, so that the next crawl downloads them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import UsageError
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy_redis.connection import get_redis_from_settings

from ..backends.forget import cannot_forget
from ..backends.keys import as_str, chunks
from ..core.fingerprint import get_fingerprinter
from ..dedup.dupefilter import RFPDupeFilter
from ..exceptions import DedupConfigError
from ..settings.table import read
from . import DedupCommand, add_target_options, target_backend

#: Lines of a bad URL list quoted in the error.
QUOTED = 3


class Offline:
    """What the dupefilter reads of a crawler, outside a crawl: the settings and the
    project's request fingerprinter (REQUEST_FINGERPRINTER_CLASS)."""

    stats = None

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        cls = load_object(settings["REQUEST_FINGERPRINTER_CLASS"])
        self.request_fingerprinter = build_from_crawler(cls, self)  # type: ignore[call-overload]


def read_urls(args: list[str], path: str | None) -> list[str]:
    """The URLs given as arguments and in ``path`` ("-": standard input; blank lines and
    lines starting with # skipped); a UsageError naming the lines that are not
    http(s) URLs, before anything is forgotten."""
    lines: list[tuple[str, str]] = [(f"argument {n}", url) for n, url in enumerate(args, 1)]
    if path is not None:
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                with open(path, encoding="utf-8") as file:
                    text = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"Cannot read the URL list {path!r}: {exc}") from None
        where = "standard input" if path == "-" else path
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                lines.append((f"{where}:{n}", line))
    bad = [(place, url) for place, url in lines if not _is_url(url)]
    if bad:
        quoted = "; ".join(f"{place}: {url[:80]!r}" for place, url in bad[:QUOTED])
        more = f" and {len(bad) - QUOTED} more" if len(bad) > QUOTED else ""
        raise UsageError(
            f"{len(bad)} line(s) are not http(s) URLs ({quoted}{more}); nothing was forgotten: "
            "give one absolute URL per line, e.g. https://example.com/page"
        )
    if not lines:
        raise UsageError(
            "Give the URLs to forget: as arguments, or --file FILE (- for standard input)"
        )
    return [url for _, url in lines]


def push_start_urls(server: Any, key: str, urls: list[str]) -> None:
    """``urls`` as scrapy-redis start-URL messages (``{"url": ...}``, which a RedisSpider
    requests with dont_filter) into ``key``: a list, or a set (REDIS_START_URLS_AS_SET);
    a key of another type is an error, and left as it is."""
    kind = as_str(server.type(key))
    if kind not in ("none", "list", "set"):
        raise DedupConfigError(
            f"--push {key!r} holds a {kind}, not a scrapy-redis start-URLs list or set: "
            "give the key the spider reads (REDIS_START_URLS_KEY, e.g. myspider:start_urls)"
        )
    for part in chunks(json.dumps({"url": url}) for url in urls):
        if kind == "set":
            server.sadd(key, *part)
        else:
            server.lpush(key, *part)


def _is_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc) and " " not in text


class Command(DedupCommand):
    name = "dedup-forget"
    doing = "to forget"

    def syntax(self) -> str:
        return (
            "--spider NAME [--key KEY] [URL ...] [--file FILE | --file -] [--failed [--push KEY]]"
        )

    def short_desc(self) -> str:
        return "Forget URLs in a spider's dupefilter, so that its next crawl downloads them"

    def long_desc(self) -> str:
        return (
            "Removes the fingerprints of the URLs given (as the crawl makes them: "
            "DEDUP_FINGERPRINTER, the project's REQUEST_FINGERPRINTER_CLASS, --method) from "
            "an exact dupefilter (set, compact, hash): a page that failed for good, say. "
            "A Bloom filter cannot remove one: the command says what to do instead. Every "
            "line is checked before anything is removed. --failed: the pages recorded as "
            "failed for good (by a run killed before its close, say) are forgotten, or, "
            "for a Bloom filter, listed; --push KEY hands them to a scrapy-redis spider's "
            "start URLs (requested with dont_filter). Exit codes: 0 done, 1 error, 2 usage, "
            "6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_target_options(parser)
        group = parser.add_argument_group(title="Which pages")
        group.add_argument(
            "--file",
            metavar="FILE",
            help="URLs one per line ('-': standard input; blank lines and # comments skipped)",
        )
        group.add_argument(
            "--method", default="GET", help="the requests' method, as the crawl made them"
        )
        group.add_argument(
            "--failed",
            action="store_true",
            help="the pages recorded as failed for good instead of URLs: forgotten (exact "
            "backends) or printed one a line (Bloom filters)",
        )
        group.add_argument(
            "--push",
            metavar="KEY",
            help='with --failed: push them as {"url": ...} to this scrapy-redis start-URLs '
            "key on REDIS_URL (a list, or the set of REDIS_START_URLS_AS_SET), e.g. "
            "myspider:start_urls, and drop them from the record",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if opts.failed and (args or opts.file is not None):
            raise UsageError("Give URLs or --failed, not both")
        if opts.push is not None and not opts.failed:
            raise UsageError("--push KEY goes with --failed: it hands over the failed pages")
        backend = None
        with self.refusals(self.settings, lambda: backend.server if backend is not None else None):
            settings, backend = target_backend(self.settings, opts)  # (a spider not found)
            urls = [] if opts.failed else read_urls(args, opts.file)  # (checked, all of it)
            if opts.failed:
                said = self._failed(settings, backend, opts.push)
            else:
                said = self._forget(settings, backend, urls, opts.method.upper())
            if said:
                print(f"{self.name}: {said}", flush=True)

    def _forget(self, settings: Settings, backend: Any, urls: list[str], method: str) -> str:
        """The URLs' pages forgotten: what to say."""
        if not backend.capabilities.forget:
            raise DedupConfigError(f"{cannot_forget(backend)}; nothing was forgotten")
        if not backend.verify():
            raise DedupConfigError(
                f"the {backend.name} filter at {backend.key!r} holds nothing (another spider "
                "or key? scrapy dedup-info --spider NAME shows what is stored): nothing was "
                "forgotten"
            )
        df = self._dupefilter(settings, backend)
        fps = list(dict.fromkeys(df.fingerprint_of(Request(url, method=method)) for url in urls))
        forgotten = df.forgetting.forget_fingerprints(fps)
        unique = len(fps)
        return (
            f"forgot {forgotten} of {unique} page(s) at {backend.key!r} ({backend.name}); "
            f"{unique - forgotten} {'was' if unique - forgotten == 1 else 'were'} not recorded"
        )

    def _failed(self, settings: Settings, backend: Any, push: str | None) -> str:
        """--failed: the recorded failed pages forgotten (exact backends) or listed on
        standard output (a Bloom filter's); with ``push``, handed to a spider's start URLs
        and dropped from the record. What to say."""
        df = self._dupefilter(settings, backend)
        forgetting = df.forgetting
        forgets = backend.capabilities.forget
        pages = forgetting.forget_failed() if forgets else forgetting.recorded()
        where = f"recorded as failed for good at {backend.key!r} ({backend.name})"
        if push is not None:
            push_start_urls(get_redis_from_settings(settings), push, list(pages.values()))
            if not forgets:
                forgetting.drop_records(list(pages))
            done = "forgot and pushed" if forgets else "pushed"
            return f"{done} {len(pages)} page(s) {where} to {push!r}"
        if forgets:
            return f"forgot {len(pages)} page(s) {where}"
        for url in pages.values():
            print(url)
        print(
            f"dedup-forget: {len(pages)} page(s) {where}. {cannot_forget(backend)}", file=sys.stderr
        )
        return ""

    @staticmethod
    def _dupefilter(settings: Settings, backend: Any) -> RFPDupeFilter:
        """The crawl's dupefilter class (DUPEFILTER_CLASS, if it is this package's: a
        subclass's request_fingerprint() counts) with the crawl's fingerprints."""
        cls = load_object(settings["DUPEFILTER_CLASS"])
        if not (isinstance(cls, type) and issubclass(cls, RFPDupeFilter)):
            cls = RFPDupeFilter
        fingerprint = get_fingerprinter(
            read(settings, "DEDUP_FINGERPRINTER"),
            Offline(settings),
            uniform=backend.capabilities.probabilistic,
        )
        return cls(backend, fingerprint=fingerprint, settings=settings)
