"""The images an MCP result carries (docs/mcp.md): every `image` content block, every embedded `resource`
whose blob has an image type, and every image blob of a `resources/read` answer. Read alike by
POST /v1/mcp/results, which refuses a malformed one as a bad request, and by `attachstore mcp wrap`, which
refuses the result's images instead; both admit what is found as one `mcp` batch. Pure, and beside the
vocabulary rather than in the service: the wrapper asks it of every answer it may change, and must not
import the store to do so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IMAGE_TYPE = "image/"
# Servers send base64 broken into lines (MIME's 76 characters, or 64): they are taken out before the gate's
# strict check. Any other whitespace is still INVALID_IMAGE_BASE64, as everywhere.
_LINE_BREAKS = str.maketrans("", "", "\r\n")


@dataclass(frozen=True, slots=True)
class Found:
    data: str  # base64, its line breaks taken out
    declared: str | None  # the media type the block declares
    name: str | None  # a resource's uri


@dataclass(frozen=True, slots=True)
class Malformed:
    """A block that is an image by its type, but whose fields are not what MCP says they are."""

    where: str  # the JSON path of the field
    message: str


def block_image(block: Any, where: str) -> Found | Malformed | None:
    """The image a content block carries, or None for any other block (one that is no object with a string
    `type` included: the caller decides whether that is an error)."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return None
    if block["type"] == "image":
        declared = _string(block, "mimeType", where)
        if isinstance(declared, Malformed):
            return declared
        return _upload(block, "data", declared, None, where)
    if block["type"] == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict):
            return Malformed(f"{where}.resource", "an embedded resource is an object")
        return contents_image(resource, f"{where}.resource")
    return None


def contents_image(contents: dict[str, Any], where: str) -> Found | Malformed | None:
    """The image of a resource's contents (embedded, or an entry of a resources/read answer): a `blob` whose
    declared type is an image's, named by its uri; None for text, or a blob of another type."""
    declared = _string(contents, "mimeType", where)
    if isinstance(declared, Malformed):
        return declared
    if "blob" not in contents or declared is None or not declared.lower().startswith(IMAGE_TYPE):
        return None
    uri = _string(contents, "uri", where)
    if isinstance(uri, Malformed):
        return uri
    return _upload(contents, "blob", declared, uri, where)


def _string(block: dict[str, Any], key: str, where: str) -> str | Malformed | None:
    value = block.get(key)
    if value is None or isinstance(value, str):
        return value
    return Malformed(f"{where}.{key}", f"Expected `str`, got `{type(value).__name__}`")


def _upload(
    block: dict[str, Any], key: str, declared: str | None, name: str | None, where: str
) -> Found | Malformed:
    # Line breaks dropped, and kept so in the block: the text is held once.
    text = block.get(key)
    if not isinstance(text, str):
        return Malformed(f"{where}.{key}", f"Expected `str`, got `{type(text).__name__}`")
    if "\n" in text or "\r" in text:
        block[key] = text = text.translate(_LINE_BREAKS)
    return Found(text, declared, name)


def refused(content: list[Any], positions: list[int], text: str) -> list[Any]:
    """`content` with its images refused: the first image's place holds `text`, the model's explanation of
    them all, and the other images are gone. Every other block stays as it came."""
    out = list(content)
    out[positions[0]] = {"type": "text", "text": text}
    gone = set(positions[1:])
    return [block for i, block in enumerate(out) if i not in gone]
