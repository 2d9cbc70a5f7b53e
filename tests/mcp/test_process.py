"""`attachstore mcp` as hosts run it: a real process, spoken to by the MCP Python SDK's client over stdio (on
a data dir, and with --url on a real daemon) and over streamable HTTP; its flags, and how it stops."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters

from attachstore.cli import main
from attachstore.client import AsyncClient
from tests.mcp.conftest import shot_metadata
from tests.support.daemon import Daemons, free_port
from tests.support.mcp_server import (
    PYTHON,
    configured,
    daemon_with_token,
    http_server,
    initialize,
    stdio,
    workspace,
)

ROUTES = '[routes."vision"]\ninput_modalities = ["text", "image"]\n[routes."small"]\n'
ROUTES += 'input_modalities = ["text", "image"]\nmax_request_side = 16\n'
TOKEN = "ast_mcp-test-token"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = workspace(tmp_path)
    (root / "notes.txt").write_text("no image\n")
    return root


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return configured(tmp_path, ROUTES)


def text_of(result: types.CallToolResult, error: bool = True) -> str:
    """The text block of a refusal (or, with error=False, of an image result)."""
    assert result.is_error is error, result
    [text] = [b for b in result.content if isinstance(b, types.TextContent)]
    return text.text


def server(*args: str, cwd: Path, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=PYTHON[0], args=[*PYTHON[1:], "mcp", *args], cwd=str(cwd), env=env)


async def check_tour(c: Client, ws: Path) -> str:
    """What every transport and backend must do alike; returns the ref read."""
    shot = (ws / "shot.png").read_bytes()
    assert [t.name for t in (await c.list_tools()).tools] == ["read_image", "read_attachment"]
    result = await c.call_tool("read_image", {"path": "shot.png"})
    assert not result.is_error, result
    image, text = result.content
    assert isinstance(image, types.ImageContent)
    assert isinstance(text, types.TextContent)
    assert base64.b64decode(image.data) == shot
    assert result.structured_content == shot_metadata(ws)
    assert "(UNSUPPORTED_IMAGE_TYPE)" in text_of(await c.call_tool("read_image", {"path": "notes.txt"}))
    outside = await c.call_tool("read_image", {"path": "../attachstore.toml"})
    assert "outside the workspace" in text_of(outside)
    [again, _] = (await c.call_tool("read_attachment", {"ref": sha256(shot)})).content
    assert isinstance(again, types.ImageContent)
    assert base64.b64decode(again.data) == shot
    [resource] = (await c.list_resources()).resources
    [blob] = (await c.read_resource(str(resource.uri))).contents
    assert isinstance(blob, types.BlobResourceContents)
    assert base64.b64decode(blob.blob) == shot
    return sha256(shot)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_on_the_data_dir(config: Path, ws: Path, tmp_path: Path, mode: str) -> None:
    params = server(
        "--config",
        str(config),
        "--workspace",
        str(ws),
        "--route",
        "vision",
        "--session",
        "s-1",
        "--session-ttl",
        "2h",
        cwd=ws,
    )
    async with Client(params, mode=mode) as c:
        ref = await check_tour(c, ws)
    async with Client(params, mode=mode) as c:  # the same session in a new process
        assert [str(r.uri) for r in (await c.list_resources()).resources] == [
            f"attachstore://sha256/{ref[7:]}"
        ]
    with sqlite3.connect(config.parent / "data" / "index.sqlite3") as db:
        assert db.execute("SELECT route, ttl FROM sessions WHERE id = 's-1'").fetchall() == [("vision", 7200)]


async def test_stdio_without_a_session_makes_one_per_process(config: Path, ws: Path) -> None:
    params = server("--config", str(config), "--route", "vision", cwd=ws)  # the cwd is the workspace
    for _ in range(2):
        async with Client(params, mode="legacy") as c:
            assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error
            assert len((await c.list_resources()).resources) == 1
    with sqlite3.connect(config.parent / "data" / "index.sqlite3") as db:
        sessions = db.execute("SELECT id, ttl FROM sessions").fetchall()
    assert len(sessions) == 2
    assert all(id.startswith("mcp-") for id, _ in sessions)
    assert [ttl for _, ttl in sessions] == [30 * 86400] * 2  # [mcp] session_ttl's default


@pytest.fixture
def daemon(tmp_path: Path, daemons: Daemons) -> str:
    """A real daemon with one tenant, whose token the MCP server gets from $ATTACHSTORE_TOKEN."""
    return daemon_with_token(daemons, tmp_path / "daemon-data", TOKEN, ROUTES)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_on_a_daemon(daemon: str, ws: Path, tmp_path: Path, mode: str) -> None:
    args = ("--url", daemon, "--workspace", str(ws), "--route", "vision", "--session", "remote-1")
    async with Client(server(*args, cwd=tmp_path, env={"ATTACHSTORE_TOKEN": TOKEN}), mode=mode) as c:
        ref = await check_tour(c, ws)
    async with AsyncClient(daemon, token=TOKEN) as store:
        session = await store.get_session("remote-1")
    assert (session.route, session.holds, session.ttl) == ("vision", [ref], 30 * 86400)


async def test_on_a_daemon_the_routes_limits_and_its_errors_reach_the_model(
    daemon: str, ws: Path, tmp_path: Path
) -> None:
    args = ("--url", daemon, "--workspace", str(ws), "--route", "small")
    async with Client(server(*args, cwd=tmp_path, env={"ATTACHSTORE_TOKEN": TOKEN}), mode="legacy") as c:
        result = await c.call_tool("read_image", {"path": "shot.png"})
        assert "Shown here at 16x12, within the model's request limits." in text_of(result, error=False)
    env = {"ATTACHSTORE_URL": daemon, "ATTACHSTORE_TOKEN": "ast_wrong"}
    async with Client(server("--workspace", str(ws), cwd=tmp_path, env=env), mode="legacy") as c:
        result = await c.call_tool("read_image", {"path": "shot.png"})
        assert "attachstore answered UNAUTHORIZED" in text_of(result)
    stopped = f"http://127.0.0.1:{free_port()}"
    async with Client(server("--url", stopped, "--workspace", str(ws), cwd=tmp_path), mode="legacy") as c:
        result = await c.call_tool("read_image", {"path": "shot.png"})
        assert "the attachstore daemon is not reachable" in text_of(result)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_streamable_http_asks_each_client_for_its_roots(
    config: Path, ws: Path, tmp_path: Path, mode: str
) -> None:
    proc, url = await http_server(config, tmp_path)

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=ws.as_uri())])

    try:
        async with Client(url, mode=mode, list_roots_callback=roots) as c:
            await check_tour(c, ws)
        async with Client(url, mode=mode) as c:  # no roots: the server's cwd
            result = await c.call_tool("read_image", {"path": "ws/shot.png"})
            assert not result.is_error, result
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 0, err


def test_it_ends_when_the_client_closes_its_stdin(config: Path, ws: Path) -> None:
    proc = stdio(config, ws)
    out, err = proc.communicate(json.dumps(initialize(1)).encode() + b"\n", timeout=60)
    assert proc.returncode == 0, err
    answer = json.loads(out.splitlines()[0])
    assert answer["result"]["serverInfo"]["name"] == "attachstore"
    assert not (config.parent / "data").exists()  # the store is opened at the first call, not before


# A host gives a server little time to start (docs/performance.md, "MCP start-up"): until a tool is called,
# `attachstore mcp` imports neither the store and its gate (Pillow, the decode pool's metrics), render, the
# other commands' packages, nor the HTTP client (aiohttp). `make bench ARGS="--only mcp"` times it.
NOT_BEFORE_A_CALL = (
    "attachstore.client",
    "attachstore.gate",
    "attachstore.maintenance",
    "attachstore.render",
    "attachstore.service",
    "attachstore.transcripts",
    "aiohttp",
    "PIL",
    "prometheus_client",
)
LOADED = """
import atexit, json, sys
from attachstore.cli import main
out, *args = sys.argv[1:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.exit(main(args))
"""


@pytest.mark.parametrize("where", [[], ["--url", "http://127.0.0.1:9"]])
def test_until_a_tool_is_called_it_imports_no_store_and_no_http_client(
    config: Path, ws: Path, tmp_path: Path, where: list[str]
) -> None:
    loaded = tmp_path / "modules.json"
    done = subprocess.run(
        [*PYTHON[:-2], "-c", LOADED, str(loaded), "mcp", "--config", str(config), *where],
        input=json.dumps(initialize(1)).encode() + b"\n",
        cwd=ws,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "attachstore"
    modules = json.loads(loaded.read_text())
    assert [m for m in modules if any(m == h or m.startswith(h + ".") for h in NOT_BEFORE_A_CALL)] == []


def test_it_ends_cleanly_on_sigterm(config: Path, ws: Path) -> None:
    proc = stdio(config, ws)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(json.dumps(initialize(1)).encode() + b"\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--http", "0.0.0.0:8000"], "--http: '0.0.0.0' is not a loopback address"),
        (["--http", "127.0.0.1"], "--http: not HOST:PORT"),
        (["--workspace", "/no/such/dir"], "--workspace: /no/such/dir: not a directory"),
        (["--session", ".."], "--session: not a session id"),
        (["--url", "ftp://x"], "--url: base_url must be an http:// or https:// URL"),
    ],
)
def test_bad_flags_are_usage_errors(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "--data-dir", str(tmp_path / "data"), *args]) == 2
    assert said in capsys.readouterr().err
