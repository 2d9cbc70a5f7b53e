"""The package as pip installs it from a built wheel, not the source tree: its data files come with it (the
catalog, the shipped units and example configuration, py.typed, the operator page's templates and static
files)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_built_wheel_carries_the_catalog(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "attachstore", source / "attachstore", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("attachstore-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"attachstore/shipped/{p.name}" for p in (ROOT / "attachstore" / "shipped").iterdir()}
    assert shipped | {"attachstore/py.typed"} <= names
    ui = ROOT / "attachstore" / "api" / "ui"
    page = {f"attachstore/api/ui/{d}/{p.name}" for d in ("templates", "static") for p in (ui / d).iterdir()}
    assert page <= names
    target = tmp_path / "installed"
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr
    check = (
        "import attachstore, sys; from attachstore.service.catalog import builtin; "
        "print(attachstore.__file__); print(builtin().version, len(builtin().entries))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONPATH": str(target)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    where, catalog = ran.stdout.splitlines()
    assert where.startswith(str(target))  # the installed copy, not the source tree
    assert int(catalog.split()[1]) > 100
