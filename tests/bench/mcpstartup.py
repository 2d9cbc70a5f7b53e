"""The mcp scenario: how soon `attachstore mcp` answers `initialize` over stdio, against the floor: the
smallest server on the same MCP SDK (its low-level `Server` with one tool, nothing else imported), whose
start-up is the SDK's own. Each start is a new process, timed as a host sees it: from the spawn, through
writing the `initialize` request line, to reading the response line. Codex gives up on a server that is slow
to start.

Both sides read their bytecode from one cache made for the run (PYTHONPYCACHEPREFIX, filled by a first start
of each that is not measured): an installed package has its bytecode, while a checkout run with
PYTHONDONTWRITEBYTECODE would compile attachstore's modules again at every start and the SDK's not at all."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.support.mcp_server import configured, initialize

from .procs import attachstore_command
from .stats import alternate, paired_ratio, summary

FLOOR = """\
import anyio
import mcp.types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="echo")])


async def main():
    server = Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""
ROUTES = '[routes."vision"]\ninput_modalities = ["text", "image"]\n'
REQUEST = json.dumps(initialize(1)).encode() + b"\n"
ANSWER_SECONDS = 60.0  # a start-up that takes longer has failed


def start(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Seconds from the spawn to the `initialize` response line; the process is then ended by closing its
    stdin, as hosts do."""
    with open(log, "ab") as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        proc.stdin.write(REQUEST)
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], ANSWER_SECONDS)
        line = proc.stdout.readline() if ready else b""
        took = time.perf_counter() - started
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("id") != 1 or "result" not in answer:
        tail = log.read_bytes()[-2000:].decode(errors="replace")
        raise RuntimeError(
            f"{command[-3:]}: no initialize result within {ANSWER_SECONDS:g} s: {line[:300]!r}\n{tail}"
        )
    return took


def startup(work: Path, rounds: int) -> dict[str, Any]:
    base = work / "mcp-startup"
    workspace = base / "ws"
    workspace.mkdir(parents=True)
    floor_script = base / "floor.py"
    floor_script.write_text(FLOOR)
    config = configured(base, ROUTES)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    ours = [*attachstore_command(), "mcp", "--config", str(config)]
    # What the hosts' snippets run: a client of a daemon. None listens there; `initialize` asks nothing of it.
    remote = [*attachstore_command(), "mcp", "--url", "http://127.0.0.1:9", "--route", "vision"]
    floor = [sys.executable, str(floor_script)]

    def side(command: list[str], log: Path) -> Any:
        return lambda _r: {"ms": start(command, workspace, env, log) * 1000}

    a_side, f_side = side(ours, base / "attachstore.log"), side(floor, base / "floor.log")
    u_side = side(remote, base / "attachstore-url.log")
    a_side(-1), u_side(-1), f_side(-1)  # fill the bytecode cache
    a, f = alternate(rounds, a_side, f_side)
    u, uf = alternate(rounds, u_side, f_side)
    return {
        "workload": (
            "a new process per start, over stdio: spawn, write the initialize request line, read the "
            "response line; `attachstore mcp --config FILE` (a data dir, one route), then `attachstore mcp "
            f"--url URL` (a daemon's client), each against the floor, one start of each a round, {rounds} "
            "rounds each"
        ),
        "floor": "the MCP SDK's low-level Server with one tool over stdio_server(), nothing else imported",
        "sdk": metadata.version("mcp"),
        "attachstore": _side(a),
        "floor_sdk": _side(f),
        "ratio": paired_ratio(a, f, "ms"),
        "url": {"attachstore": _side(u), "floor_sdk": _side(uf), "ratio": paired_ratio(u, uf, "ms")},
    }


def _side(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out = summary(samples, ("ms",))
    out.pop("errors", None)
    out["min_ms"] = min(s["ms"] for s in samples)
    return out
