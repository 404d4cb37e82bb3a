"""``scrapy frontier-handback``: the way back from the frontier scheduler to
scrapy-redis's: its requests move into scrapy-redis's priority queue."""

from __future__ import annotations

import argparse

from scrapy.exceptions import UsageError

from ..backends import build_backend
from ..backends.keys import spider_key
from ..frontier.frontier_options import FrontierOptions
from ..frontier.queue import FrontierQueue
from ..frontier.takeover import Handback, hand_back
from ..settings.table import read
from . import DedupCommand, spider_settings


class Command(DedupCommand):
    name = "frontier-handback"
    doing = "to hand back"

    def syntax(self) -> str:
        return "--spider NAME [--dry-run]"

    def short_desc(self) -> str:
        return "Move the frontier scheduler's requests into scrapy-redis's queue"

    def long_desc(self) -> str:
        return (
            "The way back from SCHEDULER = scrapy_dedup_suite.frontier.scheduler.Scheduler "
            "to scrapy_redis.scheduler.Scheduler: with every worker stopped, the requests "
            "waiting in the frontier (and those leased by workers that are gone, once their "
            "lease ended) move into scrapy-redis's priority queue at SCHEDULER_QUEUE_KEY, "
            "pickled as its scheduler pickles them (or with SCHEDULER_SERIALIZER). Nothing "
            "moves while a lease is held by a worker that may be alive. The fingerprints "
            "stay where they are: scrapy-redis's dupefilter reads the set backend's. Exit "
            "codes: 0 done, 1 error or leases held, 2 usage, 6 Redis unreachable."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="Which crawl")
        group.add_argument("--spider", metavar="NAME", help="the spider whose queue to move")
        group.add_argument(
            "--dry-run", action="store_true", help="say what would move, move nothing"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        self.no_arguments(args)
        if not opts.spider:
            raise UsageError("Say which spider: --spider NAME")
        settings = spider_settings(self.settings, opts.spider, "")
        backend = None
        with self.refusals(
            settings, lambda: backend.server if backend is not None else None, (ValueError,)
        ):
            backend = build_backend(settings, opts.spider)
            target = spider_key(read(settings, key := "SCHEDULER_QUEUE_KEY"), opts.spider, key)
            queue = FrontierQueue.for_backend(backend, target)
            chosen = FrontierOptions.from_settings(settings)
            done = hand_back(queue, target, chosen.codec(), chosen.serializer, opts.dry_run)
            self._say(done, target, opts.dry_run)

    def _say(self, done: Handback, target: str, dry_run: bool) -> None:
        if dry_run:
            held = f"; {done.held:,} lease(s) held now (stop every worker first)"
            also = [f"{done.set_aside:,} set aside"] if done.set_aside else []
            also += [f"{done.later:,} to try again later"] if done.later else []
            more = f" (and {', '.join(also)})" if also else ""
            print(
                f"{done.waiting:,} request(s) waiting{more} would move into {target!r}"
                + (held if done.held else "")
            )
            return
        if done.held:
            self.fail(
                f"{done.held:,} lease(s) are held by workers that may be alive; nothing was "
                "moved. Stop every worker (or wait FRONTIER_LEASE after the last one died) "
                "and run it again."
            )
            return
        print(
            f"moved {done.moved:,} request(s) into scrapy-redis's queue {target!r} "
            f"({done.reclaimed:,} of them had been leased by workers that are gone)"
        )
        if done.later:
            print(f"{done.later:,} of them had failed and waited to be tried again later")
        if done.set_aside:
            print(
                f"{done.set_aside:,} of them had been set aside: no worker could rebuild "
                "them (a callback or class gone?); scrapy-redis's scheduler cannot either "
                "until the code that made them is deployed again"
            )
