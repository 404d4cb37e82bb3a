"""The documentation (docs/) names everything a user meets: every stat the package
counts, every command it installs, every setting (the settings tables are made from the
one table: tests/test_settings_table.py), and README links only pages that exist. The
Sphinx build itself, warnings as errors, is ``./dev docs`` (CI runs it). No Redis."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from scrapy.utils.misc import load_object

from bench import figures, run

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))


def source_text() -> str:
    paths = list((ROOT / "scrapy_dedup_suite").rglob("*.py"))
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def test_every_stat_the_package_counts_is_in_the_stats_page():
    # Literal names (stats.inc_value("dedup/added"), the janitor's, the batch path's...).
    counted = set(re.findall(r'"((?:dedup|bloomfilter|frontier)/[a-z_/]+[a-z_])"', source_text()))
    assert "dedup/added" in counted and "bloomfilter/filtered" in counted, counted
    stats = (DOCS / "stats.md").read_text(encoding="utf-8")
    missing = sorted(name for name in counted if f"`{name}`" not in stats)
    assert not missing, f"counted by the package, not in docs/stats.md: {missing}"


def test_every_command_is_documented():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options.entry_points"]["scrapy.commands"].strip().splitlines()
    commands = [line.split("=")[0].strip() for line in lines if line.strip()]
    assert len(commands) >= 4
    text = docs_text()
    missing = [c for c in commands if f"scrapy {c} " not in text]
    assert not missing, f"installed, not documented in docs/: {missing}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"scrapy {c} " in readme for c in commands)


def test_every_setting_is_in_the_settings_reference():
    from scrapy_dedup_suite.settings.table import TABLE

    text = docs_text()
    missing = [s.name for s in TABLE if f"`{s.name}`" not in text]
    assert not missing, missing


def test_readme_links_pages_that_exist_and_every_page_is_linked():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[^)#]+)\)", readme))
    assert linked, "README links no page of the documentation"
    assert all((ROOT / path).is_file() for path in linked), linked
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages == linked, f"pages README does not link: {sorted(pages - linked)}"


def test_the_settings_by_hand_are_what_the_addon_sets():
    """getting-started's "Without the add-on" block names the classes and orders the
    add-on uses, so that a project configured by hand gets what the add-on gives."""
    from scrapy_dedup_suite import addon
    from scrapy_dedup_suite.dedup import failed
    from scrapy_dedup_suite.janitor import JanitorExtension
    from scrapy_dedup_suite.middleware import BatchDedupMiddleware
    from scrapy_dedup_suite.summary import DedupSummary

    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    section = page.split("## Without the add-on", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python", 1)[1].split("```", 1)[0]
    settings: dict = {}
    exec(block, {}, settings)

    def loaded(components: dict) -> dict:
        """The classes a component dict names (by their public paths), with orders."""
        return {load_object(path): order for path, order in components.items()}

    assert settings["DUPEFILTER_CLASS"] == addon.DUPEFILTER
    assert loaded(settings["SPIDER_MIDDLEWARES"]) == {BatchDedupMiddleware: addon.MIDDLEWARE_ORDER}
    assert loaded(settings["DOWNLOADER_MIDDLEWARES"]) == {
        failed.FailedPagesMiddleware: failed.ORDER
    }
    assert loaded(settings["EXTENSIONS"]) == {
        DedupSummary: addon.SUMMARY_ORDER,
        JanitorExtension: addon.JANITOR_ORDER,
    }
    # Written as a project writes them: the public paths, not the folders they live in.
    for name in ("SPIDER_MIDDLEWARES", "DOWNLOADER_MIDDLEWARES", "EXTENSIONS"):
        assert all(path.count(".") == 2 for path in settings[name]), settings[name]
    # ... and the README and the front page send a user without the add-on there.
    for front in (ROOT / "README.md", DOCS / "index.md"):
        assert "getting-started.md#without-the-add-on" in front.read_text(encoding="utf-8")


PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name != "changelog.md")]


def test_every_measured_figure_in_the_pages_is_the_recorded_one():
    """One place for each figure: bench/figures.json (``python -m bench.memory --record``);
    ``python -m bench.figures --write README.md docs/*.md`` puts them into the pages."""
    data = figures.load()
    wrong = {
        page.name: figures.differences(page.read_text(encoding="utf-8"), data) for page in PAGES
    }
    assert not {name: lines for name, lines in wrong.items() if lines}


def test_a_page_that_disagrees_with_the_record_is_found():
    data = figures.load()
    recorded = figures.figure(data, "compact")
    page = "compact costs 99.9 B<!-- figure: compact -->\n"
    assert figures.differences(page, data) == [
        "line 1: 'compact costs 99.9 B<!-- figure: compact -->' where bench/figures.json "
        f"says 'compact costs {recorded}<!-- figure: compact -->'"
    ]
    table = "<!-- figures: memory-sizes -->\n| stale |\n<!-- /figures -->\n"
    assert figures.differences(table, data)


def test_every_memory_figure_in_the_readme_comes_from_the_record():
    """The README's bytes per fingerprint are each in a table made from the record or
    marked with the figure they quote: none is typed in by hand."""
    text = figures.BLOCK.sub("", (ROOT / "README.md").read_text(encoding="utf-8"))
    unmarked = [
        line.strip()
        for line in text.splitlines()
        for m in re.finditer(r"\d[\d,]*(?:\.\d+)? B\b(?!\**<!-- figure: )", line)
    ]
    assert not unmarked


def test_lists_of_backends_name_every_one():
    from scrapy_dedup_suite.backends import BACKENDS, MIGRATION_TARGETS
    from scrapy_dedup_suite.commands.dedup_info import Command

    help_text = Command().long_desc()
    assert [name for name in BACKENDS if name not in help_text] == []
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    targets = re.search(r"`migrate-set-to-bloom --to` takes (.*?) \(default", readme)
    assert targets is not None
    assert re.findall(r"`([\w-]+)`", targets.group(1)) == list(MIGRATION_TARGETS)
    bench_page = " ".join((DOCS / "benchmarks.md").read_text(encoding="utf-8").split())
    rows = re.search(
        r"our backends that need no server module \((.*?): `bench.run.OURS`\)", bench_page
    )
    assert rows is not None
    assert tuple(re.findall(r"`([\w-]+)`", rows.group(1))) == run.OURS


def test_every_name_the_api_reference_documents_is_importable():
    """docs/api.md documents the dotted paths projects write in their settings; autodoc
    imports each (an empty genindex was what the docs had before): each must load."""

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    names = re.findall(r"\.\. auto(?:class|module):: ([\w.]+)", text)
    assert len(names) >= 14
    for name in names:
        if "." in name and not name.endswith("exceptions"):
            assert load_object(name) is not None, name
    for path in ("scrapy_dedup_suite.Addon", "scrapy_dedup_suite.dupefilter.RFPDupeFilter"):
        assert path in names


def test_the_public_names_a_project_writes_stay_where_they_were():
    """What settings and imports name (issue 52: the house may move, these stay): the
    dupefilter, the middlewares, the scheduler, the add-on, each backend class the docs
    name, and each command's entry point."""

    from scrapy_dedup_suite.backends import BACKENDS

    paths = [
        "scrapy_dedup_suite.dupefilter.RFPDupeFilter",
        "scrapy_dedup_suite.middleware.BatchDedupMiddleware",
        "scrapy_dedup_suite.failed.FailedPagesMiddleware",
        "scrapy_dedup_suite.frontier.scheduler.Scheduler",
        "scrapy_dedup_suite.Addon",
        *(f"{cls.__module__}.{cls.__qualname__}" for cls in BACKENDS.values()),
    ]
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    for line in config["options.entry_points"]["scrapy.commands"].strip().splitlines():
        paths.append(line.split("=", 1)[1].strip().replace(":", "."))
    for path in paths:
        assert isinstance(load_object(path), type), path
    names = (DOCS / "backends.md").read_text(encoding="utf-8") + docs_text()
    documented = [cls.__name__ for cls in BACKENDS.values() if cls.__name__ in names]
    assert documented, "the docs name no backend class"
