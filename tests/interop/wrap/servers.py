"""The real third-party MCP servers of this folder's package.json, installed from its package-lock.json, and
client.ts compiled: for test_wrap_servers.py, and for the host that runs a wrapped server
(tests/interop/hosts/test_wrapped_server.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import node

HERE = Path(__file__).parent
EVERYTHING = "@modelcontextprotocol/server-everything"
FILESYSTEM = "@modelcontextprotocol/server-filesystem"


def installed() -> node.Node:
    """Node with the servers installed and the client compiled (`tsc --strict`). Skips, saying why, only where
    Node.js is absent and cannot be installed; a registry that cannot be reached fails."""
    try:
        found = node.find()
    except (node.Unavailable, OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"the MCP servers need Node.js, which is absent and could not be installed: {e}")
    try:
        node.npm_ci(found, HERE)
    except node.Unavailable as e:
        pytest.fail(str(e))
    found.run(HERE, str(HERE / "node_modules" / "typescript" / "bin" / "tsc"), "-p", str(HERE), "--strict")
    return found


def command(package: str) -> Path:
    """The server's script, from its package's `bin`, as npx would run it (with node)."""
    where = HERE / "node_modules" / package
    bins: dict[str, str] = json.loads((where / "package.json").read_text())["bin"]
    [script] = bins.values()
    return where / script
