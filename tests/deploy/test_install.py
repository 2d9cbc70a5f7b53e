"""The installs docs/deployment.md gives from a checkout, run as written: uv, pipx and a virtualenv of its
own, each into directories of the test's, each giving an `attachstore` that runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.podman import BUILD, ROOT, commands, documented

INSTALLS = commands(documented("install from a checkout"))


@pytest.mark.parametrize("install", INSTALLS, ids=[line.split()[0] for line in INSTALLS])
def test_an_install_from_a_checkout_gives_a_working_command(install: str, tmp_path: Path) -> None:
    bin_dir, venv = tmp_path / "bin", tmp_path / "opt-attachstore"
    tool = install.split()[0]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # uv and pipx: dev dependencies
    assert tool == "python3" or shutil.which(tool, path=path), f"{tool} is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIPX_"))} | {
        "PATH": path,
        "UV_TOOL_DIR": str(tmp_path / "uv-tools"),
        "UV_TOOL_BIN_DIR": str(bin_dir),
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(bin_dir),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", install.replace("/opt/attachstore", str(venv))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD,
    )
    assert done.returncode == 0, f"{install}\n{done.stdout}\n{done.stderr}"
    command = venv / "bin" / "attachstore" if tool == "python3" else bin_dir / "attachstore"
    ran = subprocess.run(
        [str(command), "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert (ran.returncode, ran.stdout.split()[0]) == (0, "attachstore"), ran.stderr
