"""The package as a user gets it (``./dev package``, run by CI): build the sdist and the
wheel with ``python -m build``, check them with ``twine check --strict`` and by their
contents (every Lua script, ``py.typed``, every module of every folder, each command's entry
point), install the wheel into a fresh virtualenv, and run against it, from a directory
outside the checkout, what a user runs: each command's ``--help`` and the example crawl.
A file missing from the package fails here, not on a user's machine."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    print("$", " ".join(map(str, args)), flush=True)
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def only(paths: list[Path], what: str) -> Path:
    if len(paths) != 1:
        sys.exit(f"expected one {what}, found {paths}")
    return paths[0]


def commands() -> list[str]:
    """The ``scrapy.commands`` entry points setup.cfg declares."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options.entry_points"]["scrapy.commands"].strip().splitlines()
    return [line.split("=")[0].strip() for line in lines if line.strip()]


def version() -> str:
    text = (ROOT / "scrapy_dedup_suite" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if found is None:
        sys.exit("scrapy_dedup_suite/__init__.py has no __version__")
    return found.group(1)


def check_contents(wheel: Path, sdist: Path) -> None:
    lua = sorted(p.name for p in (ROOT / "scrapy_dedup_suite" / "server" / "lua").glob("*.lua"))
    package = ROOT / "scrapy_dedup_suite"
    modules = sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        entry_points = next(
            (whl.read(n).decode() for n in names if n.endswith("entry_points.txt")), ""
        )
    wanted = [
        "scrapy_dedup_suite/py.typed",
        *(f"scrapy_dedup_suite/server/lua/{name}" for name in lua),
        *(f"scrapy_dedup_suite/{name}" for name in modules),
    ]
    missing = [n for n in wanted if n not in names]
    missing += [f"entry point {c}" for c in commands() if f"{c} = " not in entry_points]
    with tarfile.open(sdist) as tar:
        top = f"{sdist.name[: -len('.tar.gz')]}/"
        in_sdist = {m.name[len(top) :] for m in tar.getmembers()}
    sources = [
        "setup.cfg",
        "pyproject.toml",
        "README.md",
        "scrapy_dedup_suite/py.typed",
        *(f"scrapy_dedup_suite/server/lua/{name}" for name in lua),
        *(f"scrapy_dedup_suite/{name}" for name in modules),
    ]
    missing += [f"sdist: {n}" for n in sources if n not in in_sdist]
    if missing:
        sys.exit(f"missing from the package: {', '.join(missing)}")
    print(f"contents: {len(lua)} Lua scripts, py.typed, {len(modules)} modules, "
          f"{len(commands())} commands, in the wheel and the sdist")  # fmt: skip


def make_venv(where: Path) -> Path:
    """A fresh virtualenv (``venv``, else ``virtualenv`` where Python ships without it)."""
    done = subprocess.run([sys.executable, "-m", "venv", str(where)], capture_output=True)
    if done.returncode != 0:
        shutil.rmtree(where, ignore_errors=True)
        run(sys.executable, "-m", "virtualenv", "-q", where)
    return where / "bin"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dedup-package-") as name:
        tmp = Path(name)
        dist = tmp / "dist"
        run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
        wheel = only(sorted(dist.glob("*.whl")), "wheel")
        sdist = only(sorted(dist.glob("*.tar.gz")), "sdist")
        if f"-{version()}-" not in wheel.name or not sdist.name.endswith(f"-{version()}.tar.gz"):
            sys.exit(f"{wheel.name} / {sdist.name}: not version {version()} (__init__.py)")
        run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
        check_contents(wheel, sdist)

        bin_dir = make_venv(tmp / "venv")
        run(bin_dir / "python", "-m", "pip", "install", "-q", f"{wheel}[embedded]")
        # Outside the checkout, with nothing of it on the path: the wheel alone.
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "REDIS_URL", "DEDUP_REDIS_URL", "VIRTUAL_ENV")
        }
        where = run(
            bin_dir / "python",
            "-c",
            "import scrapy_dedup_suite as p, scrapy_dedup_suite.operations.migrations as m; "
            "print(p.__file__, m.__file__, p.__version__)",
            cwd=tmp,
            env=env,
        ).split()
        if not all(path.startswith(str(tmp / "venv")) for path in where[:2]):
            sys.exit(f"imported from {where[:2]}, not from the installed wheel")
        if where[2] != version():
            sys.exit(f"the installed package says version {where[2]}, not {version()}")
        listed = run(bin_dir / "scrapy", "-h", cwd=tmp, env=env)
        for command in commands():
            if command not in listed:
                sys.exit(f"`scrapy -h` does not list {command}")
            run(bin_dir / "scrapy", command, "--help", cwd=tmp, env=env)
        example = tmp / "example_project"
        shutil.copytree(ROOT / "example_project", example)
        out = run(bin_dir / "python", example / "run.py", cwd=example, env=env)
        # Its table: 20,001 requests checked, the site's 2,000 pages new, the rest filtered.
        if not re.search(r"^bloom\s+20,001\s+2,000\s+18,001\s", out, re.M):
            sys.exit(f"the example crawl did not deduplicate as it should:\n{out[-3000:]}")
        print(f"the wheel {wheel.name}: installed, {len(commands())} commands, example crawl: ok")


if __name__ == "__main__":
    main()
