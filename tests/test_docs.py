"""The documentation (docs/) names everything a user meets: every stat the package
counts, every command it installs, every setting (the settings tables are made from the
one table: tests/test_settings_table.py), and README links only pages that exist. The
Sphinx build itself, warnings as errors, is ``./dev docs`` (CI runs it). No Redis."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))


def source_text() -> str:
    paths = [*(ROOT / "scrapy_dedup_suite").rglob("*.py"), *(ROOT / "migrations").rglob("*.py")]
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def test_every_stat_the_package_counts_is_in_the_stats_page():
    # Literal names (stats.inc_value("dedup/added"), the janitor's, the batch path's...).
    counted = set(re.findall(r'"((?:dedup|bloomfilter)/[a-z_/]+[a-z_])"', source_text()))
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
    from scrapy_dedup_suite.settings_table import TABLE

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
    from scrapy_dedup_suite.janitor import JanitorExtension
    from scrapy_dedup_suite.middleware import BatchDedupMiddleware
    from scrapy_dedup_suite.summary import DedupSummary

    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    section = page.split("## Without the add-on", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python", 1)[1].split("```", 1)[0]
    settings: dict = {}
    exec(block, {}, settings)

    def path(cls: type) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    assert settings["DUPEFILTER_CLASS"] == addon.DUPEFILTER
    assert settings["SPIDER_MIDDLEWARES"] == {path(BatchDedupMiddleware): addon.MIDDLEWARE_ORDER}
    assert settings["EXTENSIONS"] == {
        path(DedupSummary): addon.SUMMARY_ORDER,
        path(JanitorExtension): addon.JANITOR_ORDER,
    }
    # ... and the README and the front page send a user without the add-on there.
    for front in (ROOT / "README.md", DOCS / "index.md"):
        assert "getting-started.md#without-the-add-on" in front.read_text(encoding="utf-8")
