"""The wrap scenario: `attachstore mcp wrap -- SERVER` against SERVER alone (docs/mcp.md, "Gate another
server"). SERVER is the smallest stdio MCP server there is, raw JSON-RPC lines answered from a loop (its
source is here), so that the figures are the wrapper's: how many tool calls a second pass through it
without images, one at a time as a host makes them, against the bare server; and what a call whose result
carries an image costs more through it, against the gate's own cost for that image (its admission through
the service, as the daemon's handler calls it)."""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import msgspec

from attachstore.config import Config
from attachstore.service import Store, Upload
from tests.support.images import encode, ui_screenshot

from .procs import attachstore_command

SERVER = """\
import json, sys
image = open(sys.argv[1]).read()
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "bench", "version": "1"}}
    elif message["params"]["name"] == "image":
        result = {"content": [{"type": "image", "data": image, "mimeType": "image/png"}]}
    else:
        result = {"content": [{"type": "text", "text": "pong"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\\n")
    sys.stdout.flush()
"""
ROUTE = '[routes."vision"]\ninput_modalities = ["text", "image"]\nmax_request_side = 1568\n'
IMAGE = (1280, 800)  # a screenshot within the route: stored as it came, shown as stored


class _Session:
    """One server process, spoken to one request at a time."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.id = 0
        self.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}})

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self.id += 1
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}).encode()
        )
        stdin.write(b"\n")
        stdin.flush()
        answer = json.loads(_line(stdout))
        if "result" not in answer:
            raise RuntimeError(f"wrap: {method} answered {str(answer)[:300]}")
        return answer["result"]

    def tool(self, name: str) -> Any:
        return self.call("tools/call", {"name": name, "arguments": {}})

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _line(stdout: IO[bytes]) -> bytes:
    line = stdout.readline()
    if not line:
        raise RuntimeError("wrap: the server ended before it answered")
    return line


def _calls(session: _Session, name: str, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        session.tool(name)
    return time.perf_counter() - started


async def _admission(data_dir: Path, image: bytes, rounds: int) -> float:
    """The gate's own cost for the image: its admission (source mcp) through the service, median."""
    config = msgspec.convert({"data_dir": str(data_dir), "routes": {}}, Config)
    store = await Store.open(config)
    try:
        took = []
        for _ in range(rounds + 1):  # the first loads the decoders
            started = time.perf_counter()
            await store.admit([Upload.of_bytes(image)], "user")
            took.append(time.perf_counter() - started)
        return statistics.median(took[1:])
    finally:
        await store.close()


def wrap(work: Path, rounds: int, calls: int) -> dict[str, Any]:
    base = work / "wrap"
    base.mkdir()
    server = base / "server.py"
    server.write_text(SERVER)
    image = encode(ui_screenshot(*IMAGE), "PNG")
    image_file = base / "image.b64"
    image_file.write_text(base64.b64encode(image).decode())
    config = base / "attachstore.toml"
    config.write_text(f"data_dir = {json.dumps(str(base / 'data'))}\n{ROUTE}")
    bare = [sys.executable, str(server), str(image_file)]
    wrapped = [
        *attachstore_command(),
        "mcp",
        "wrap",
        "--config",
        str(config),
        "--route",
        "vision",
        "--",
        *bare,
    ]
    sides = {"bare": _Session(bare, base), "wrapped": _Session(wrapped, base)}
    try:
        for session in sides.values():  # unmeasured: the wrapper's store opened, the decoders loaded
            session.tool("image")
        text: dict[str, list[float]] = {"bare": [], "wrapped": []}
        images: dict[str, list[float]] = {"bare": [], "wrapped": []}
        for r in range(rounds):
            order = ["bare", "wrapped"] if r % 2 == 0 else ["wrapped", "bare"]
            for side in order:
                text[side].append(calls / _calls(sides[side], "text", calls))
                images[side].append(_calls(sides[side], "image", 1) * 1000)
    finally:
        for session in sides.values():
            session.close()
    admission_ms = asyncio.run(_admission(base / "gate-data", image, rounds)) * 1000
    added = [w - b for w, b in zip(images["wrapped"], images["bare"], strict=True)]
    return {
        "workload": (
            f"tools/call one at a time over stdio: {calls} calls whose result is a short text, then one "
            f"whose result is a {IMAGE[0]}x{IMAGE[1]} PNG screenshot, through `attachstore mcp wrap` and to "
            f"the bare server alternately, {rounds} rounds"
        ),
        "floor": "the bare server (calls a second); the image's admission through the service (added ms)",
        "text_calls_per_s": statistics.median(text["wrapped"]),
        "bare_calls_per_s": statistics.median(text["bare"]),
        "text_ratio": statistics.median(w / b for w, b in zip(text["wrapped"], text["bare"], strict=True)),
        "image_added_ms": statistics.median(added),
        "admission_ms": admission_ms,
        "image_ratio": statistics.median(added) / admission_ms,
    }
