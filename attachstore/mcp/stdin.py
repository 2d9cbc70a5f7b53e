"""The standard input of the stdio transport: its lines, awaited on the event loop (so that SIGTERM and SIGINT
reach it while the host keeps stdin open), and the JSON-RPC error answer for each line that is no message.
Why the SDK's own reader will not do: docs/mcp.md, "Protocol errors"."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Protocol

import anyio
import mcp.types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from .pipes import FdReads, Reader, claimed_fd

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
        self._reader = Reader(FdReads(fd))
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
        line = await self._reader.line()
        return line[:-1] if line is not None and line.endswith(b"\n") else line


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
    """Lines of fd 0, read from a private duplicate while fd 0 points at /dev/null (pipes.claimed_fd)."""
    with claimed_fd() as fd:
        yield Lines(fd)
