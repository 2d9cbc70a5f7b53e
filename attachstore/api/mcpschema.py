"""The JSON schemas of the MCP shapes POST /v1/mcp/results takes and answers, written after the MCP schema
(2025-11-25: CallToolResult, ContentBlock). They are MCP's shapes, not ours, so they are written out here
rather than generated from the structs: the handler (mcp.py) decodes the result as free JSON, to answer
every field it does not look at as it came."""

from __future__ import annotations

from typing import Any

_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
_STRING = {"type": "string"}
_BASE64 = {"type": "string", "contentEncoding": "base64"}


def _block(kind: str, required: list[str], **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "type": {"type": "string", "const": kind},
            **properties,
            "annotations": _OBJECT,
            "_meta": _OBJECT,
        },
        "required": ["type", *required],
        "additionalProperties": True,
    }


def _resource(**contents: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"uri": _STRING, "mimeType": _STRING, **contents, "_meta": _OBJECT},
        "required": ["uri", *contents],
        "additionalProperties": True,
    }


_TEXT = _block("text", ["text"], text=_STRING)
_AUDIO = _block("audio", ["data", "mimeType"], data=_BASE64, mimeType=_STRING)
_LINK = _block(
    "resource_link",
    ["uri", "name"],
    uri=_STRING,
    name=_STRING,
    title=_STRING,
    description=_STRING,
    mimeType=_STRING,
    size={"type": "integer"},
)
_EMBEDDED = _block(
    "resource", ["resource"], resource={"anyOf": [_resource(text=_STRING), _resource(blob=_BASE64)]}
)
_IMAGE = _block("image", ["data", "mimeType"], data=_BASE64, mimeType=_STRING)
# What the endpoint does not look at comes back as it came: a block of a type this version does not know, or
# a known one with fields of other shapes.
_OTHER: dict[str, Any] = {
    "type": "object",
    "description": "any other block, answered as it came",
    "properties": {"type": {"type": "string"}},
    "required": ["type"],
    "additionalProperties": True,
}
IMAGE_REF: dict[str, Any] = {
    "type": "object",
    "description": "an image of the result, admitted: render takes this block as it is",
    "properties": {"type": {"type": "string", "const": "image"}, "ref": _STRING},
    "required": ["type", "ref"],
    "additionalProperties": False,
}


def _result(blocks: list[dict[str, Any]], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": {
            "content": {"type": "array", "maxItems": 1024, "items": {"anyOf": blocks}},
            "structuredContent": _OBJECT,
            "isError": {"type": "boolean"},
            "_meta": _OBJECT,
        },
        "required": ["content"],
        "additionalProperties": True,
    }


CALL_TOOL_RESULT = _result(
    [_TEXT, _IMAGE, _AUDIO, _LINK, _EMBEDDED, _OTHER],
    "an MCP CallToolResult as its server sent it (base64 may be broken into lines)",
)
ADMITTED_RESULT = _result(
    [IMAGE_REF, _TEXT, _AUDIO, _LINK, _EMBEDDED, _OTHER],
    "the CallToolResult with each image and each embedded image resource a ref block (degraded: the first "
    "image's place holds the text for the model, and the other images are gone); all else as it came",
)
