"""The hosts, installed once per test session: from this folder's package-lock.json at the versions tested,
or, with ATTACHSTORE_HOSTS=latest (a scheduled check against new releases), each host's latest release."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.interop.hosts.scenario import ROUTES, TOKEN
from tests.support import node
from tests.support.daemon import Daemons

HERE = Path(__file__).parent
VERSIONS = "ATTACHSTORE_HOSTS"  # "latest": each host's newest release instead of the lock's


def _latest(found: node.Node) -> Path:
    """A folder of its own with every host at `latest`, installed afresh (without running install scripts,
    as `npm ci` here: the hosts need none)."""
    where = node.work() / "hosts-latest"
    where.mkdir(exist_ok=True)
    pins = json.loads((HERE / "package.json").read_text())["dependencies"]
    (where / "package.json").write_text(
        json.dumps({"name": "hosts-latest", "private": True, "dependencies": dict.fromkeys(pins, "latest")})
    )
    done = subprocess.run(
        [found.npm, "install", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-online"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"npm install of the latest hosts: {done.stdout}{done.stderr}"
    return where


@pytest.fixture(scope="session")
def hosts() -> Path:
    """node_modules/.bin of the installed hosts. Skips, saying why, only where Node.js is absent and cannot
    be installed; a registry that cannot be reached fails."""
    try:
        found = node.find()
    except (node.Unavailable, OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"the real hosts need Node.js, which is absent and could not be installed: {e}")
    if os.environ.get(VERSIONS) == "latest":
        return _latest(found) / "node_modules" / ".bin"
    try:
        node.npm_ci(found, HERE)
    except node.Unavailable as e:
        pytest.fail(str(e))
    return HERE / "node_modules" / ".bin"


@pytest.fixture
def store(tmp_path: Path, daemons: Daemons) -> str:
    """A real daemon with one tenant, whose token is TOKEN, and the routes the snippets name."""
    config = tmp_path / "daemon.toml"
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    config.write_text(
        f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n[admission]\ndecode_workers = 1\n{ROUTES}"
        f'[[tenants]]\nname = "hosts"\ntoken_sha256 = "{digest}"\n'
    )
    return daemons.start("--config", str(config), ready="/healthz").url
