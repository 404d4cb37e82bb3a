"""The measured figures the documentation quotes, kept in one place: bench/figures.json.

    python -m bench.memory --fingerprints 1000000 --server BINARY --record
    python -m bench.figures --write README.md docs/*.md
    python -m bench.figures --check README.md docs/*.md

``bench.memory --record`` writes its rows there for the server and size it measured;
the other figures are each recorded with the command that measured them. ``--write``
puts them into the pages: the tables between ``<!-- figures: NAME -->`` and
``<!-- /figures -->`` and every figure followed by ``<!-- figure: NAME -->``, where NAME
is a named figure, ``bloom theory`` (the code's bits at 0.1%), or a memory row
(``compact``; ``compact, Redis 8.2.3``; ``compact, 10000000``; the server and size
default to the headline's). ``--check``
exits 1 naming each page that disagrees; tests/test_docs.py runs it on every page.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from scrapy_dedup_suite.core.bloom_math import optimal_bits

PATH = Path(__file__).with_name("figures.json")

#: bench.memory's rows: (id, the README's label, the servers page's column).
ROWS = (
    ("set", "scrapy-redis's set", "scrapy-redis set"),
    (
        "hash-shards",
        "`hash`, shards (filters made before the buckets)",
        "`hash`, shards (layout 1)",
    ),
    ("hash", "**`hash`** (expiring, exact), buckets", "`hash`, buckets, janitor's expiry"),
    (
        "hash-field-expiry",
        "`hash`, buckets, the server's field expiry",
        "`hash`, buckets, field expiry",
    ),
    (
        "hash-growing",
        "**`hash`**, nothing sized (`DEDUP_COMPACT_CAPACITY = 0`)",
        "`hash`, growing",
    ),
    ("compact", "**`compact`** (exact, never expires)", "`compact`"),
    (
        "compact-growing",
        "**`compact`**, nothing sized (`DEDUP_COMPACT_CAPACITY = 0`)",
        "`compact`, growing",
    ),
    ("bloom", "`bloom` at 0.1%", "`bloom` 0.1%"),
)
#: The rows the README's table shows in bold.
BOLD = {"hash", "hash-growing", "compact", "compact-growing"}

FIGURE = re.compile(r"(\d[\d,]*(?:\.\d+)?) B(\**)<!-- figure: ([^>]+?) -->")
BLOCK = re.compile(r"(<!-- figures: ([\w-]+) -->\n)(.*?)(<!-- /figures -->)", re.S)


def load(path: Path = PATH) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def save(data: dict[str, Any], path: Path = PATH) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def record_memory(
    server: str, fingerprints: int, measured: dict[str, float | None], path: Path = PATH
) -> None:
    """Keep bench.memory's figures for ``server`` at ``fingerprints`` (a run replaces the
    one of the same server and size; notes on its cells stay)."""
    data = load(path)
    runs = data["memory"]
    rounded = {k: None if v is None else round(v, 1) for k, v in measured.items()}
    for run in runs:
        if run["server"] == server and run["fingerprints"] == fingerprints:
            run["bytes"] = rounded
            break
    else:
        runs.append({"server": server, "fingerprints": fingerprints, "bytes": rounded, "notes": {}})
    save(data, path)


def record_figure(name: str, value: str, measured: str, path: Path = PATH) -> None:
    """Keep the single figure ``name`` (``13.4 B``) and the command that measured it."""
    data = load(path)
    data["figures"][name] = {"value": value, "measured": measured}
    save(data, path)


def _run(data: dict[str, Any], server: str, fingerprints: int) -> dict[str, Any]:
    for run in data["memory"]:
        if run["server"] == server and run["fingerprints"] == fingerprints:
            return dict(run)
    raise KeyError(f"bench/figures.json has no memory run of {server} at {fingerprints:,}")


def figure(data: dict[str, Any], name: str) -> str:
    """The figure ``name`` stands for, as a page writes it (``13.4 B``)."""
    if name in data["figures"]:
        return str(data["figures"][name]["value"])
    if name == "bloom theory":  # the code's: optimal bits at 0.1%, over a million
        n = 1_000_000
        return f"{optimal_bits(n, 0.001) / n / 8:.2f} B"
    row, *more = (part.strip() for part in name.split(","))
    server, size = data["headline"]["server"], data["headline"]["fingerprints"]
    for part in more:
        if part.isdigit():
            size = int(part)
        else:
            server = part
    value = _run(data, server, size)["bytes"].get(row)
    if value is None:
        raise KeyError(f"bench/figures.json has no {row!r} figure for {server} at {size:,}")
    return f"{value:.1f} B"


def _cell(run: dict[str, Any], row: str, bold: bool = False) -> str:
    value = run["bytes"].get(row)
    if value is None:
        return "(none)"
    text = f"**{value:.1f} B**" if bold else f"{value:.1f} B"
    note = run.get("notes", {}).get(row)
    return f"{text} ({note})" if note else text


def table(data: dict[str, Any], name: str) -> str:
    """The Markdown of the table ``name``, each line ending in a newline."""
    head = data["headline"]
    if name == "memory-sizes":  # the headline server, at every size measured on it
        runs = sorted(
            (r for r in data["memory"] if r["server"] == head["server"]),
            key=lambda r: int(r["fingerprints"]),
        )
        lines = ["| | " + " | ".join(f"{r['fingerprints']:,}" for r in runs) + " |"]
        lines.append("|---" * (len(runs) + 1) + "|")
        for row, label, _ in ROWS:
            if all(r["bytes"].get(row) is None for r in runs):
                continue
            cells = [_cell(r, row, row in BOLD) for r in runs]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        return "".join(line + "\n" for line in lines)
    if name == "memory-servers":  # every server at the headline size, then other sizes
        at = head["fingerprints"]
        runs = [r for r in data["memory"] if r["fingerprints"] == at]
        runs += [r for r in data["memory"] if r["fingerprints"] != at]
        lines = ["| server | " + " | ".join(column for _, _, column in ROWS) + " |"]
        lines.append("|---" * (len(ROWS) + 1) + "|")
        for r in runs:
            label = r["server"]
            if r["fingerprints"] != at:
                label += f", {r['fingerprints']:,} fingerprints"
            lines.append(f"| {label} | " + " | ".join(_cell(r, row) for row, _, _ in ROWS) + " |")
        return "".join(line + "\n" for line in lines)
    raise KeyError(f"no table {name!r} (memory-sizes, memory-servers)")


def render(text: str, data: dict[str, Any]) -> str:
    """``text`` with its tables and marked figures as bench/figures.json has them."""
    text = BLOCK.sub(lambda m: m.group(1) + table(data, m.group(2)) + m.group(4), text)
    return FIGURE.sub(
        lambda m: f"{figure(data, m.group(3))}{m.group(2)}<!-- figure: {m.group(3)} -->", text
    )


def differences(text: str, data: dict[str, Any]) -> list[str]:
    """Each line of ``text`` that says another figure than bench/figures.json."""
    wanted = render(text, data).splitlines()
    return [
        f"line {n}: {have.strip()!r} where bench/figures.json says {want.strip()!r}"
        for n, (have, want) in enumerate(zip(text.splitlines(), wanted), 1)
        if have != want
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.figures", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the pages' figures")
    action.add_argument("--check", action="store_true", help="exit 1 if a page disagrees")
    parser.add_argument("pages", nargs="+", type=Path, metavar="PAGE")
    opts = parser.parse_args(argv)
    data = load()
    failed = False
    for page in opts.pages:
        text = page.read_text(encoding="utf-8")
        try:
            new = render(text, data)
        except KeyError as exc:
            print(f"{page}: {exc.args[0]}", file=sys.stderr)
            failed = True
            continue
        if new == text:
            continue
        if opts.write:
            page.write_text(new, encoding="utf-8")
            print(f"written: {page}")
        else:
            for line in differences(text, data):
                print(f"{page}: {line}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
