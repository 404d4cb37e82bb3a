"""Sphinx configuration of scrapy_dedup_suite's documentation (``./dev docs``; Read the
Docs builds it with ``.readthedocs.yaml``). The pages are Markdown (MyST); the settings
reference in settings.md is made from ``scrapy_dedup_suite/settings_table.py`` (a test
fails when they differ)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

project = "scrapy_dedup_suite"
author = "scrapy_dedup_suite's developers"
release = re.search(
    r'^__version__ = "([^"]+)"', (ROOT / "scrapy_dedup_suite" / "__init__.py").read_text(), re.M
).group(1)  # type: ignore[union-attr]
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc"]
# The API reference (api.md) imports the package: the docs extra installs it.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"scrapy_dedup_suite {release}"
copyright = f"2026, {author}"
# The images in docs/figures/ are drawn by python -m bench.plots (./dev bench runs it); the
# measured figures in the pages come from bench/figures.json (python -m bench.figures
# --write README.md docs/*.md; tests/test_docs.py fails when a page disagrees).
html_static_path: list[str] = []
