"""gemini-cli: the Gemini API's `generateContent` family, and `gemini -p` in a project whose
`.gemini/settings.json` is docs/mcp.md's snippet and whose folder is trusted by the page's second block.

gemini-cli (through the @google/genai SDK) posts a `GenerateContentRequest` to
`/v1beta/models/{model}:streamGenerateContent?alt=sse` and reads `GenerateContentResponse` chunks, and asks
`:countTokens` for the size of each tool result; its side requests (routing, a next-speaker check, both off
with `-m` and the default settings) would use `:generateContent`. A tool result comes back as a
`functionResponse` part whose `response` is `{"output": text}`, or `{"error": text}` when the tool reported an
error; an MCP image is an `inlineData` part after it in the same content (or, for a model that gemini-cli
declares able to, inside it as `functionResponse.parts`)."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tests.interop.hosts.model import Call, FakeModel, Image, Protocol, Reply, ToolResult, Turn, sse, stream
from tests.interop.hosts.scenario import Host, Place

MODEL = "gemini-2.5-pro"  # the model gemini-cli asks for (-m), and the route the snippet names
# The user's settings (~/.gemini/settings.json): an API key as the way in (else GOOGLE_GEMINI_BASE_URL selects
# the "gateway" kind, which 0.61 refuses in a headless run), and nothing that reaches the network.
USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def _images(parts: list[dict[str, Any]]) -> tuple[Image, ...]:
    return tuple(
        Image(p["inlineData"].get("mimeType", ""), base64.b64decode(p["inlineData"]["data"]))
        for p in parts
        if "inlineData" in p
    )


def _result(part: dict[str, Any], beside: list[dict[str, Any]]) -> ToolResult:
    answer = part["functionResponse"]
    response = answer.get("response") or {}
    error = "error" in response
    text = response.get("error") if error else response.get("output", "")
    if not isinstance(text, str):
        text = json.dumps(text)
    images = _images(answer.get("parts") or []) + _images(beside)
    return ToolResult(answer.get("id") or answer.get("name", ""), text, images, error)


def turn(body: Mapping[str, Any]) -> Turn:
    """A GenerateContentRequest as the model sees it: the function declarations offered, and each
    functionResponse of the contents with the inlineData parts that follow it in the same content."""
    tools = tuple(
        d["name"] for tool in body.get("tools") or [] for d in tool.get("functionDeclarations") or []
    )
    results: list[ToolResult] = []
    for content in body.get("contents") or []:
        parts = content.get("parts") or []
        at = [i for i, p in enumerate(parts) if "functionResponse" in p] + [len(parts)]
        for start, end in itertools.pairwise(at):
            results.append(_result(parts[start], parts[start + 1 : end]))
    return Turn(tools, tuple(results))


def response(reply: Reply) -> dict[str, Any]:
    """One whole GenerateContentResponse answering `reply`: a functionCall or a text, and a finish reason
    (gemini-cli retries a stream that ends without one)."""
    if isinstance(reply, Call):
        part: dict[str, Any] = {"functionCall": {"id": reply.id, "name": reply.name, "args": reply.arguments}}
    else:
        part = {"text": reply.text}
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
        "modelVersion": MODEL,
    }


class Gemini(Protocol):
    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def generate(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            action = request.match_info["action"]
            if action == "countTokens":
                model.record(request, body)
                return web.json_response({"totalTokens": len(json.dumps(body)) // 4})
            answer = response(model.converse(request, body, turn(body)))
            if action == "streamGenerateContent":
                return await stream(request, iter([sse(None, answer)]))
            return web.json_response(answer)

        return [web.post("/v1beta/models/{name}:{action}", generate)]


class GeminiCli(Host):
    """`gemini -p PROMPT -m MODEL`: the tools run without a confirmation because the snippet says `"trust":
    true` (a headless run leaves out every tool that would need one), not through `--approval-mode yolo`."""

    name = "gemini-cli"
    title = "gemini-cli"
    package = "@google/gemini-cli"
    command = "gemini"

    def protocol(self) -> Protocol:
        return Gemini()

    def configure(self, place: Place) -> None:
        settings = place.project / ".gemini" / "settings.json"
        settings.parent.mkdir()
        settings.write_text(place.snippet(self.name))
        user = place.home / ".gemini"
        user.mkdir()
        (user / "settings.json").write_text(json.dumps(USER_SETTINGS))
        (user / "trustedFolders.json").write_text(place.snippet(self.name, 1))

    def args(self, place: Place, prompt: str) -> list[str]:
        return ["-p", prompt, "-m", MODEL]

    def environ(self, place: Place) -> Mapping[str, str]:
        return {
            "GEMINI_API_KEY": "fake",
            "GOOGLE_GEMINI_BASE_URL": place.model.url,
            # gemini-cli starts itself again as a child with a larger heap; one process is enough here
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }


HOST = GeminiCli()
