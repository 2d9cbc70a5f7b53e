"""gemini-cli: the Gemini API's `generateContent` family, and `gemini -p` in a project whose
`.gemini/settings.json` is docs/mcp.md's snippet and whose folder is trusted by the page's second block.

gemini-cli (through the @google/genai SDK) posts a `GenerateContentRequest` to
`/v1beta/models/{model}:streamGenerateContent?alt=sse` and reads `GenerateContentResponse` chunks, and asks
`:countTokens` for the size of each tool result; its side requests (routing, a next-speaker check, both off
with `-m` and the default settings) would use `:generateContent`. A tool result comes back as a
`functionResponse` part whose `response` is `{"output": text}`, or `{"error": text}` when the tool reported an
error; an MCP image is an `inlineData` part after it in the same content (or, for a model that gemini-cli
declares able to, inside it as `functionResponse.parts`).

The API refuses a request for its images with HTTP 400 and an `INVALID_ARGUMENT` error body, in the words
gemini-cli's users report (google-gemini/gemini-cli #5064, #27244): "Unable to process input image" for bytes
that do not decode, "Provided image is not valid." for bytes that are not their declared type, "Unsupported
MIME type" for a format it does not take (AVIF, BMP, TIFF, GIF), and "Request payload size exceeds the limit"
for a body over the inline cap; it sets no limit on a side."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from attachstore.transcripts.provider import published
from tests.interop.hosts.model import Call, FakeModel, Image, Protocol, Reply, ToolResult, Turn, sse, stream
from tests.interop.hosts.refusals import Fault, fault
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


# What the Gemini API takes: its formats and the cap on a request's body (inline data counted), as
# attachstore's repair reads them.
TAKEN = published("gemini")
_WORDS = {
    Fault.MISMATCH: "Provided image is not valid.",
    Fault.FORMAT: "Unsupported MIME type: {declared}",
    Fault.UNDECODABLE: (
        "Unable to process input image. Please retry or report in "
        "https://developers.generativeai.google/guide/troubleshooting"
    ),
}
# A refusal's judge: the model the request names, its body and the body's size in bytes; why it is refused.
Refuse = Callable[[str, dict[str, Any], int], str | None]


def refused_by_gemini(
    model: str, body: dict[str, Any], size: int, text_only: frozenset[str] = frozenset()
) -> str | None:
    """Why the Gemini API refuses a `generateContent` request, in its words, or None: a body over the cap,
    then any image for a model in `text_only`, then each inlineData part the first of whose faults (declared
    type against the bytes, a format it does not take, bytes that do not decode) is found. A `refuse` for
    `Gemini` (with `functools.partial` for `text_only`)."""
    if size > TAKEN.body:
        return f"Request payload size exceeds the limit: {TAKEN.body} bytes."
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            inline = part.get("inlineData")
            if inline is None:
                continue
            if model in text_only:
                return f"Image input modality is not enabled for models/{model}"
            declared = inline.get("mimeType")
            try:
                data = base64.b64decode(inline.get("data", ""), validate=True)
            except (binascii.Error, ValueError):
                return (
                    "Invalid value at 'contents.parts.inline_data.data' (TYPE_BYTES), Base64 decoding failed"
                )
            found = fault(declared, data, TAKEN.formats, None)
            if found is not None:
                return _WORDS[found].format(declared=declared)
    return None


class Gemini(Protocol):
    """`refuse`, where given, judges each generateContent request first: the reason it returns is answered
    400 with the Gemini API's error body (`INVALID_ARGUMENT`), the request recorded without a reply."""

    def __init__(self, refuse: Refuse | None = None) -> None:
        self.refuse = refuse

    def routes(self, model: FakeModel) -> list[web.RouteDef]:
        async def generate(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            body = json.loads(raw)
            action = request.match_info["action"]
            if action == "countTokens":
                model.record(request, body)
                return web.json_response({"totalTokens": len(json.dumps(body)) // 4})
            reason = (
                self.refuse(request.match_info["name"], body, len(raw)) if self.refuse is not None else None
            )
            if reason is not None:
                model.record(request, body, turn(body))
                error = {"code": 400, "message": reason, "status": "INVALID_ARGUMENT"}
                return web.json_response({"error": error}, status=400)
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
