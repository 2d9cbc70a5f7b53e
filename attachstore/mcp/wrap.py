"""`attachstore mcp wrap -- COMMAND [ARGS...]` (docs/mcp.md, "Gate another server"): COMMAND started as a
stdio MCP server, and every line passed on between it and the host as it came, both ways. Only the answers
to the host's own `tools/call`, `resources/read` and `tasks/result` requests that carry images are changed:
they go through the gate (gating.py) and are written once their images are gated, while every other line
goes on at once. No SDK session: it would parse, validate and write each message again, and drop what it
cannot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import select
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from . import pipes
from .gating import Gate, has_images, warm
from .texts import shows_structured_only

log = logging.getLogger(__name__)

Structured = Literal["auto", "always", "never"]
Key = tuple[bool, Any]  # a request id: (is a string, value), so that "1" and 1 stay apart
# The host's requests whose answers are gated, and the result each is answered with (tasks/result: the result
# of a tools/call that ran as a task).
GATED = {"tools/call": "tool", "tasks/result": "tool", "resources/read": "resource"}
STOP_GRACE = 5.0  # after a SIGTERM or SIGINT passed on, how long the server has to exit before SIGKILL
DRAIN_GRACE = 2.0  # after the server exits, how long a process it started may keep its stdout open
EXIT_NOT_FOUND, EXIT_NOT_RUNNABLE = 127, 126  # a shell's codes for a command it cannot start
TOKEN = "ATTACHSTORE_TOKEN"  # the wrapper's, not the server's


@dataclass(frozen=True, slots=True)
class WrapOptions:
    # structuredContent of a result whose images were changed: kept (always), dropped (never), or dropped
    # for the hosts that show it to the model in place of the content (auto).
    structured: Structured = "auto"


class _Message(msgspec.Struct):
    # What is looked at of a message; `params` and `result` are skipped unread.
    id: Any = msgspec.UNSET
    method: Any = None
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


class _Params(msgspec.Struct):
    clientInfo: Any = None  # initialize  # MCP's name


_one = msgspec.json.Decoder(_Message)
_many = msgspec.json.Decoder(list[msgspec.Raw])


def _messages(line: bytes) -> list[tuple[int | None, _Message]]:
    """The messages of a line, each with its place in a batch (None for a line of one message); none for a
    line that is no JSON. JSON that msgspec refuses but Python reads (NaN, which Python servers write) is
    read as Python reads it."""
    try:
        if line.lstrip()[:1] == b"[":
            return [(i, m) for i, raw in enumerate(_many.decode(line)) if (m := _message(raw)) is not None]
        return [(None, _one.decode(line))]
    except msgspec.DecodeError:
        pass
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return []
    items = enumerate(value) if isinstance(value, list) else [(None, value)]
    return [(i, m) for i, item in items if (m := _message(msgspec.json.encode(item))) is not None]


def _message(raw: bytes | msgspec.Raw) -> _Message | None:
    try:
        return _one.decode(raw)
    except msgspec.DecodeError:  # not an object
        return None


def _decoded(line: bytes) -> Any:
    try:
        return msgspec.json.decode(line)
    except msgspec.DecodeError:
        return json.loads(line)


def _key(id: Any) -> Key | None:
    if isinstance(id, bool) or not isinstance(id, str | int | float):
        return None
    return isinstance(id, str), id


def _params(m: _Message) -> _Params:
    if isinstance(m.params, msgspec.UnsetType):
        return _Params()
    try:
        return msgspec.json.decode(m.params, type=_Params)
    except msgspec.DecodeError:
        return _Params()


@dataclass(frozen=True, slots=True)
class _Pending:
    kind: str  # "tool" or "resource"


class Output:
    """The host's stdout: each line written whole, in the order given, by one thread of its own, so that the
    event loop never waits on the host and the descriptor stays as the host made it (a non-blocking one
    would be shared with every process that writes to the same pipe or terminal). Once the host has closed
    it, what is written is dropped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        self._lines: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]] | None] = queue.SimpleQueue()
        self._loop = asyncio.get_running_loop()
        # A daemon: a host that stops reading must not keep the process from exiting.
        self._thread = threading.Thread(target=self._run, name="host-stdout", daemon=True)
        self._thread.start()

    async def write(self, line: bytes) -> None:
        if self.closed:
            return
        done = self._loop.create_future()
        self._lines.put((line, done))
        await done

    async def close(self) -> None:
        self._lines.put(None)
        await asyncio.to_thread(self._thread.join, 1.0)

    def _run(self) -> None:
        while (item := self._lines.get()) is not None:
            line, done = item
            if not self.closed:
                try:
                    self._write(memoryview(line))
                except OSError:  # the host is gone (EPIPE): nothing it could read
                    self.closed = True
            self._loop.call_soon_threadsafe(_resolve, done)

    def _write(self, view: memoryview) -> None:
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:  # the host made the pipe non-blocking: wait until it takes more
                select.select([], [self.fd], [])


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class Proxy:
    """The host on one side, the server on the other, and the gate between them for the answers it
    changes. What it notes of the host's requests: the id and kind of each request whose answer is gated,
    and the client's name (from `initialize`)."""

    def __init__(self, gate: Gate, options: WrapOptions = WrapOptions()) -> None:
        self.gate = gate
        self.options = options
        self.pending: dict[Key, _Pending] = {}
        self.client = ""
        self.gating: set[asyncio.Task[None]] = set()

    async def run(self, command: list[str], host_in: int, host_out: int) -> int:
        """Until the server exits and its stdout ends: its exit code (128 + N for a signal N)."""
        env = {k: v for k, v in os.environ.items() if k != TOKEN}
        try:
            server = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env
            )
        except OSError as e:
            print(f"attachstore mcp wrap: cannot start {command[0]!r}: {e.strerror or e}", file=sys.stderr)
            return EXIT_NOT_FOUND if isinstance(e, FileNotFoundError) else EXIT_NOT_RUNNABLE
        assert server.stdin is not None
        assert server.stdout is not None
        out = Output(host_out)
        with _passed_on(server) as stop:
            to_server = asyncio.create_task(
                self._to_server(pipes.Reader(pipes.FdReads(host_in)), server.stdin)
            )
            from_server = asyncio.create_task(self._from_server(server.stdout, out))
            exited = asyncio.create_task(server.wait())
            await asyncio.wait({from_server, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not from_server.done():  # exited, and its stdout still open: what is in the pipe is read
                await asyncio.wait({from_server}, timeout=DRAIN_GRACE)
                from_server.cancel()
            code = await exited
            if stop.came:  # the host is going: answers still being gated would reach nobody
                for task in self.gating:
                    task.cancel()
            await asyncio.gather(from_server, *self.gating, return_exceptions=True)
            to_server.cancel()
            await asyncio.gather(to_server, return_exceptions=True)
        await out.close()
        return 128 - code if code < 0 else code

    async def _to_server(self, lines: pipes.Reader, stdin: asyncio.StreamWriter) -> None:
        try:
            while (line := await lines.line()) is not None:
                self._note(line)
                stdin.write(line)
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):  # the server is gone: its stdout says so
            return
        stdin.close()  # the host's end of input is the server's
        with contextlib.suppress(OSError):
            await stdin.wait_closed()

    def _note(self, line: bytes) -> None:
        for _, m in _messages(line):
            key = _key(m.id)
            if key is None or not isinstance(m.method, str):  # no request: an answer, or a notification
                continue
            if (kind := GATED.get(m.method)) is not None:
                warm()  # the answer may have images: what gating needs is imported meanwhile
                self.pending[key] = _Pending(kind)
            elif m.method == "initialize":
                info = _params(m).clientInfo
                name = info.get("name") if isinstance(info, dict) else None
                self.client = name if isinstance(name, str) else ""

    async def _from_server(self, stdout: asyncio.StreamReader, out: Output) -> None:
        lines = pipes.Reader(lambda: stdout.read(pipes.CHUNK))
        while (line := await lines.line()) is not None:
            await self._answer(line, out)

    async def _answer(self, line: bytes, out: Output) -> None:
        """A line of the server's: an answer with images to gate goes to a task of its own and is written
        when they are gated; every other line is written now, in its order."""
        if not self.pending:  # nothing awaited: not even parsed
            await out.write(line)
            return
        answers: list[tuple[int | None, Key, _Pending]] = []
        for position, m in _messages(line):
            key = _key(m.id)
            if key is None or m.method is not None:  # the server's own request, or a notification
                continue
            pending = self.pending.pop(key, None)
            if pending is not None and not isinstance(
                m.result, msgspec.UnsetType
            ):  # an error: nothing to gate
                answers.append((position, key, pending))
        value = _decoded(line) if answers else None
        gated = [a for a in answers if has_images(_result(value, a[0]), a[2].kind)]
        if not gated:
            await out.write(line)
            return
        task = asyncio.create_task(self._gated(line, value, gated, out))
        self.gating.add(task)
        task.add_done_callback(self.gating.discard)

    async def _gated(
        self, line: bytes, value: Any, gated: list[tuple[int | None, Key, _Pending]], out: Output
    ) -> None:
        ending = line[len(line.rstrip(b"\r\n")) :]
        try:
            changed = False
            for position, _, pending in gated:
                result = _result(value, position)
                if pending.kind == "resource":
                    new = await self.gate.resource_result(result)
                else:
                    new = await self.gate.tool_result(result)
                    if new is not None and self._drops_structured():
                        new.pop("structuredContent", None)
                if new is not None:  # None: passed unchecked (--unsafe-pass-images)
                    (value if position is None else value[position])["result"] = new  # in its place
                    changed = True
            written = msgspec.json.encode(value) + ending if changed else line
        except Exception:  # a bug: the host gets an error for the call, never the images unchecked
            log.exception("attachstore mcp wrap: gating an answer failed")
            written = _internal_errors(value, gated) + ending
        await out.write(written)

    def _drops_structured(self) -> bool:
        if self.options.structured != "auto":
            return self.options.structured == "never"
        # Claude Code and Codex show the model JSON.stringify(structuredContent) in place of the content: the
        # image as base64 text and no ref. Dropped for them whether or not the tool declared an outputSchema
        # (tests/interop/hosts: Claude Code takes a result without it).
        return shows_structured_only(self.client)


def _result(value: Any, position: int | None) -> dict[str, Any]:
    # An answer's result, {} where it is no object.
    message = value if position is None else value[position]
    result = message.get("result") if isinstance(message, dict) else None
    return result if isinstance(result, dict) else {}


def _internal_errors(value: Any, gated: list[tuple[int | None, Key, _Pending]]) -> bytes:
    def error(key: Key) -> dict[str, Any]:
        message = "attachstore mcp wrap could not gate the images of this answer; its log says why"
        return {"jsonrpc": "2.0", "id": key[1], "error": {"code": -32603, "message": message}}

    if len(gated) == 1 and gated[0][0] is None:
        return msgspec.json.encode(error(gated[0][1]))
    answers = list(value)
    for position, key, _ in gated:
        if position is not None:
            answers[position] = error(key)
    return msgspec.json.encode(answers)


@dataclass(slots=True)
class _Stop:
    came: bool = False


@contextlib.contextmanager
def _passed_on(server: asyncio.subprocess.Process) -> Iterator[_Stop]:
    """SIGTERM and SIGINT passed on to the server, each as it comes; from the first, the server has
    STOP_GRACE seconds to exit before it is killed. Once one has come, the process ignores both until it
    exits: a host sends one and then the other (Claude Code: SIGINT, then SIGTERM 100 ms later), and the
    second must not kill the wrapper while its store closes."""
    loop = asyncio.get_running_loop()
    stop = _Stop()
    killer: asyncio.TimerHandle | None = None

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            server.kill()

    def received(signum: int) -> None:
        nonlocal killer
        stop.came = True
        with contextlib.suppress(ProcessLookupError):
            server.send_signal(signum)
        if killer is None:
            killer = loop.call_later(STOP_GRACE, kill)

    signals = (signal.SIGTERM, signal.SIGINT)
    for s in signals:
        loop.add_signal_handler(s, received, s)
    try:
        yield stop
    finally:
        for s in signals:
            loop.remove_signal_handler(s)
            if stop.came:
                signal.signal(s, signal.SIG_IGN)
        if killer is not None:
            killer.cancel()


async def wrapped(command: list[str], gate: Gate, options: WrapOptions = WrapOptions()) -> int:
    """`command` served to the host on this process's stdio through the gate; its exit code."""
    try:
        with pipes.claimed_fd() as host_in, pipes.claimed_stdout() as host_out:
            return await Proxy(gate, options).run(command, host_in, host_out)
    finally:
        await gate.backend.close()
