"""The documentation's settings tables, made from the settings table.

``python -m scrapy_dedup_suite.operations.settings_docs --write docs/settings.md docs/operations.md
docs/frontier.md`` rewrites each ``<!-- settings:NAME -->`` block of those pages (a test
fails when a page and the table differ); without arguments, prints the tables.
"""

from __future__ import annotations

import re
import sys

from ..backends import BACKENDS, DedupBackend
from ..settings.table import TABLE


def _default_keys() -> str:
    listed = [f"`{cls.default_key}` ({name})" for name, cls in BACKENDS.items()]
    return "per backend: " + ", ".join(listed) + f", `{DedupBackend.default_key}` (custom)"


def _backend_names() -> str:
    names = ", ".join(f'`"{name}"`' for name in BACKENDS)
    return f"{names}, or the dotted path of a `scrapy_dedup_suite.backends.DedupBackend` subclass"


def reference(table: str = "main") -> str:
    """The documentation's settings table ``table`` ("main", "janitor" or "frontier"),
    in Markdown."""
    heading = "setting" if table == "main" else f"{table} setting"
    lines = [f"| {heading} | default | meaning |", "|---|---|---|"]
    for setting in TABLE:
        if setting.table == table:
            meaning = setting.help.replace("{backends}", _backend_names())
            shown = setting.default_text().replace("{default_keys}", _default_keys())
            lines.append(f"| `{setting.name}` | {shown} | {meaning} |")
    return "\n".join(lines) + "\n"


MARKER = re.compile(r"(<!-- settings:(\w+) -->\n)(.*?)(<!-- /settings -->)", re.S)


def rewrite(text: str) -> str:
    """``text`` (a page) with each ``<!-- settings:NAME -->`` block made from the table."""
    return MARKER.sub(lambda m: m.group(1) + reference(m.group(2)) + m.group(4), text)


def main(argv: list[str]) -> int:
    """``python -m scrapy_dedup_suite.operations.settings_docs [--write FILE...]``: print the
    tables, or write them into the marked blocks of each file (docs/*.md)."""
    if argv[:1] == ["--write"] and len(argv) >= 2:
        for name in argv[1:]:
            with open(name, encoding="utf-8") as f:
                text = f.read()
            new = rewrite(text)
            if new != text:
                with open(name, "w", encoding="utf-8") as f:
                    f.write(new)
            print(f"{name}: settings tables {'rewritten' if new != text else 'already current'}")
        return 0
    if argv:
        print("usage: python -m scrapy_dedup_suite.operations.settings_docs [--write FILE...]")
        return 2
    print(reference("main"))
    print(reference("janitor"))
    print(reference("frontier"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
