"""opencode: OpenAI chat completions, and `opencode run` with the project's `opencode.json` from docs/mcp.md.

opencode reaches the fake model as a custom provider through its bundled `@ai-sdk/openai-compatible`, which
posts to `{baseURL}/chat/completions` with `stream: true` and reads `chat.completion.chunk` events up to
`data: [DONE]`. A tool result comes back as a `tool` message holding its text only (chat completions has no
error flag: an MCP error is its text). The images of a step's tool results follow the step as one `user`
message, "Attached media from tool result:" and `image_url` parts with data URLs, byte for byte (opencode
1.18 keeps images inside the tool result only for the Anthropic, OpenAI, Bedrock, xAI and Gemini 3 packages).
A model that does not declare `modalities.input` with "image" gets, instead of each image, the text
"ERROR: Cannot read image (this model does not support image input)".

opencode starts the servers of the project's `opencode.json` without asking, and its default permissions
allow their tools: there is no approval step in 1.18."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from tests.interop.hosts.model import Call, FakeModel, Image, Protocol, Reply, ToolResult, Turn, sse, stream
from tests.interop.hosts.scenario import Host, Place

MODEL = "claude-sonnet-4-5"  # the route the snippet names, and the model the docs declare
MEDIA = "Attached media from tool result:"  # the user message that carries a step's tool images
PLUGIN, VERSION = "@opencode-ai/plugin", "1.18.33"


def _image(url: str) -> Image:
    head, _, data = url.partition(",")
    return Image(head.removeprefix("data:").split(";")[0], base64.b64decode(data))


def _parts(content: Any) -> tuple[str, tuple[Image, ...]]:
    """The text and the images of a message's content: a string, or a list of parts."""
    if isinstance(content, str):
        return content, ()
    parts = content or []
    text = "\n".join(p["text"] for p in parts if p.get("type") == "text" and p["text"] != MEDIA)
    images = tuple(_image(p["image_url"]["url"]) for p in parts if p.get("type") == "image_url")
    return text, images


def _is_media(content: Any) -> bool:
    return isinstance(content, list) and bool(content) and content[0].get("text") == MEDIA


def turn(body: Mapping[str, Any]) -> Turn:
    """A chat completions request as the model sees it: the functions offered, and each `tool` message with
    the images of the "Attached media" message after it (the script calls one tool a step, so a step's
    images are its one result's)."""
    tools = tuple(t["function"]["name"] for t in body.get("tools") or [])
    results: list[ToolResult] = []
    for message in body.get("messages") or []:
        text, images = _parts(message.get("content"))
        if message.get("role") == "tool":
            results.append(ToolResult(message.get("tool_call_id", ""), text, images))
        elif message.get("role") == "user" and results and _is_media(message.get("content")):
            results[-1] = replace(results[-1], images=results[-1].images + images)
    return Turn(tools, tuple(results))


def chunks(reply: Reply) -> Iterator[bytes]:
    """`reply` as a streamed completion: the message in one delta, the finish reason, `[DONE]`."""
    head = {"id": "chatcmpl-attachstore", "object": "chat.completion.chunk", "created": 0, "model": MODEL}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(None, head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    if isinstance(reply, Call):
        function = {"name": reply.name, "arguments": json.dumps(reply.arguments)}
        call = {"index": 0, "id": reply.id, "type": "function", "function": function}
        yield chunk({"role": "assistant", "content": None, "tool_calls": [call]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"role": "assistant", "content": reply.text})
        yield chunk({}, "stop")
    yield b"data: [DONE]\n\n"


class ChatCompletions(Protocol):
    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def complete(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            return await stream(request, chunks(model.converse(request, body, turn(body))))

        return [web.post("/v1/chat/completions", complete)]


class Opencode(Host):
    name = "opencode"
    title = "opencode"
    package = "opencode-ai"
    command = "opencode"

    def protocol(self) -> Protocol:
        return ChatCompletions()

    def configure(self, place: Place) -> None:
        """The project's `opencode.json`: the server's snippet and the provider's beside it, pointed at the
        fake model."""
        config = json.loads(place.snippet(self.name)) | json.loads(place.snippet(self.name, 1))
        for provider in config["provider"].values():
            provider["options"]["baseURL"] = place.model.url + "/v1"
        (place.project / "opencode.json").write_text(json.dumps(config))
        # opencode installs @opencode-ai/plugin with npm into every config directory, in the background at
        # each start (some 40 MB), unless the directory's node_modules exists and its lock names the plugin;
        # no switch turns that off in 1.18.
        settled = place.home / ".config" / "opencode"
        (settled / "node_modules").mkdir(parents=True)
        lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": {PLUGIN: VERSION}}}}
        (settled / "package-lock.json").write_text(json.dumps(lock))

    def args(self, place: Place, prompt: str) -> list[str]:
        # A title of its own: else opencode asks the model for one, a side request beside the conversation.
        return ["run", "--title", "attachstore", prompt]

    def environ(self, place: Place) -> Mapping[str, str]:
        return {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",  # the models.dev catalog, fetched at each start
            "OPENCODE_DISABLE_AUTOUPDATE": "1",  # the update check (1.18 makes it in the TUI only)
        }


HOST = Opencode()
