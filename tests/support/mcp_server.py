"""`attachstore mcp` as a real process in tests: its command, a configuration and a workspace for it, and the
server started over stdio (spoken to raw) or over streamable HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemons, free_port, wait_ready
from tests.support.images import png

# Warnings are errors in the server too: a deprecated SDK call would end it, and fail the test.
PYTHON = [sys.executable, "-X", "dev", "-W", "error", "-m", "attachstore"]


def initialize(id: int) -> dict[str, Any]:
    """The JSON-RPC `initialize` request, as request `id`."""
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }


def workspace(tmp_path: Path) -> Path:
    """`tmp_path`/ws, holding shot.png (a 40x30 PNG)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "shot.png").write_bytes(png(40, 30))
    return root


def configured(tmp_path: Path, routes: str) -> Path:
    """`tmp_path`/attachstore.toml: the data dir `tmp_path`/data, one decode worker, and `routes` (TOML)."""
    path = tmp_path / "attachstore.toml"
    path.write_text(
        f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n[admission]\ndecode_workers = 1\n{routes}"
    )
    return path


def daemon_with_token(daemons: Daemons, data: Path, token: str, routes: str, tenant: str = "alpha") -> str:
    """A real daemon's URL: its data dir `data`, one decode worker, `routes` (TOML), and one tenant whose
    token is `token` (what an MCP server with --url gets from $ATTACHSTORE_TOKEN)."""
    config = data.parent / f"{data.name}.toml"
    digest = hashlib.sha256(token.encode()).hexdigest()
    config.write_text(
        f"data_dir = {json.dumps(str(data))}\n[admission]\ndecode_workers = 1\n{routes}"
        f'[[tenants]]\nname = "{tenant}"\ntoken_sha256 = "{digest}"\n'
    )
    return daemons.start("--config", str(config), command=[*PYTHON, "serve"], ready="/healthz").url


def stdio(config: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """`attachstore mcp --config CONFIG` in `cwd`, its stdin, stdout and stderr pipes."""
    return subprocess.Popen(
        [*PYTHON, "mcp", "--config", str(config)],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def http_server(config: Path, cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`attachstore mcp --http` on a free port with the route `vision`, in `cwd`, once it listens: the
    process and the MCP endpoint's URL."""
    port = free_port()
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [*PYTHON, "mcp", "--config", str(config), "--route", "vision", "--http", f"127.0.0.1:{port}"],
        cwd=cwd,
        stderr=subprocess.PIPE,
    )
    try:
        # Any answer of the MCP endpoint (a GET without an MCP session is refused) means it listens.
        await asyncio.to_thread(wait_ready, f"http://127.0.0.1:{port}/mcp", proc, (400, 405, 406))
    except BaseException:
        proc.kill()
        await asyncio.to_thread(proc.communicate)
        raise
    return proc, f"http://127.0.0.1:{port}/mcp"
