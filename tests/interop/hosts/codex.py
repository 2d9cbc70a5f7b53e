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
from collections.abc import Iterator, Mapping
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


class Responses(Protocol):
    """POST /v1/responses, streamed: the only request Codex makes here."""

    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def respond(request: web.Request) -> web.StreamResponse:
            body = await request.json()
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
