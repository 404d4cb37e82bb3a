"""The settings table: the documentation's tables are made from it, every setting the package
reads is in it, and each default passes its own check. No Redis."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.operations import settings_docs
from scrapy_dedup_suite.settings.table import SETTINGS, TABLE, Whole, read

ROOT = Path(__file__).resolve().parent.parent


def test_the_documentation_tables_are_the_table():
    pages = {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))}
    # settings.md lists every setting; the frontier's, the janitor's and the metrics' pages
    # repeat theirs.
    settings_page = pages[ROOT / "docs" / "settings.md"]
    assert all(
        f"<!-- settings:{t} -->" in settings_page
        for t in ("main", "frontier", "janitor", "metrics")
    )
    assert sum(text.count("<!-- settings:") for text in pages.values()) == 7
    for path, text in pages.items():
        assert settings_docs.rewrite(text) == text, (
            f"{path.name}'s settings tables differ from settings/table.py: run python -m "
            "scrapy_dedup_suite.operations.settings_docs --write docs/settings.md "
            "docs/operations.md docs/frontier.md docs/metrics.md"
        )


def test_every_setting_the_package_reads_is_in_the_table():
    named = set()
    for path in [
        *(ROOT / "scrapy_dedup_suite").rglob("*.py"),
    ]:
        named |= set(re.findall(r'"(DEDUP_[A-Z_]+[A-Z])"', path.read_text(encoding="utf-8")))
    assert named, "the scan found no setting names: the pattern is wrong"
    missing = sorted(named - set(SETTINGS))
    assert not missing, f"read by the package but not in settings/table.py: {missing}"


def test_a_setting_checked_by_its_component_names_a_place_that_exists():
    """``Checked(where)``: the component that checks the value, named from the package
    (what a reader opens, and what the docs' tables could link): it must load."""
    from scrapy_dedup_suite.settings.kinds import Checked

    named = [s.accepts.where for s in TABLE if isinstance(s.accepts, Checked)]
    assert len(named) >= 5
    for where in named:
        assert _loaded(f"scrapy_dedup_suite.{where}") is not None, where


def _loaded(path: str) -> object:
    """What a dotted path names: its longest importable module, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            found = getattr(found, name, None)
        return found
    return None


def test_names_are_unique_and_documented():
    assert len(SETTINGS) == len(TABLE)
    for setting in TABLE:
        assert setting.help and setting.table in ("main", "janitor", "frontier", "metrics"), (
            setting.name
        )


@pytest.mark.parametrize("setting", TABLE, ids=lambda s: s.name)
def test_each_default_passes_its_own_check(setting):
    assert read({}, setting.name) == setting.check(setting.default)


@pytest.mark.parametrize(
    "setting", [s for s in TABLE if isinstance(s.accepts, Whole)], ids=lambda s: s.name
)
def test_a_whole_number_out_of_its_limits_is_refused_in_one_line_naming_the_setting(setting):
    limit = setting.accepts
    bad = [limit.minimum - 1, "many"]
    if limit.maximum is not None:
        bad.append(limit.maximum + 1)
        assert read({setting.name: limit.maximum}, setting.name) == limit.maximum
    for value in bad:
        with pytest.raises(DedupConfigError) as raised:
            read({setting.name: value}, setting.name)
        text = str(raised.value)
        assert text.startswith(f"{setting.name} must be ") and "\n" not in text
