"""What each way of running attachstore installs: `make run` the base dependencies only, `make test` the dev
extras too, and serving imports nothing the base dependencies do not bring."""

from __future__ import annotations

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

# Every module the daemon and the command line (`attachstore mcp` included) can load without an extra (the s3
# and postgresql backends import theirs only when configured, and say which extra to install), loaded as in
# an environment of the base dependencies only: the top-level modules of every other installed distribution
# (the dev extras) cannot be imported, so an optional import (anyio's of sniffio) falls back as it would
# there, and a hard one fails the walk with the module's name.
SERVING = """
import importlib, importlib.abc, pkgutil, sys
absent = set(sys.argv[1:])
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in absent:
            raise ModuleNotFoundError(f"No module named {name!r} (not a base dependency)", name=name)
sys.meta_path.insert(0, Absent())
import attachstore
skip = ("attachstore.storage.s3", "attachstore.index.postgres", "attachstore.index.pg")
def walk(path, prefix):  # not pkgutil.walk_packages, which imports a skipped package to look inside it
    for m in pkgutil.iter_modules(path, prefix):
        if not m.name.startswith(skip) and not m.name.endswith("__main__"):
            module = importlib.import_module(m.name)
            if m.ispkg:
                walk(module.__path__, m.name + ".")
walk(attachstore.__path__, "attachstore.")
"""


def _closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements bring, transitively: markers evaluated, and the extras that
    a requirement names (`pyjwt[crypto]`) followed."""
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        for wanted in ("", *sorted(req.extras)):
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                todo += [(Requirement(r), wanted) for r in metadata.requires(req.name) or []]
    return {name for name, _ in seen}


def test_serving_imports_only_the_base_dependencies() -> None:
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    allowed = _closure(base) | {"attachstore"}
    owners = metadata.packages_distributions()
    absent = sorted(
        module
        for module, dists in owners.items()
        if not {re.sub(r"[-_.]+", "-", d).lower() for d in dists} & allowed
    )
    assert "packaging" in absent  # a dev extra's, which serving must not need
    done = subprocess.run(
        [sys.executable, "-c", SERVING, *absent], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]


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
