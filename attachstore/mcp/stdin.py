"""The standard input of the stdio transport: its lines, awaited on the event loop (so that SIGTERM and SIGINT
reach it while the host keeps stdin open), and the JSON-RPC error answer for each line that is no message.
Why the SDK's own reader will not do: docs/mcp.md, "Protocol errors"."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
from collections.abc import Iterator
from typing import Protocol

import anyio
import mcp.types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

CHUNK = 1 << 16
# At the end of stdin, how long the requests already read have to be answered before the server ends (a
# host that closes stdin and waits sends SIGTERM after its own wait, which ends the server at once).
EOF_GRACE = 30.0


class Sender(Protocol):
    # The shape of the SDK's WriteStream, whose module is private.

    async def send(self, item: SessionMessage, /) -> None: ...

    async def aclose(self) -> None: ...


class Lines:
    """`async for line in Lines(fd)`: the lines that are JSON-RPC messages, decoded as the SDK's own reader
    does; the others are answered here. At the end of stdin they end only once every request read is
    answered (or cancelled, or EOF_GRACE passed), else the SDK's dispatcher ends with requests unanswered."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        # The loop can wait on a pipe, a socket or a terminal; a regular file or /dev/null it cannot (epoll
        # refuses them), and reading one never waits for a writer, so a worker thread reads those.
        self.pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        self._pending = bytearray()
        self._scanned = 0  # no newline before this offset of _pending
        self._eof = False
        self._writer: Sender | None = None
        self._ready = anyio.Event()
        self._unanswered: set[types.RequestId] = set()
        self._answered = anyio.Event()

    def through(self, writer: Sender) -> _Answers:
        # The transport's stream for the error answers, and (wrapped) the one the server is given.
        self._writer = writer
        self._ready.set()
        return _Answers(writer, self)

    def answered(self, id: types.RequestId) -> None:
        self._unanswered.discard(coerce_request_id(id))
        self._answered.set()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._line()
            if line is None:
                await self._drain()
                raise StopAsyncIteration
            if not line.strip():  # a blank line is no message, and asks for nothing
                continue
            text = line.decode("utf-8", errors="replace")
            message = parse(text)
            if isinstance(message, types.JSONRPCRequest):
                self._unanswered.add(coerce_request_id(message.id))
            elif (cancelled := _cancelled(message)) is not None:  # the client waits for no answer
                self.answered(cancelled)
            if not isinstance(message, types.ErrorData):
                return text
            await self._ready.wait()
            assert self._writer is not None
            await self._writer.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=message)))

    async def _drain(self) -> None:
        with anyio.move_on_after(EOF_GRACE):
            while self._unanswered:
                self._answered = anyio.Event()
                await self._answered.wait()

    async def _line(self) -> bytes | None:
        while True:
            end = self._pending.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._pending[:end])
                del self._pending[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._pending)
            if self._eof:
                if not self._pending:
                    return None
                line = bytes(self._pending)
                self._pending.clear()
                self._scanned = 0
                return line
            chunk = await self._read()
            if chunk:
                self._pending += chunk
            else:
                self._eof = True

    async def _read(self) -> bytes:
        if not self.pollable:
            return await anyio.to_thread.run_sync(os.read, self.fd, CHUNK)
        await anyio.wait_readable(self.fd)
        try:
            return os.read(self.fd, CHUNK)  # readable: this does not wait
        except BlockingIOError:  # someone else's reader (a shared terminal) took it first
            return await self._read()


def parse(line: str) -> types.JSONRPCMessage | types.ErrorData:
    invalid = types.ErrorData(
        code=types.INVALID_REQUEST, message="Invalid Request: the line is no JSON-RPC 2.0 message"
    )
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as e:
        if any(error["type"] == "json_invalid" for error in e.errors()):
            return types.ErrorData(code=types.PARSE_ERROR, message="Parse error: the line is not JSON")
        return invalid
    # A request whose id is no string or integer (an object, null, true, 1.5) parses as a notification,
    # which the SDK would handle without answering: it is an invalid request, answered as one.
    if isinstance(message, types.JSONRPCNotification) and "id" in json.loads(line):
        return invalid
    return message


def _cancelled(message: types.JSONRPCMessage | types.ErrorData) -> types.RequestId | None:
    if not isinstance(message, types.JSONRPCNotification) or message.method != "notifications/cancelled":
        return None
    cancelled = (message.params or {}).get("requestId")
    return cancelled if isinstance(cancelled, str | int) and not isinstance(cancelled, bool) else None


class _Answers:
    # The transport's stream, noting each request answered.

    def __init__(self, stream: Sender, lines: Lines) -> None:
        self.stream = stream
        self.lines = lines

    async def send(self, item: SessionMessage, /) -> None:
        await self.stream.send(item)
        message = item.message
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and message.id is not None:
            self.lines.answered(message.id)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> _Answers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.contextmanager
def claimed() -> Iterator[Lines]:
    """Lines of fd 0, read from a private duplicate while fd 0 points at /dev/null; fd 0 is restored on
    exit. With no fd 0 at all (the host gave none: Python then has no sys.stdin, and fd 0 may since be
    anything, the event loop's own epoll descriptor say), the lines end at once."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3) if _fd0_is_stdin() else -1
    except OSError:
        private = -1
    if private < 0:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield Lines(null)
        finally:
            os.close(null)
        return
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        try:
            yield Lines(private)
        finally:
            os.dup2(private, 0)
    finally:
        os.close(private)


def _fd0_is_stdin() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.fileno() == 0
    except (AttributeError, OSError, ValueError):  # replaced by something without a descriptor
        return False
