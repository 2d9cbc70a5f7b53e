"""Claude Code (`claude -p`) against a fake Anthropic Messages API, with `attachstore mcp` added by the
`claude mcp add` command of docs/mcp.md, run as written; the `.mcp.json` the page shows must be the file that
command writes.

What Claude Code 2.1.332 does that the run depends on:
- it starts a project's `.mcp.json` server in `-p` without asking (the approval it asks for in a terminal is
  skipped in a non-interactive run, unless `--ignore-persisted-trust`), but calls its tools only when allowed:
  `--allowedTools mcp__attachstore`;
- before its first request it waits only 2 s for MCP servers still starting (`CLAUDE_CODE_MCP_STARTUP_WAIT_MS`
  raises that), and offers MCP tools behind its ToolSearch tool unless `ENABLE_TOOL_SEARCH=false`;
- it re-encodes an image block over 512,000 bytes (the 1568x980 screenshot comes as a JPEG) and passes smaller
  ones byte for byte (the photo);
- a 400 whose message names an image (`messages.N.content.M[.tool_result.content.K].image`, or says "could not
  process image", "image does not match the provided media type", ...) is not the end of the run: it sends the
  request again with that image replaced by "[Image removed: ...]" and writes an "API Error: an image in the
  conversation could not be processed and was removed" message into the session, after which no resume of
  that session sends the image again, even once the transcript holds a valid one."""

from __future__ import annotations

import base64
import binascii
import json
import subprocess
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from aiohttp import web

from tests.interop.hosts.model import (
    Call,
    FakeModel,
    Image,
    Protocol,
    Reply,
    ToolResult,
    Turn,
    sse,
    stream,
)
from tests.interop.hosts.refusals import Fault, fault
from tests.interop.hosts.scenario import Host, Place


def _result(block: dict[str, Any]) -> ToolResult:
    """A `tool_result` block, whose content is a string or a list of text and image blocks."""
    content = block.get("content", "")
    parts: list[dict[str, Any]] = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return ToolResult(
        call_id=block["tool_use_id"],
        text="\n".join(p["text"] for p in parts if p.get("type") == "text"),
        images=tuple(
            Image(p["source"]["media_type"], base64.b64decode(p["source"]["data"]))
            for p in parts
            if p.get("type") == "image" and p["source"].get("type") == "base64"
        ),
        error=bool(block.get("is_error", False)),
    )


