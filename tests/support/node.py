"""Node.js for the tests that drive TypeScript clients (tests/interop/): found on the PATH, else Debian's
`nodejs` and `npm` installed with apt-get (root only, as tests.support.services installs its servers); and a
test directory's npm packages, installed by `npm ci` from its own package-lock.json when missing or stale.

`require(directory)` is the tests' way in: it fails the test when Node cannot be had, and skips it instead
only with ATTACHSTORE_TEST_SKIP_SERVICES=1, as the S3 and PostgreSQL tests do."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import fixtures, services

PACKAGES = ["nodejs", "npm"]
MIN_MAJOR = 18  # Debian 12's nodejs
STAMP = ".attachstore-npm-ci"  # in node_modules: what `npm ci` installed it from


class Unavailable(Exception):
    """Node.js or the packages could not be had; the message says why."""


@dataclass(frozen=True)
class Node:
    node: str
    npm: str

    def run(self, directory: Path, *args: str, timeout: float = 300) -> str:
        """`node ARGS` in `directory`, to its end: its output, or AssertionError with it."""
        done = subprocess.run(
            [self.node, *args], cwd=directory, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, (
            f"node {' '.join(args)} exited {done.returncode}\n{done.stdout}{done.stderr}"
        )
        return done.stdout


def work() -> Path:
    path = Path(tempfile.gettempdir()) / "attachstore-node"
    path.mkdir(exist_ok=True)
    return path


def find() -> Node:
    """Node and npm, installed first if either is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        services.apt_install(PACKAGES, work() / "apt.log")
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            raise Unavailable(f"no node or npm after apt-get install {' '.join(PACKAGES)}")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major = re.match(r"v(\d+)\.", version)
    if major is None or int(major.group(1)) < MIN_MAJOR:
        raise Unavailable(f"{node} is Node.js {version}; the interop tests need {MIN_MAJOR} or later")
    return Node(node, npm)


CI = ("ci", "--ignore-scripts")


def npm_ci(node: Node, directory: Path, command: Sequence[str] = CI, scripts: Sequence[str] = ()) -> None:
    """`npm ci` (or `command`) in `directory`, then `node SCRIPT` for each of `scripts`, unless its
    node_modules was installed from the same package files by the same Node; one process at a time per
    directory. Install scripts never run by themselves: those a package cannot do without are named."""
    digest = hashlib.sha256(node.node.encode())
    for name in ("package.json", "package-lock.json", ".npmrc"):
        path = directory / name
        digest.update(path.read_bytes() if path.exists() else b"(none)")
    digest.update(repr((tuple(command), tuple(scripts))).encode())
    stamp = directory / "node_modules" / STAMP
    lock = work() / (hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16] + ".lock")
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return
        env = {**os.environ, "npm_config_update_notifier": "false"}
        for argv in ([node.npm, *command], *([node.node, script] for script in scripts)):
            done = subprocess.run(
                argv, cwd=directory, env=env, capture_output=True, text=True, timeout=900, check=False
            )
            if done.returncode != 0:
                raise Unavailable(f"{' '.join(argv)} in {directory}: {done.stdout}{done.stderr}")
        stamp.write_text(digest.hexdigest())


def require(directory: Path) -> Node:
    """Node with `directory`'s packages installed, or the test fails (or skips, when told to)."""
    try:
        node = find()
        npm_ci(node, directory)
    except (Unavailable, services.ServiceError, OSError, subprocess.SubprocessError) as e:
        if fixtures.skipping_services():
            pytest.skip(f"no Node.js for {directory.name} ({fixtures.SKIP_VARIABLE}=1): {e}")
        pytest.fail(f"the TypeScript interop tests need Node.js and npm: {e}")
    return node
