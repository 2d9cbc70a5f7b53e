"""The standard input of the stdio transport: its lines, awaited on the event loop, and the JSON-RPC error
answer for each line that is no message.

The SDK's `stdio_server()` reads stdin with a blocking `readline` in a worker thread, which no cancellation
reaches: on SIGTERM or SIGINT, while the host keeps stdin open (Claude Code does, at the end of every
session), the serving task waits for that thread forever, and the host ends up sending SIGKILL
(python-sdk #3551). And it hands a line it cannot validate to its dispatcher as an exception, which the
dispatcher drops: `{` or `[]` gets no answer, and the client waits forever. So `attachstore mcp` gives
`stdio_server()` this stdin instead (its `stdin` argument; stdout stays the SDK's): a private duplicate of
fd 0, read only once the loop says it is readable, so the wait is cancellable; and each line is checked as
the SDK will parse it, a line that is no JSON-RPC message being answered here, with the JSON-RPC 2.0 spec's
error (-32700 for input that is not JSON, -32600 for JSON that is no valid message, both with id null).
Like the SDK, it points fd 0 at /dev/null while it serves, so that nothing else in the process (a decode
worker, say) reads the host's messages."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from typing import Any

import anyio
import mcp.types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

CHUNK = 1 << 16


class Lines:
    """`async for line in Lines(fd)`: the lines that are JSON-RPC messages, decoded (UTF-8, invalid bytes
    replaced, as the SDK's own reader does); the others are answered through `reply_to`'s stream."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        # The loop can wait on a pipe, a socket or a terminal; a regular file or /dev/null it cannot (epoll
        # refuses them), and reading one never waits for a writer, so a worker thread reads those.
        self.pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        self._pending = bytearray()
        self._scanned = 0  # no newline before this offset of _pending
        self._eof = False
        self._writer: Any = None  # the transport's write stream, for the error answers
        self._ready = anyio.Event()

    def reply_to(self, writer: Any) -> None:
        self._writer = writer
        self._ready.set()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._line()
            if line is None:
                raise StopAsyncIteration
            if not line.strip():  # a blank line is no message, and asks for nothing
                continue
            error = malformed(line)
            if error is None:
                return line.decode("utf-8", errors="replace")
            await self._ready.wait()
            answer = types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
            await self._writer.send(SessionMessage(answer))

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


def malformed(line: bytes) -> types.ErrorData | None:
    """The JSON-RPC error for a line that is no message, as the SDK parses one (None: a message)."""
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
    return None


@contextlib.contextmanager
def claimed() -> Iterator[Lines]:
    """Lines of fd 0, read from a private duplicate while fd 0 points at /dev/null; fd 0 is restored on
    exit. With no fd 0 at all (the host gave none), the lines end at once."""
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        try:
            yield Lines(null)
        finally:
            os.close(null)
        return
    try:
        os.dup2(null, 0, inheritable=True)
        try:
            yield Lines(private)
        finally:
            os.dup2(private, 0, inheritable=True)
    finally:
        os.close(private)
        os.close(null)
