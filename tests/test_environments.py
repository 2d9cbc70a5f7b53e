"""What each way of running attachstore installs: `make run` the base dependencies only, `make test` the dev
extras too, and serving imports nothing the base dependencies do not bring."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

# Every module the daemon and the command line can load without an extra (the s3 and postgresql backends
# import theirs only when configured, and say which extra to install; `attachstore mcp` is the mcp extra).
SERVING = """
import importlib, json, pkgutil, sys
before = set(sys.modules)
import attachstore
skip = ("attachstore.storage.s3", "attachstore.index.postgres", "attachstore.index.pg", "attachstore.mcp")
def walk(path, prefix):  # not pkgutil.walk_packages, which imports a skipped package to look inside it
    for m in pkgutil.iter_modules(path, prefix):
        if not m.name.startswith(skip) and not m.name.endswith("__main__"):
            module = importlib.import_module(m.name)
            if m.ispkg:
                walk(module.__path__, m.name + ".")
walk(attachstore.__path__, "attachstore.")
# Only modules that define something: aiohttp tries an optional `backports.zstd`, which imports the namespace
# package `backports` (an `__init__` that only extends `__path__`) of whichever distribution made the folder.
new = (sys.modules[name] for name in set(sys.modules) - before)
code = {m.__file__ for m in new if getattr(m, "__file__", None) and any(k[:2] != "__" for k in vars(m))}
print(json.dumps(sorted(code)))
"""


def _closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements bring, transitively (markers evaluated, extras not followed)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        todo += [Requirement(r) for r in metadata.requires(req.name) or []]
    return seen


def test_serving_imports_only_the_base_dependencies() -> None:
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    allowed = _closure(base) | {"attachstore"}
    done = subprocess.run([sys.executable, "-c", SERVING], capture_output=True, text=True, check=True)
    files = {str(Path(file).resolve()) for file in json.loads(done.stdout)}
    loaded = {
        re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        for dist in metadata.distributions()
        if any(
            str(Path(dist.locate_file(f)).resolve()) in files for f in dist.files or [] if f.suffix == ".py"
        )
    }
    assert loaded - allowed == set()


def _make(tmp_path: Path, target: str) -> str:
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), f"VENV={venv}", target], capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_installs_no_extras_and_make_test_adds_them(tmp_path: Path) -> None:
    run = _make(tmp_path, "run")
    assert "pip install --quiet -e .\n" in run
    assert "[dev]" not in run
    assert "attachstore serve" in run
    assert "[dev]" in _make(tmp_path, "test")

    # After `make run`, `make test` installs the extras only; after both, `make run` installs nothing.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".installed-base").touch()
    test = _make(tmp_path, "test")
    assert "[dev]" in test
    assert "-m venv" not in test
    assert "pip install --quiet -e .\n" not in test
    (venv / ".installed-dev").touch()
    assert "pip" not in _make(tmp_path, "run")
    assert "pip" not in _make(tmp_path, "test")
