"""Codex (`codex exec`) against a fake model speaking the OpenAI Responses API.

Codex reads `$CODEX_HOME/config.toml`. The test writes there a custom model provider that points at the fake
model, the switches that keep a run offline, and then the snippet of docs/mcp.md as written. Codex offers an
MCP server's tools in a namespace (`mcp__attachstore` holding `read_image`), and a tool result comes back as
a `function_call_output` whose output is a list of `input_text` and `input_image` parts (the image as a data
URL), after a text part of its own ("Wall time: … Output:"). The Responses API has no error flag on a tool
result, so every ToolResult's `error` is None.

Offline: `[analytics] enabled = false` (else events go to ab.chatgpt.com), `[features] plugins = false` (else
a `git ls-remote` of github.com/openai/plugins and requests to api.github.com and chatgpt.com at every
start), `shell_snapshot = false` (no login shell run at start), no update check (the TUI's; `codex exec`
makes none). With a custom provider and an API key Codex fetches no model catalog; it warns that it has no
metadata for the model and uses its fallback, which takes image input. `--strict-config` makes a key that
this Codex does not know, the snippet's included, an error."""

from __future__ import annotations

import base64
import binascii
import json
import tomllib
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
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

KEY = "FAKE_MODEL_KEY"  # the provider's env_key, the variable Codex reads its API key from
MODEL = "gpt-5"  # the snippet's route
SPACE = "__"  # a namespaced tool's name here: namespace + SPACE + name, as in mcp__attachstore__read_image

# Everything of config.toml but the snippet. `codex exec` never asks for approval, and runs attachstore's
# tools without asking: they are marked read-only (a tool that is not would be cancelled, nobody answering).
SETTINGS = """\
model = {model}
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
shell_snapshot = false

[model_providers.fake]
name = "fake model"
base_url = {base_url}
wire_api = "responses"
env_key = {key}
request_max_retries = 0
stream_max_retries = 0

"""


def _image(url: str) -> Image | None:
    """An `input_image`'s data URL as an Image; None for anything else."""
    head, _, data = url.partition(",")
    if not (head.startswith("data:") and head.endswith(";base64")):
        return None
    try:
        return Image(
            head.removeprefix("data:").removesuffix(";base64"), base64.b64decode(data, validate=True)
        )
    except binascii.Error:
        return None


def _result(item: Mapping[str, Any]) -> ToolResult:
    """A `function_call_output`: its output is a string, or a list of input_text and input_image parts."""
    call_id, output = str(item.get("call_id")), item.get("output")
    if isinstance(output, str):
        return ToolResult(call_id, output)
    parts = [p for p in output if isinstance(p, dict)] if isinstance(output, list) else []
    text = "\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "input_text")
    urls = (str(p.get("image_url", "")) for p in parts if p.get("type") == "input_image")
    return ToolResult(call_id, text, tuple(image for image in map(_image, urls) if image is not None))


def _names(tools: list[Any], space: str = "") -> Iterator[str]:
    """The names of the tools offered, a namespace's tools each under its namespace."""
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            yield from _names(tool.get("tools", []), f"{space}{tool.get('name', '')}{SPACE}")
        elif "name" in tool:
            yield f"{space}{tool['name']}"


def turn(body: Mapping[str, Any]) -> Turn:
    items = [i for i in body.get("input", []) if isinstance(i, dict)]
    results = tuple(_result(i) for i in items if i.get("type") == "function_call_output")
    return Turn(tuple(_names(body.get("tools", []))), results)


def _item(reply: Reply, number: int) -> dict[str, Any]:
    if isinstance(reply, Call):
        space, _, name = reply.name.rpartition(SPACE)
        return {
            "type": "function_call",
            "id": f"fc_{number}",
            "call_id": reply.id,
            **({"namespace": space, "name": name} if space else {"name": reply.name}),
            "arguments": json.dumps(reply.arguments),
            "status": "completed",
        }
    content = [{"type": "output_text", "text": reply.text, "annotations": []}]
    return {
        "type": "message",
        "id": f"msg_{number}",
        "role": "assistant",
        "status": "completed",
        "content": content,
    }


def events(reply: Reply, number: int) -> Iterator[bytes]:
    """The streamed answer: the response created, its one output item, the response completed."""
    response = {"id": f"resp_{number}", "object": "response", "model": MODEL}
    item = _item(reply, number)
    yield sse("response.created", {"type": "response.created", "response": response})
    yield sse(
        "response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}
    )
    if not isinstance(reply, Call):
        delta = {
            "type": "response.output_text.delta",
            "item_id": item["id"],
            "output_index": 0,
            "delta": reply.text,
        }
        yield sse("response.output_text.delta", delta)
    yield sse(
        "response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}
    )
    usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
    completed = {**response, "status": "completed", "output": [item], "usage": usage}
    yield sse("response.completed", {"type": "response.completed", "response": completed})


