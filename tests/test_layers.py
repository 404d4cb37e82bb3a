"""The house by layers (issue 52): each folder of the package is a layer, and imports
run one way, down:

    commands -> operations -> frontier -> dedup -> backends -> server -> settings -> core

with the package's root holding the exceptions (below every layer) and its public face
(the add-on, the embedded server, and the public paths a project writes, kept where
they always were) above them. Read from the code's own imports, those under
``if TYPE_CHECKING:`` included: a circle held together by type hints is a circle.
No Redis."""

from __future__ import annotations

import ast
import importlib
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "scrapy_dedup_suite"
NAME = "scrapy_dedup_suite"
#: The layers, lowest first: a module imports from its own layer and those below.
LAYERS = ("core", "settings", "server", "backends", "dedup", "frontier", "operations", "commands")
#: Root modules below every layer.
BASE = {"exceptions"}
#: Paths a project writes in its settings or imports, kept at the root (each only
#: re-exports from the layer its code lives in).
PUBLIC_PATHS = {"dupefilter", "middleware", "failed", "janitor", "summary", "metrics"}
#: Root modules above every layer: the add-on, the demo server, the public paths.
TOP = {"__init__", "addon", "embedded", *PUBLIC_PATHS}
#: Imports allowed to run back up a layer, each with why (issue 52: at most 3).
UPWARD: dict[tuple[str, str], str] = {}


def module_of(path: Path) -> str:
    """``backends.base`` for ``scrapy_dedup_suite/backends/base.py`` (``""``: the root)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_of(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """The package's modules ``path`` imports, anywhere in it (a name imported from a
    package that is a module of it counts as that module)."""
    here = module_of(path).split(".") if module_of(path) else []
    if path.name != "__init__.py":
        here = here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] + (node.module or "").split(".")
                base = [part for part in base if part]
            elif (node.module or "").split(".")[0] == NAME:
                base = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                whole = ".".join([*base, alias.name])
                found.add(whole if whole in MODULES else ".".join(base))
        elif isinstance(node, ast.Import):
            found |= {
                ".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith(NAME)
            }
    found.discard(module_of(path))
    return {name for name in found if name in MODULES}


GRAPH = {name: imported(path) for name, path in MODULES.items()}


def layer_of(module: str) -> int:
    top = module.split(".")[0] if module else "__init__"
    if top in LAYERS:
        return LAYERS.index(top)
    if top in BASE:
        return -1
    assert top in TOP, f"{module}: in no layer"
    return len(LAYERS)


def test_every_module_lives_in_a_layer():
    homeless = [m for m in MODULES if m.split(".")[0] not in (*LAYERS, *BASE, *TOP) and m != ""]
    assert not homeless, f"modules outside the layers {LAYERS}: {homeless}"


def test_imports_run_down_the_layers():
    upward = sorted(
        (module, target)
        for module, targets in GRAPH.items()
        for target in targets
        if layer_of(target) > layer_of(module) and (module, target) not in UPWARD
    )
    assert not upward, f"imports running back up a layer (importer, imported): {upward}"
    assert len(UPWARD) <= 3


def test_no_circle_of_imports():
    """Depth first over the imports; a module met again on the current path closes a
    circle, which the message shows whole."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for target in sorted(GRAPH[module]):
            circle = visit(target, [*path, module])
            if circle:
                return circle
        done.add(module)
        return None

    for module in sorted(GRAPH):
        circle = visit(module, [])
        assert circle is None, " -> ".join(m or NAME for m in circle)


def test_no_two_modules_share_a_name():
    """A name says where to look: one ``record.py``, one ``janitor.py`` (a public path
    at the root and the module it re-exports from are one thing, not two)."""
    names = Counter(
        path.stem
        for module, path in MODULES.items()
        if path.name != "__init__.py" and module not in PUBLIC_PATHS
    )
    assert not [n for n, count in names.items() if count > 1], names.most_common(5)


def test_a_public_path_only_re_exports_what_its_layer_defines():
    """``scrapy_dedup_suite.dupefilter`` and the others a project writes: a docstring,
    imports from the modules the code lives in (each in a layer), and ``__all__``;
    each name is the very object those modules define."""
    for name in PUBLIC_PATHS:
        tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
        body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body
        future, *sources, names = body
        assert isinstance(future, ast.ImportFrom) and future.module == "__future__", name
        assert sources and all(isinstance(s, ast.ImportFrom) for s in sources), name
        assert isinstance(names, ast.Assign), name
        public = importlib.import_module(f"{NAME}.{name}")
        exported = []
        for source in sources:
            assert isinstance(source, ast.ImportFrom) and source.level == 1, name
            inner = source.module or ""
            assert inner.split(".")[0] in LAYERS, (name, inner)
            code = importlib.import_module(f"{NAME}.{inner}")
            for alias in source.names:
                defined = getattr(code, alias.name)
                assert getattr(defined, "__module__", None) == code.__name__, (name, alias.name)
                assert getattr(public, alias.name) is defined, (name, alias.name)
                exported.append(alias.name)
        assert public.__all__ == exported, name


def test_a_public_class_is_named_by_its_public_path_in_what_the_package_says():
    """The add-on's log line, the batch middleware's advice, a refusal naming the
    dupefilter: each names the class as a project writes it, not the folder it lives
    in; a project's subclass is named where it lives."""
    from scrapy_dedup_suite.core.paths import dotted_path

    written = {
        "dupefilter": "RFPDupeFilter",
        "middleware": "BatchDedupMiddleware",
        "failed": "FailedPagesMiddleware",
        "janitor": "JanitorExtension",
        "summary": "DedupSummary",
        "metrics": "DedupMetrics",
    }
    assert set(written) == PUBLIC_PATHS
    for module, name in written.items():
        cls = getattr(importlib.import_module(f"{NAME}.{module}"), name)
        assert dotted_path(cls) == f"{NAME}.{module}.{name}"
        mine = type("Mine", (cls,), {"__module__": "myproject.dedup"})
        assert dotted_path(mine) == "myproject.dedup.Mine"
