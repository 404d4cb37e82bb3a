"""The package's shape, as a contributor meets it: modules that fit in a reader's head,
and imports at the top of each module, where the dependencies can be read (a cycle
between modules is a design to fix, not an import to hide in a function). No Redis."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from scrapy_dedup_suite.dupefilter import RFPDupeFilter

PACKAGE = Path(__file__).resolve().parent.parent / "scrapy_dedup_suite"
#: The most lines a module of the package may have.
MODULE_LINES = 460
#: The most lines of the dupefilter class (its batch path, recovery and stats are
#: classes of their own).
DUPEFILTER_LINES = 260
#: Imports of the package's own modules made when first used, on purpose:
#: ``scrapy_dedup_suite.Addon`` keeps ``import scrapy_dedup_suite`` light.
LAZY = {("__init__.py", ".addon")}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imports_inside_functions(path: Path) -> list[str]:
    """The package's own modules ``path`` imports inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom):
                name = "." * inner.level + (inner.module or "")
                if inner.level or name.startswith("scrapy_dedup_suite"):
                    found.append(f"{path.relative_to(PACKAGE)}:{inner.lineno}: {name}")
            elif isinstance(inner, ast.Import):
                found += [
                    f"{path.relative_to(PACKAGE)}:{inner.lineno}: {alias.name}"
                    for alias in inner.names
                    if alias.name.startswith("scrapy_dedup_suite")
                ]
    return found


def test_the_package_imports_its_own_modules_at_the_top():
    found = [
        line
        for path in modules()
        for line in imports_inside_functions(path)
        if (str(path.relative_to(PACKAGE)), line.rsplit(": ", 1)[1]) not in LAZY
    ]
    assert not found, f"imports inside functions (a cycle to break by design): {found}"


def test_no_module_is_longer_than_a_reader_holds():
    long = {
        str(path.relative_to(PACKAGE)): count
        for path in modules()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_the_dupefilter_class_stays_small():
    lines = len(inspect.getsource(RFPDupeFilter).splitlines())
    assert lines <= DUPEFILTER_LINES, f"RFPDupeFilter is {lines} lines"


def test_no_class_takes_a_method_back_from_a_base_by_assignment():
    """``contains = DedupBackend.contains`` in a class body undoes an override of another
    base: a hierarchy that needs it has a layout in the wrong class."""
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for statement in node.body:
                value = getattr(statement, "value", None)
                if (
                    isinstance(statement, ast.Assign)
                    and isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id[:1].isupper()
                    and any(getattr(t, "id", None) == value.attr for t in statement.targets)
                ):
                    found.append(f"{path.relative_to(PACKAGE)}:{statement.lineno}")
    assert not found, f"methods taken back by assignment: {found}"