@dataclass(frozen=True)
class Refusal:
    """An answer OpenAI refuses a request with: its status, and its body (OpenAI's error object, or the
    HTML page its front answers an over-size body with)."""

    status: int
    body: dict[str, Any] | str


# What OpenAI takes. It sets no side limit (it scales a large image down itself), and names no media type
# mismatch: bytes that are none of its formats, whatever their data URL declares, or that do not decode, are
# "not a valid image" (openai/codex #3097, #4946: param "input", code "invalid_value").
FORMATS = ("image/png", "image/jpeg", "image/gif", "image/webp")
BODY_CAP = 50 * 1_000_000  # a request body, as provider.py has it for openai-responses
_INVALID = (
    "The image data you provided does not represent a valid image. Please check your input and try again "
    "with one of the supported image formats: ['image/jpeg', 'image/png', 'image/gif', 'image/webp']."
)
# An over-size body never reaches the API: its front answers 413 with a page (openai/codex #2908, #7682).
TOO_LARGE = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>cloudflare</center>\r\n"
    "</body>\r\n</html>\r\n"
)


def _error(message: str, param: str | None, code: str | None) -> Refusal:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Refusal(400, {"error": error})


def _images(body: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Each `input_image` of the request's input, with its place as OpenAI names it
    (`input[3].output[1].image_url`, `input[0].content[1].image_url`) and its URL."""
    for i, item in enumerate(body.get("input", [])):
        if not isinstance(item, dict):
            continue
        for key in ("content", "output"):
            parts = item.get(key)
            for k, part in enumerate(parts if isinstance(parts, list) else []):
                if isinstance(part, dict) and part.get("type") == "input_image":
                    yield f"input[{i}].{key}[{k}].image_url", str(part.get("image_url", ""))


def openai_refusals(
    text_only: Collection[str] = (), body_cap: int = BODY_CAP
) -> Callable[[Mapping[str, Any], int], Refusal | None]:
    """A `refuse` for `Responses` that refuses what OpenAI refuses: a body over `body_cap` bytes (413), an
    image for a model of `text_only` (which takes none), an image whose data URL does not decode or whose
    bytes are not an image of FORMATS (400, in OpenAI's words)."""

    def refuse(body: Mapping[str, Any], size: int) -> Refusal | None:
        if size > body_cap:
            return Refusal(413, TOO_LARGE)
        for where, url in _images(body):
            if body.get("model") in text_only:
                # Chat Completions' words to a model without vision (gpt-3.5-turbo), the type named
                message = "Invalid content type. image_url is only supported by certain models."
                return _error(message, where.removesuffix("image_url") + "type", None)
            image = _image(url)
            if image is None:
                message = (
                    f"Invalid '{where}'. Expected a base64-encoded data URL with an image MIME type (e.g. "
                    "'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got an invalid base64-encoded value."
                )
                return _error(message, where, "invalid_value")
            found = fault(image.media_type, image.data, FORMATS, None)
            if found is not None and found is not Fault.SIDE:
                return _error(_INVALID, "input", "invalid_value")
        return None

    return refuse


class Responses(Protocol):
    """POST /v1/responses, streamed: the only request Codex makes here.

    `refuse`, where given, judges each request first (its body, and its size in bytes as received): the
    Refusal it returns is the answer, as the real API refuses a request (the request is recorded, without a
    reply)."""

    def __init__(self, refuse: Callable[[Mapping[str, Any], int], Refusal | None] | None = None) -> None:
        self.refuse = refuse

    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def respond(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            body = json.loads(raw)
            refusal = self.refuse(body, len(raw)) if self.refuse is not None else None
            if refusal is not None:
                model.record(request, body, turn(body))
                if isinstance(refusal.body, str):
                    return web.Response(status=refusal.status, text=refusal.body, content_type="text/html")
                return web.json_response(refusal.body, status=refusal.status)
            reply = model.converse(request, body, turn(body))
            return await stream(request, events(reply, len(model.requests)))

        return [web.post("/v1/responses", respond)]


class Codex(Host):
    name = "codex"
    title = "Codex"
    package = "@openai/codex"
    command = "codex"

    def protocol(self) -> Protocol:
        return Responses()

    def configure(self, place: Place) -> None:
        settings = SETTINGS.format(
            model=json.dumps(MODEL), base_url=json.dumps(f"{place.model.url}/v1"), key=json.dumps(KEY)
        )
        config = settings + place.snippet(self.name)
        tomllib.loads(config)  # the snippet is TOML that goes after the settings' tables
        home = place.home / ".codex"
        home.mkdir()
        (home / "config.toml").write_text(config)

    def args(self, place: Place, prompt: str) -> list[str]:
        return ["exec", "--strict-config", "--skip-git-repo-check", "--ephemeral", "--color", "never", prompt]

    def environ(self, place: Place) -> Mapping[str, str]:
        return {"CODEX_HOME": str(place.home / ".codex"), KEY: "fake-key"}


HOST = Codex()
