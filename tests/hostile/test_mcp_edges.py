"""`attachstore mcp` at its edges, as a real process: signals while the host keeps stdin open, a daemon that
cannot be reached or refuses the token, malformed JSON-RPC, hostile cursors, a hard link out of the
workspace, and a client that names `file:///` as its root over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.shared.message import SessionMessage

from attachstore.mcp import Local, Roots, build
from tests.conftest import MakeConfig
from tests.mcp.conftest import ROUTES as MCP_ROUTES
from tests.support.daemon import free_port
from tests.support.images import png
from tests.support.mcp_server import PYTHON, configured, http_server, initialize, stdio, workspace
from tests.support.waiting import HANG, until

ROUTES = '[routes."vision"]\ninput_modalities = ["text", "image"]\n'


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return workspace(tmp_path)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return configured(tmp_path, ROUTES)


class Raw:
    """`attachstore mcp` over stdio, spoken to line by line; stdin stays open until the test closes it."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*PYTHON, "mcp", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.err: list[bytes] = []
        self.pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err.append), daemon=True),
        ]
        for pump in self.pumps:
            pump.start()
        self.next_id = 1

    @staticmethod
    def _pump(stream: IO[bytes], put: Any) -> None:
        for line in stream:
            put(line)

    def send(self, message: dict[str, Any] | bytes) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.stdin.write(line + b"\n")
        self.stdin.flush()

    def answer(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=HANG)
        except queue.Empty:
            raise AssertionError(f"no answer after {HANG:g} s; stderr: {self.stderr()[-2000:]}") from None
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.next_id += 1
        self.send(message)
        answer = self.answer()
        assert answer.get("id") == message["id"], answer
        return answer

    def start(self) -> None:
        self.send(initialize(0))
        assert self.answer()["result"]["serverInfo"]["name"] == "attachstore"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def tool_text(self, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        result = self.call("tools/call", {"name": name, "arguments": arguments})["result"]
        texts = [b["text"] for b in result["content"] if b["type"] == "text"]
        return bool(result.get("isError")), texts[0]

    def stderr(self) -> str:
        return b"".join(self.err).decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pump in self.pumps:
            pump.join(HANG)
        for stream in (self.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def raw() -> Iterator[Any]:
    started: list[Raw] = []

    def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Raw:
        r = Raw(*args, cwd=cwd, env=env)
        started.append(r)
        r.start()
        return r

    yield start
    for r in started:
        r.stop()


# Finding 9: a host that sends SIGTERM or SIGINT and keeps stdin open (Claude Code, at the end of every
# session) sees the server end cleanly, without closing stdin first.


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_it_cleanly_while_stdin_stays_open(
    raw: Any, config: Path, ws: Path, sig: signal.Signals
) -> None:
    server: Raw = raw("--config", str(config), "--route", "vision", cwd=ws)
    error, _ = server.tool_text("read_image", {"path": "shot.png"})  # the store is open now
    assert not error
    data = config.parent / "data"
    assert (data / "index.sqlite3-wal").exists()
    server.proc.send_signal(sig)
    until(lambda: server.proc.poll() is not None, f"the server to exit on {sig.name} with stdin open")
    assert server.proc.returncode == 0, server.stderr()
    assert "Traceback" not in server.stderr()
    # The store was closed: SQLite checkpoints and removes the write-ahead log when its last connection
    # closes, which a killed process leaves behind.
    assert sorted(p.name for p in data.glob("index.sqlite3*")) == ["index.sqlite3"]


def test_signals_that_keep_coming_while_it_stops_do_not_cut_its_close_short(
    raw: Any, config: Path, ws: Path
) -> None:
    """Claude Code sends SIGINT, then SIGTERM 100 ms later: whenever the second lands, the store's close
    included, the server ends cleanly. Here SIGTERMs keep coming until it has gone."""
    server: Raw = raw("--config", str(config), "--route", "vision", cwd=ws)
    error, _ = server.tool_text("read_image", {"path": "shot.png"})
    assert not error
    server.proc.send_signal(signal.SIGINT)

    def gone() -> bool:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
        return server.proc.poll() is not None

    until(gone, "the server to exit while SIGTERMs keep coming")
    assert server.proc.returncode == 0, server.stderr()
    assert "Traceback" not in server.stderr()
    data = config.parent / "data"
    assert sorted(p.name for p in data.glob("index.sqlite3*")) == ["index.sqlite3"]


def test_the_requests_read_before_stdin_ends_are_answered(config: Path, ws: Path) -> None:
    """All at once, as from a file: the end of stdin ends the server only after its answers (reading the
    whole input in one go must not leave the last requests to a dispatcher that is already closing)."""
    pings = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(1, 21)]
    lines = [initialize(0), {"jsonrpc": "2.0", "method": "notifications/initialized"}, *pings]
    proc = stdio(config, ws)
    out, err = proc.communicate(b"".join(json.dumps(m).encode() + b"\n" for m in lines), timeout=HANG)
    assert proc.returncode == 0, err
    assert sorted(json.loads(line)["id"] for line in out.splitlines()) == list(range(21))


# Finding 8: a daemon that cannot be reached, or refuses the token, leaves the resource lists empty (not a
# protocol error, on which Claude Code and gemini-cli drop every tool of the server); the tools stay listed
# and say why when called.


def _degrades(server: Raw, said: str) -> None:
    for method, key in (("resources/list", "resources"), ("resources/templates/list", "resourceTemplates")):
        answer = server.call(method)
        assert "result" in answer, f"{method}: {answer}"
        assert isinstance(answer["result"][key], list)
    assert server.call("resources/list")["result"]["resources"] == []
    tools = server.call("tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == ["read_image", "read_attachment"]
    error, text = server.tool_text("read_image", {"path": "shot.png"})
    assert error
    assert said in text
    until(lambda: "resources/list" in server.stderr(), "the cause in the server's log")
    assert "Traceback" not in server.stderr()


def test_an_unreachable_daemon_leaves_the_resource_lists_empty(raw: Any, ws: Path) -> None:
    stopped = f"http://127.0.0.1:{free_port()}"
    server: Raw = raw("--url", stopped, "--route", "vision", cwd=ws)
    _degrades(server, "the attachstore daemon is not reachable")


def test_a_wrong_token_leaves_the_resource_lists_empty(raw: Any, ws: Path, start_daemon: Any) -> None:
    daemon = start_daemon(**{'routes."vision"': {"input_modalities": ["text", "image"]}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")}
    env |= {"ATTACHSTORE_URL": daemon.url, "ATTACHSTORE_TOKEN": "ast_wrong"}
    server: Raw = raw("--route", "vision", cwd=ws, env=env)
    _degrades(server, "attachstore answered UNAUTHORIZED")


# Finding 13: protocol odds. Invalid params are -32602 without a traceback; input that is no JSON-RPC
# message gets the JSON-RPC 2.0 error answer (id null) instead of silence.


def test_a_cursor_not_of_this_server_is_invalid_params(raw: Any, config: Path, ws: Path) -> None:
    server: Raw = raw("--config", str(config), cwd=ws)
    for cursor in ["²", "9" * 5000, "-1", " 1", "", "1e3"]:
        answer = server.call("resources/list", {"cursor": cursor})
        assert answer.get("error", {}).get("code") == types.INVALID_PARAMS, (cursor[:10], answer)
    assert server.call("resources/list", {"cursor": "100"})["result"] == {"resources": []}
    assert "Traceback" not in server.stderr()


MALFORMED = [
    (b"{", types.PARSE_ERROR),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "ping"', types.PARSE_ERROR),
    (b"\xff\xfe", types.PARSE_ERROR),
    (b"[]", types.INVALID_REQUEST),
    (b"[1, 2]", types.INVALID_REQUEST),
    (b"42", types.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "resources/list", "params": "x"}', types.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "resources/list"}', types.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', types.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', types.INVALID_REQUEST),
    (b'{"jsonrpc": "1.0", "id": 7, "method": "ping"}', types.INVALID_REQUEST),
    (b'{"id": 7, "method": "ping"}', types.INVALID_REQUEST),
]


def test_malformed_input_gets_the_json_rpc_error_answer(raw: Any, config: Path, ws: Path) -> None:
    server: Raw = raw("--config", str(config), cwd=ws)
    for line, code in MALFORMED:
        server.send(line)
        answer = server.answer()
        assert answer.get("id", "absent") is None, (line, answer)
        assert answer.get("error", {}).get("code") == code, (line, answer)
        assert server.call("ping")["result"] == {}  # and the connection goes on
    assert "Traceback" not in server.stderr()


async def test_a_bug_in_a_handler_is_an_internal_error_not_code_0(
    make_config: MakeConfig, ws: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Over the streams stdio and HTTP serve (the SDK's JSON-RPC dispatcher, which answers an unexpected
    exception with code 0 and its text), a bug is -32603 and its traceback goes to the log only."""

    async def broken(self: Local) -> list[Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Local, "held", broken)
    backend = Local(make_config(routes=MCP_ROUTES), "s", "vision")
    server = build(backend, Roots([ws], cache=True, env={}))
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](8)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](8)

    async def ask(id: int, method: str, params: dict[str, Any] | None = None) -> Any:
        request = types.JSONRPCRequest(jsonrpc="2.0", id=id, method=method, params=params)
        await to_server.send(SessionMessage(request))
        return (await from_server.receive()).message

    async with anyio.create_task_group() as tg, to_server, from_server:
        tg.start_soon(server.run, server_reads, server_writes, server.create_initialization_options())
        client = {"name": "t", "version": "1"}
        await ask(
            0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        )
        answer = await ask(1, "resources/list")
        tg.cancel_scope.cancel()
    assert isinstance(answer, types.JSONRPCError)
    assert (answer.error.code, answer.error.message) == (
        types.INTERNAL_ERROR,
        "Internal error; the server's log says why",
    )
    assert "RuntimeError: a bug" in caplog.text


def test_a_hard_link_to_a_file_outside_the_workspace_is_refused(
    raw: Any, config: Path, ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.png").write_bytes(png(20, 20, seed=9))
    os.link(outside / "secret.png", ws / "linked.png")
    server: Raw = raw("--config", str(config), "--route", "vision", "--workspace", str(ws), cwd=ws)
    error, text = server.tool_text("read_image", {"path": "linked.png"})
    assert error, text
    assert text == (
        "read_image: 'linked.png' has other hard links, which may be outside the workspace; copy it into "
        "the workspace (cp, not ln or cp -l) to read it."
    )
    assert server.call("resources/list")["result"]["resources"] == []
    assert not server.tool_text("read_image", {"path": "shot.png"})[0]  # a file with one link is read


def test_a_directory_swapped_for_a_symlink_is_never_a_store_failure(
    raw: Any, config: Path, ws: Path, tmp_path: Path
) -> None:
    """A swapper turns ws/d back and forth between a directory holding x.png and a symlink to one outside,
    while the model reads d/x.png: each read is the image, "not found", "outside" or "changed", never a
    failure of the store."""
    (ws / "d").mkdir()
    (ws / "d" / "x.png").write_bytes(png(8, 8, seed=1))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.png").write_bytes(png(8, 8, seed=2))
    server: Raw = raw("--config", str(config), "--route", "vision", "--workspace", str(ws), cwd=ws)
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        d, held, link = ws / "d", ws / ".d", ws / ".l"
        while not stop.is_set():
            os.rename(d, held)
            os.symlink(tmp_path / "elsewhere", link)
            os.rename(link, d)
            os.unlink(d)
            os.rename(held, d)
            swaps[0] += 1

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    texts = []
    try:
        for _ in range(400):
            texts.append(server.tool_text("read_image", {"path": "d/x.png"}))
    finally:
        stop.set()
        swapper.join()
    assert swaps[0] > 0
    failures = [t for _, t in texts if "cannot use its store" in t or "failed inside" in t]
    assert not failures, failures[:3]


# Finding 5: over streamable HTTP, a client's roots only narrow the workspace the server was started with
# (--workspace, else its directory); a path outside is refused in one text whatever is there.


def _text(result: types.CallToolResult) -> str:
    [text] = [b for b in result.content if isinstance(b, types.TextContent)]
    return text.text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_over_http_client_roots_only_narrow_the_workspace(
    config: Path, ws: Path, tmp_path: Path, mode: str
) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.png").write_bytes(png(20, 20, seed=9))
    (outside / "dir").mkdir()
    sub = ws / "sub"
    sub.mkdir()
    (sub / "inner.png").write_bytes(png(10, 10, seed=4))
    proc, url = await http_server(config, ws)
    given: list[str] = []

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in given])

    try:
        given[:] = ["file:///"]
        async with Client(url, mode=mode, list_roots_callback=roots) as c:
            secret = await c.call_tool("read_image", {"path": str(outside / "secret.png")})
            assert secret.is_error
            refusals = {
                _text(await c.call_tool("read_image", {"path": str(path)})).replace(str(path), "P")
                for path in (
                    outside / "secret.png",
                    outside / "missing.png",
                    outside / "dir",
                    outside,
                    Path("/proc/self/environ"),
                )
            }
            assert refusals == {
                f"read_image: 'P' is outside the workspace; only files under {ws} can be read."
            }
            shot = await c.call_tool("read_image", {"path": str(ws / "shot.png")})
            assert not shot.is_error, shot
        given[:] = [sub.as_uri()]  # inside the workspace: narrows it
        async with Client(url, mode=mode, list_roots_callback=roots) as c:
            assert not (await c.call_tool("read_image", {"path": "inner.png"})).is_error
            shot = await c.call_tool("read_image", {"path": str(ws / "shot.png")})
            assert "is outside the workspace; only files under " + str(sub) in _text(shot)
        given[:] = [outside.as_uri()]  # beside it: none of it is readable; the workspace is as configured
        async with Client(url, mode=mode, list_roots_callback=roots) as c:
            secret = await c.call_tool("read_image", {"path": "secret.png"})
            assert _text(secret) == f"read_image: 'secret.png' does not exist in the workspace ({ws})."
            assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=HANG)
    assert proc.returncode == 0, err
