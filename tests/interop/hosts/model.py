"""A scripted fake model on 127.0.0.1 for the real agent hosts: it speaks one host's wire protocol (a
`Protocol`), records every request the host sends, and answers from a `Script`: call this tool with these
arguments, then the next, then say something and stop.

What a host sent is kept twice: raw (path and JSON body) and as a `Turn`, the protocol-neutral view the tests
check: which tools were offered, and every tool result of the conversation with its text and images
(decoded bytes). Each protocol module turns its own messages into Turns and a `Reply` into its own answer."""

from __future__ import annotations

import abc
import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Image:
    media_type: str
    data: bytes


@dataclass(frozen=True)
class ToolResult:
    """One tool result as the host put it into a request: the text of its text parts, joined with newlines,
    and its images. `error` is the host's error flag where its protocol has one (None where not)."""

    call_id: str
    text: str
    images: tuple[Image, ...] = ()
    error: bool | None = None


@dataclass(frozen=True)
class Turn:
    """One request as the model sees it: the names of the tools offered, and the conversation's tool results,
    oldest first."""

    tools: tuple[str, ...]
    results: tuple[ToolResult, ...]


@dataclass(frozen=True)
class Call:
    name: str  # as the host offered it, e.g. mcp__attachstore__read_image
    arguments: dict[str, Any]
    id: str


@dataclass(frozen=True)
class Say:
    text: str


Reply = Call | Say


@dataclass(frozen=True)
class Step:
    tool: str  # the MCP tool's own name: read_image, read_attachment
    # the call's arguments, or how to make them from the tool results so far (a ref a result named)
    arguments: dict[str, Any] | Callable[[tuple[ToolResult, ...]], dict[str, Any]]


def offered(tools: Sequence[str], tool: str) -> str | None:
    """The host's name for the MCP tool `tool` among `tools` (hosts prefix it with the server's name, each
    in its own way), or None."""
    for name in tools:
        if name == tool or (name.endswith(tool) and not name[-len(tool) - 1].isalnum()):
            return name
    return None


class Script:
    """The model's part of the conversation: one tool call per step, in order, then `FINAL`.

    A request offering none of the script's tools (a host's side request, such as a title for the session)
    gets `SIDE` and changes nothing."""

    FINAL = "Done: I looked at every image."
    SIDE = "attachstore"

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = tuple(steps)

    def reply(self, turn: Turn) -> Reply:
        if offered(turn.tools, self.steps[0].tool) is None:
            return Say(self.SIDE)
        done = len(turn.results)
        if done >= len(self.steps):
            return Say(self.FINAL)
        step = self.steps[done]
        name = offered(turn.tools, step.tool)
        if name is None:
            return Say(f"the tool {step.tool} is not offered")
        arguments = step.arguments(turn.results) if callable(step.arguments) else dict(step.arguments)
        return Call(name, arguments, f"call_{done + 1}")


@dataclass
class Request:
    """One request the host made: where, what, and the Turn it was read as (None for what is no model
    request, such as a model listing)."""

    method: str
    path: str
    body: Any
    turn: Turn | None = None
    reply: Reply | None = None


class Protocol(abc.ABC):
    """One wire protocol: the routes it answers and how its requests become Turns."""

    @abc.abstractmethod
    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        """The protocol's endpoints; a model request's handler calls `model.converse(request, body, turn)`
        and answers the Reply it gets in the protocol's own form (streamed where the host asked)."""


@dataclass
class FakeModel:
    """The server: `with FakeModel(protocol, script) as model`, then point the host at `model.url`."""

    protocol: Protocol
    script: Script
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    def converse(self, request: web.Request, body: Any, turn: Turn) -> Reply:
        """The script's answer to `turn`, recorded with the request."""
        reply = self.script.reply(turn)
        self.record(request, body, turn, reply)
        return reply

    def record(
        self, request: web.Request, body: Any, turn: Turn | None = None, reply: Reply | None = None
    ) -> None:
        with self._lock:
            self.requests.append(Request(request.method, request.path_qs, body, turn, reply))

    @property
    def turns(self) -> list[Turn]:
        """The conversation's requests: those that offered the script's first tool, in order."""
        with self._lock:
            return [
                r.turn
                for r in self.requests
                if r.turn is not None and offered(r.turn.tools, self.script.steps[0].tool) is not None
            ]

    def transcript(self) -> str:
        """Every request, one line each, for a failure's message."""
        with self._lock:
            return "\n".join(
                f"{r.method} {r.path} tools={list(r.turn.tools) if r.turn else '-'} "
                f"results={[(x.text[:80], len(x.images)) for x in r.turn.results] if r.turn else '-'} "
                f"-> {r.reply}"
                for r in self.requests
            )

    async def _unknown(self, request: web.Request) -> web.Response:
        body = await request.text()
        self.record(request, body[:2000])
        return web.json_response(
            {"error": {"message": f"no {request.method} {request.path} here"}}, status=404
        )

    async def _start(self, ready: threading.Event) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.add_routes([*self.protocol.routes(self), web.route("*", "/{tail:.*}", self._unknown)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        ready.set()

    def __enter__(self) -> FakeModel:
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._start(ready))
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="fake-model", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise AssertionError("the fake model did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, runner = self._loop, self._runner
        assert loop is not None
        assert self._thread is not None
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(30)
        loop.close()


def sse(event: str | None, data: Any) -> bytes:
    """One server-sent event: `event:` (when named) and one `data:` line of JSON."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


async def stream(request: web.Request, events: Iterator[bytes]) -> web.StreamResponse:
    """A `text/event-stream` answer of `events`."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response
