"""Scrapy commands of scrapy_dedup_suite (registered under ``scrapy.commands``), one
module each named as the command, on the shared base :class:`DedupCommand`: the spider
or key resolved as a crawl resolves it, and every refusal one line with its exit code."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from ..backends import DedupBackend, build_backend, dupefilter_key
from ..exceptions import DedupError
from ..operations.migrations.errors import MigrationError
from ..operations.migrations.migration_report import Progress
from ..server.connection import (
    CONNECT_FAILURES,
    get_redis,
    is_connect_failure,
    redis_source,
    unreachable,
)
from ..server.privileges import permission_error
from ..settings.table import read


class DedupCommand(ScrapyCommand):
    """What the package's commands share: no project or crawler needed, and each
    refusal one line on stderr, starting with the command's name, that ends it with its
    exit code: 1 an error (a migration's own: 3 source, 4 target, 5 verification), 2 a
    usage error (Scrapy's), 6 Redis unreachable."""

    requires_project = False
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}
    #: The command's name, which starts each line it says.
    name: ClassVar[str] = ""
    #: What it reaches Redis for, as its line about an unreachable server says it.
    doing: ClassVar[str] = ""

    def no_arguments(self, args: list[str]) -> None:
        if args:
            raise UsageError(f"unexpected arguments: {' '.join(args)}")

    def at_least_one(self, opts: argparse.Namespace, *names: str) -> None:
        """Options that count something (``--batch``...): whole numbers >= 1."""
        for name in names:
            if getattr(opts, name) < 1:
                raise UsageError(f"--{name} must be a whole number >= 1")

    def fail(self, message: object, code: int = 1) -> None:
        """One line on stderr, and the exit code ``code``."""
        print(f"{self.name}: {message}", file=sys.stderr)
        self.exitcode = code

    @contextmanager
    def refusals(
        self,
        settings: Settings,
        client: Callable[[], Any] = lambda: None,
        also: tuple[type[Exception], ...] = (),
    ) -> Iterator[None]:
        """The command's work, run in the block: Redis unreachable, or a command its
        user may not run, is :meth:`say_unreachable`'s line (``client()``: the client it
        used, if one was built yet); the package's refusals (and ``also``) are their
        line, exit code 1 or a migration's own. The block stops there; the command
        returns after it (``self.exitcode`` says how it ended)."""
        refused: tuple[type[Exception], ...] = (DedupError, *also)
        try:
            yield
        except CONNECT_FAILURES as exc:
            self.say_unreachable(client(), exc, settings)
        except MigrationError as exc:
            self.fail(exc, exc.exit_code)
        except refused as exc:
            self.fail(exc)

    def say_unreachable(self, client: Any, exc: BaseException, settings: Settings) -> None:
        """Redis could not be reached: one line, exit code 6 (a command the Redis user
        may not run: its line, exit 1). ``client``: None when building the backend
        failed (the hash backend reads which layout is stored): the settings' client is
        named (built, not connected). A failure that is not about connecting (a
        command's own error reply) is raised again."""
        refused = permission_error(exc, client)
        if refused is not None:
            self.fail(refused)
            return
        if not is_connect_failure(exc):
            raise exc
        if client is None:
            client = get_redis(settings)
        error = unreachable(client, exc, redis_source(settings), self.doing)
        self.fail(error, error.exit_code)


def add_target_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(title="Which dupefilter")
    group.add_argument(
        "--spider",
        metavar="NAME",
        help="the spider whose dupefilter to use: its key comes from SCHEDULER_DUPEFILTER_KEY "
        "(or the backend's default) and, inside a project, its custom_settings apply",
    )
    group.add_argument(
        "--key",
        metavar="KEY",
        help="the dupefilter's base Redis key itself, instead of deriving it from --spider",
    )


def spider_settings(
    settings: Settings, spider: str | None, instead: str = "or give the key with --key"
) -> Settings:
    """The project's settings with the spider's ``custom_settings`` applied, as in a crawl.

    ``instead``: what to do rather than name a spider (each command has its options;
    "" for a command that has none)."""
    if not spider or not settings.getlist("SPIDER_MODULES"):
        return settings
    loader = spider_loader(settings)
    try:
        spidercls = loader.load(spider)
    except KeyError:
        names = ", ".join(sorted(loader.list())) or "none"
        raise UsageError(
            f"Spider {spider!r} not found in this project (spiders: {names}); "
            f"give its name as the crawl uses it" + (f", {instead}" if instead else "")
        ) from None
    copy = settings.copy()
    spidercls.update_settings(copy)
    return copy


def target_backend(settings: Settings, opts: argparse.Namespace) -> tuple[Settings, DedupBackend]:
    if not opts.spider and not opts.key:
        raise UsageError("Say which dupefilter: --spider NAME, or --key KEY")
    settings = spider_settings(settings, opts.spider)
    return settings, build_backend(settings, opts.spider or "", key=opts.key)


def settings_value(settings: Settings, name: str, option: Any) -> Any:
    """A command-line option when given, else the setting (else its default)."""
    return option if option is not None else read(settings, name)


def spider_loader(settings: Settings) -> Any:
    """The project's spider loader (Scrapy's ``get_spider_loader``, which Scrapy < 2.14
    lacks: there, built from SPIDER_LOADER_CLASS as Scrapy built it)."""
    try:
        from scrapy.spiderloader import get_spider_loader
    except ImportError:  # Scrapy 2.13
        cls = load_object(settings["SPIDER_LOADER_CLASS"])
        return cls.from_settings(settings.frozencopy())
    return get_spider_loader(settings)


class ConversionCommand(DedupCommand):
    """What both conversions of a filter in place share (``convert-hash-layout``,
    ``convert-to-growing``): which filter, how (``--dry-run``, ``--batch``, ``--verify``,
    ``--sample``, ``--delete-source``, ``--json``), and a run that prints the plan or the
    report. A command says its backend and builds its conversion (:meth:`conversion`)."""

    doing = "for the conversion"
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "INFO"}
    #: The backend whose filter it converts (its default key).
    backend: ClassVar[str] = ""
    #: What ``--delete-source`` deletes, as its help says it.
    deletes: ClassVar[str] = ""
    #: What ``--verify`` checks, as its help says it.
    verifies: ClassVar[str] = ""
    #: The options' group "How" (a command adds its own to it), and the options given.
    how: argparse._ArgumentGroup
    opts: argparse.Namespace

    def syntax(self) -> str:
        return "(--spider NAME | --key KEY) [options]"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_target_options(parser)
        group = self.how = parser.add_argument_group(title="How")
        group.add_argument(
            "--dry-run", action="store_true", help="report what it would do; write nothing"
        )
        group.add_argument(
            "--batch", type=int, default=1000, metavar="N", help="fields per HSCAN call"
        )
        group.add_argument(
            "--verify",
            choices=("sample", "all"),
            default="sample",
            help=f"check a random sample of {self.verifies} (default) or all of them",
        )
        group.add_argument("--sample", type=int, default=10_000, metavar="N", help="sample size")
        group.add_argument(
            "--delete-source",
            action="store_true",
            help=f"after verification passes, delete {self.deletes}",
        )
        group.add_argument("--json", action="store_true", help="print the report as JSON")

    def backend_for(self, settings: Settings) -> str:
        """The backend whose filter ``--spider`` names (its default key)."""
        return self.backend

    def conversion(self, server: Any, key: str, settings: Settings, **how: Any) -> Any:
        """The conversion of the filter at ``key`` (``how``: batch, verify, sample,
        progress), built from ``settings`` and the command's own options."""
        raise NotImplementedError

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        self.no_arguments(args)
        if not opts.spider and not opts.key:
            raise UsageError("Say which filter: --spider NAME, or --key KEY")
        self.at_least_one(opts, "batch", "sample")
        self.opts = opts
        settings = spider_settings(self.settings, opts.spider)
        server = None
        with self.refusals(settings, lambda: server):
            key = opts.key or dupefilter_key(settings, self.backend_for(settings), opts.spider)
            server = get_redis(settings)
            conversion = self.conversion(
                server,
                key,
                settings,
                batch=opts.batch,
                verify=opts.verify,
                sample=opts.sample,
                progress=Progress(name=self.name),
            )
            if opts.dry_run:
                plan = conversion.plan()
                self._out(opts, {"dry_run": True, "plan": plan.__dict__}, plan.describe())
                return
            report = conversion.run(delete_source=opts.delete_source)
            self._out(opts, report.as_dict(), report.summary())

    def _out(self, opts: argparse.Namespace, data: dict[str, Any], text: str) -> None:
        print(json.dumps(data, default=str) if opts.json else text, flush=True)