def turn(body: dict[str, Any]) -> Turn:
    """A Messages request as a Turn: the tools it offers, and the tool results in its user messages."""
    results = [
        _result(block)
        for message in body.get("messages", [])
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    return Turn(tuple(t["name"] for t in body.get("tools", []) if "name" in t), tuple(results))


def _content(reply: Reply) -> tuple[list[dict[str, Any]], str]:
    """The reply as an assistant message's content, and its stop reason."""
    if isinstance(reply, Call):
        call = {"type": "tool_use", "id": reply.id, "name": reply.name, "input": reply.arguments}
        return [call], "tool_use"
    return [{"type": "text", "text": reply.text}], "end_turn"


def _message(reply: Reply, model: str) -> dict[str, Any]:
    content, stop = _content(reply)
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def _event(kind: str, **fields: Any) -> bytes:
    return sse(kind, {"type": kind, **fields})


def _events(reply: Reply, model: str) -> Iterator[bytes]:
    """The reply streamed: message_start, each block (start, one delta, stop), message_delta, message_stop."""
    content, stop = _content(reply)
    yield _event("message_start", message=_message(reply, model) | {"content": [], "stop_reason": None})
    for index, block in enumerate(content):
        if block["type"] == "tool_use":
            opening = block | {"input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opening = block | {"text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        yield _event("content_block_start", index=index, content_block=opening)
        yield _event("content_block_delta", index=index, delta=delta)
        yield _event("content_block_stop", index=index)
    yield _event(
        "message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 10}
    )
    yield _event("message_stop")


# What Anthropic takes, and the longest side it takes.
FORMATS = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_SIDE = 8000
_WORDS = {
    Fault.MISMATCH: ".data: Image does not match the provided media type {declared}",
    Fault.FORMAT: ".data: Image does not match the provided media type {declared}",
    Fault.UNDECODABLE: ": Could not process image",
    Fault.SIDE: f": At least one of the image dimensions exceed max allowed size: {MAX_SIDE} pixels",
}


def _image_refusal(source: dict[str, Any]) -> str | None:
    """Why Anthropic refuses a base64 image source, in its words (the `.data` it names), or None."""
    if source.get("type") != "base64":
        return None
    try:
        data = base64.b64decode(source.get("data", ""), validate=True)
    except (binascii.Error, ValueError):
        return ".data: Invalid base64 data"
    declared = source.get("media_type")
    found = fault(declared, data, FORMATS, MAX_SIDE)
    return None if found is None else _WORDS[found].format(declared=declared)


def refused_by_anthropic(body: dict[str, Any]) -> str | None:
    """Why the Messages API refuses the request `body` for one of its images (the first it meets, named by
    its place as the API names it), or None: declared type against the bytes, bytes that do not decode, a side
    over MAX_SIDE. A `refuse` for `Messages`."""
    for m, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        for b, block in enumerate(content if isinstance(content, list) else []):
            where = f"messages.{m}.content.{b}"
            found = [(where, block)] if block.get("type") == "image" else []
            nested = block.get("content") if block.get("type") == "tool_result" else None
            found += [
                (f"{where}.tool_result.content.{i}", part)
                for i, part in enumerate(nested if isinstance(nested, list) else [])
                if part.get("type") == "image"
            ]
            for place, image in found:
                reason = _image_refusal(image.get("source", {}))
                if reason is not None:
                    return f"{place}.image.source.base64{reason}"
    return None


class Messages(Protocol):
    """POST /v1/messages (Claude Code adds `?beta=true`), streamed where the request asks for it.

    `refuse`, where given, judges each request first: the reason it returns is answered 400 with Anthropic's
    error body, as the real API refuses a request (the request is recorded, without a reply)."""

    def __init__(self, refuse: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        self.refuse = refuse

    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def messages(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            reason = self.refuse(body) if self.refuse is not None else None
            if reason is not None:
                model.record(request, body, turn(body))
                error = {"type": "invalid_request_error", "message": reason}
                return web.json_response({"type": "error", "error": error}, status=400)
            reply = model.converse(request, body, turn(body))
            if body.get("stream"):
                return await stream(request, _events(reply, body.get("model", "")))
            return web.json_response(_message(reply, body.get("model", "")))

        return [web.post("/v1/messages", messages)]


class ClaudeCode(Host):
    name = "claude-code"
    title = "Claude Code"
    package = "@anthropic-ai/claude-code"
    command = "claude"

    def protocol(self) -> Protocol:
        return Messages()

    def configure(self, place: Place) -> None:
        done = subprocess.run(
            ["sh", "-e", "-c", place.snippet(self.name)],
            cwd=place.project,
            env=place.env() | dict(self.environ(place)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"the documented command failed: {done.stdout}{done.stderr}"
        written = json.loads((place.project / ".mcp.json").read_text())
        assert written == json.loads(place.snippet(self.name, 1)), f"it wrote {written}"

    def args(self, place: Place, prompt: str) -> list[str]:
        return ["-p", prompt, "--output-format", "json", "--allowedTools", "mcp__attachstore"]

    def environ(self, place: Place) -> Mapping[str, str]:
        return {
            "ANTHROPIC_BASE_URL": place.model.url,
            "ANTHROPIC_API_KEY": "sk-ant-interop-not-a-key",
            # no telemetry, error reports, update checks or catalog fetches: only the model is reached
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # the MCP tools in the first request, not behind the ToolSearch tool
            "ENABLE_TOOL_SEARCH": "false",
            # wait for `attachstore mcp` to start before the first request (2 s otherwise)
            "CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "60000",
        }


HOST = ClaudeCode()
