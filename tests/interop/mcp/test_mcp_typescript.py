"""`attachstore mcp` through the official MCP TypeScript SDK's client (@modelcontextprotocol/sdk, the one
TypeScript hosts build on): client.ts, compiled with `tsc --strict` and run with Node, starts the server over
stdio and checks the tools, the refusals, the resources, roots and the per-host structuredContent rule."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import node
from tests.support.images import png

HERE = Path(__file__).parent
CONFIG = '[admission]\ndecode_workers = 1\n[routes."vision"]\ninput_modalities = ["text", "image"]\n'


@pytest.fixture(scope="module")
def built() -> node.Node:
    found = node.require(HERE)
    compiled = subprocess.run(
        [found.node, str(HERE / "node_modules" / "typescript" / "bin" / "tsc"), "-p", str(HERE), "--strict"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return found


def test_the_typescript_sdk_client_over_stdio(built: node.Node, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shot.png").write_bytes(png(40, 30))
    (ws / "notes.txt").write_text("no image\n")
    (tmp_path / "secret.png").write_bytes(png(4, 4, seed=1))
    config = tmp_path / "attachstore.toml"
    config.write_text(f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n{CONFIG}")
    done = subprocess.run(
        [built.node, str(HERE / "dist" / "client.js"), sys.executable, str(config), str(ws)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "tour: ok",
        "roots: ok",
        "claude-code: ok",
        "codex-mcp-client: ok",
        "OK",
    ]
    with sqlite3.connect(tmp_path / "data" / "index.sqlite3") as db:
        [(holds,)] = db.execute("SELECT count(*) FROM holds WHERE session = 'ts-1'").fetchall()
    assert holds == 1
