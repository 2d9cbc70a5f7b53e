"""The hosts, installed once per test session: from this folder's package-lock.json at the versions tested,
or, with ATTACHSTORE_HOSTS=latest (a scheduled check against new releases), each host's latest release."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.interop.hosts.scenario import ROUTES, TOKEN
from tests.support import node
from tests.support.daemon import Daemons
from tests.support.mcp_server import daemon_with_token

HERE = Path(__file__).parent
VERSIONS = "ATTACHSTORE_HOSTS"  # "latest": each host's newest release instead of the lock's
# `npm install` from the lock, not `npm ci`: opencode-ai names a package for each platform, and the registry
# here has only some of them, so no lock can hold them all and `npm ci` refuses an incomplete one. Without
# install scripts (keytar and node-pty would build native code no test needs), but the two that put the
# host's own binary in place for this platform.
INSTALL = ("install", "--no-save", "--ignore-scripts", "--no-audit", "--no-fund")
LINKS = ("node_modules/@anthropic-ai/claude-code/install.cjs", "node_modules/opencode-ai/postinstall.mjs")


def _latest(found: node.Node) -> Path:
    """A folder of its own with every host at its latest release, installed afresh on every test session."""
    where = node.work() / "hosts-latest"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    pins = json.loads((HERE / "package.json").read_text())["dependencies"]
    (where / "package.json").write_text(
        json.dumps({"name": "hosts-latest", "private": True, "dependencies": dict.fromkeys(pins, "latest")})
    )
    shutil.copy(HERE / ".npmrc", where / ".npmrc")
    node.npm_ci(found, where, INSTALL, LINKS)
    return where


@pytest.fixture(scope="session")
def hosts() -> Path:
    """node_modules/.bin of the installed hosts. Skips, saying why, only where Node.js is absent and cannot
    be installed; a registry that cannot be reached fails."""
    try:
        found = node.find()
    except (node.Unavailable, OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"the real hosts need Node.js, which is absent and could not be installed: {e}")
    try:
        if os.environ.get(VERSIONS) == "latest":
            return _latest(found) / "node_modules" / ".bin"
        node.npm_ci(found, HERE, INSTALL, LINKS)
    except node.Unavailable as e:
        pytest.fail(str(e))
    return HERE / "node_modules" / ".bin"


@pytest.fixture
def store(tmp_path: Path, daemons: Daemons) -> str:
    """A real daemon with one tenant, whose token is TOKEN, and the routes the snippets name."""
    return daemon_with_token(daemons, tmp_path / "data", TOKEN, ROUTES, tenant="hosts")
