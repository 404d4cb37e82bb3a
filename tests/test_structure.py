"""The package's shape, as a contributor meets it: modules that fit in a reader's head,
and imports at the top of each module, where the dependencies can be read (a cycle
between modules is a design to fix, not an import to hide in a function). No Redis."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from scrapy_dedup_suite.backends.base import DedupBackend
from scrapy_dedup_suite.backends.layout import Layout
from scrapy_dedup_suite.backends.stored import StoredFilter
from scrapy_dedup_suite.dupefilter import RFPDupeFilter

PACKAGE = Path(__file__).resolve().parent.parent / "scrapy_dedup_suite"
#: The most lines a module of the package may have.
MODULE_LINES = 420
#: The most lines of the dupefilter class (its batch path, recovery and stats are
#: classes of their own).
DUPEFILTER_LINES = 260
#: The most methods each backend class declares: what a filter does per request
#: (DedupBackend), its keys and its life in Redis (StoredFilter).
BACKEND_METHODS = 25
#: What one call of a backend's script is made of: the layout's, not the backend's.
CALL_PROTOCOL = {"context", "header", "place", "keys", "contains_call", "again", "learn", "grown"}
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


def declared_methods(cls: type) -> list[str]:
    return [
        name
        for name, value in vars(cls).items()
        if callable(value) or isinstance(value, (property, classmethod, staticmethod))
    ]


def test_the_backend_classes_stay_small_and_the_call_is_the_layouts():
    for cls in (DedupBackend, StoredFilter):
        methods = declared_methods(cls)
        assert len(methods) <= BACKEND_METHODS, f"{cls.__name__}: {len(methods)} {methods}"
    assert set(dir(Layout)) >= CALL_PROTOCOL
    # The hooks a backend once filled in for calls.py are nowhere on it.
    hooks = CALL_PROTOCOL | {"add_group", "group_keys", "add_header", "fp_args", "on_grown"}
    assert not hooks & set(dir(DedupBackend)), hooks & set(dir(DedupBackend))


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


def test_scrapy_s_private_engine_state_is_read_in_one_module():
    """The engine's slot, its requests in progress, its next turn and the spider
    middlewares' list are Scrapy's private parts: engine_state.py alone reads them
    (with the Scrapy versions it was checked against), so a Scrapy release that moves
    them is one module to look at."""
    private = ("._slot", '"_slot"', "inprogress", "nextcall", "spidermw")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "engine_state.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(name in line for name in private)
    ]
    assert not found, found


def test_the_scripts_answer_codes_are_named_in_one_table():
    """The add scripts' answers beyond seen/new (a layer added, the last layer full,
    more of the schedule needed) are named in answers.py, whose line opens every
    script: no bare -11, -(10 + n) or -2 in the scripts or in the code reading them."""
    bare = ("-11", "-(10", "answer == -", "answer <= -", "answer > -", "answer < -", "code = -")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted([*PACKAGE.rglob("*.lua"), *PACKAGE.rglob("*.py")])
        if path.name != "answers.py"
        for number, line in enumerate(path.read_text().splitlines(keepends=True), 1)
        if any(code in line for code in bare)
    ]
    assert not found, found
