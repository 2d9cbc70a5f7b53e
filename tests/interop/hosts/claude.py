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
  that session sends the image again, even once the transcript holds a valid one;
- a 413 (`request_too_large`, a body over 32 MB) is not retried without the images: it compacts the
  conversation, asking for a summary with the images (413 again), then with each image replaced by "[image]",
  and goes on from the summary, the run ending well (exit 0) with no image of the session seen."""

from __future__ import annotations

import base64
import binascii
import json
import subprocess
from collections.abc import Callable, Collection, Iterator, Mapping
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


# What Anthropic takes: the formats, the longest side, the longest side past MANY images a request, and the
# request body (answered 413 above it, before the body is read as JSON).
FORMATS = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_SIDE = 8000
MANY, MANY_SIDE = 20, 2000
MAX_BODY = 32_000_000
TOO_LARGE = "Request exceeds the maximum allowed number of bytes. The maximum request size is 32 MB."
_WORDS = {
    Fault.MISMATCH: ".data: Image does not match the provided media type {declared}",
    Fault.FORMAT: ".media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
    Fault.UNDECODABLE: ": Could not process image",
}


def _image_refusal(source: dict[str, Any], many: bool) -> str | None:
    """Why Anthropic refuses a base64 image source, in its words (the `.data` it names), or None. `many`: the
    request holds more than MANY images."""
    if source.get("type") != "base64":
        return None
    try:
        data = base64.b64decode(source.get("data", ""), validate=True)
    except (binascii.Error, ValueError):
        return ".data: Invalid base64 data"
    declared = source.get("media_type")
    found = fault(declared, data, FORMATS, MANY_SIDE if many else MAX_SIDE)
    if found is Fault.SIDE:
        limit = f" for many-image requests: {MANY_SIDE}" if many else f": {MAX_SIDE}"
        return f".data: At least one of the image dimensions exceed max allowed size{limit} pixels"
    return None if found is None else _WORDS[found].format(declared=declared)


def _images(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each image block of the request, with its place as the API names it."""
    for m, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        for b, block in enumerate(content if isinstance(content, list) else []):
            where = f"messages.{m}.content.{b}"
            if block.get("type") == "image":
                yield where, block
            nested = block.get("content") if block.get("type") == "tool_result" else None
            for i, part in enumerate(nested if isinstance(nested, list) else []):
                if part.get("type") == "image":
                    yield f"{where}.tool_result.content.{i}", part


def refused_by_anthropic(body: dict[str, Any]) -> str | None:
    """Why the Messages API refuses the request `body` for one of its images (the first it meets, named by
    its place as the API names it), or None: declared type against the bytes, a format it does not take,
    bytes that do not decode, a side over MAX_SIDE (MANY_SIDE where the request holds more than MANY
    images). A `refuse` for `Messages`."""
    found = list(_images(body))
    for place, image in found:
        reason = _image_refusal(image.get("source", {}), len(found) > MANY)
        if reason is not None:
            return f"{place}.image.source.base64{reason}"
    return None


def refused_for_text_only(models: Collection[str]) -> Callable[[dict[str, Any]], str | None]:
    """A `refuse` for `Messages` that also refuses any image sent to one of `models`, a text-only model, the
    first image named by its place. No Claude model is text-only today; the words are those of the gateways
    that serve one behind the Messages API ("this model does not support image input")."""

    def refuse(body: dict[str, Any]) -> str | None:
        if body.get("model") in models:
            for place, _ in _images(body):
                return f"{place}.image: this model does not support image input"
        return refused_by_anthropic(body)

    return refuse


class Messages(Protocol):
    """POST /v1/messages (Claude Code adds `?beta=true`), streamed where the request asks for it.

    A body over MAX_BODY bytes is answered 413 with Anthropic's `request_too_large` error, as the API answers
    it. `refuse`, where given, judges each request first: the reason it returns is answered 400 with
    Anthropic's error body, as the real API refuses a request (the request is recorded, without a reply)."""

    def __init__(self, refuse: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        self.refuse = refuse

    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def messages(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            body = json.loads(raw)
            if len(raw) > MAX_BODY:
                model.record(request, body, turn(body))
                error = {"type": "request_too_large", "message": TOO_LARGE}
                return web.json_response({"type": "error", "error": error}, status=413)
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
