"""The edits that repair one record: an image replaced by its fitted version with every field describing it
(media types, Claude Code's `toolUseResult.file`), or the image part replaced by a text part in the host's
own shape (docs/transcripts.md, "Repairing a session"). Only the values changed are written anew."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass

from .spans import Value, removal

_MEDIA_KEYS = (b"media_type", b"mimeType", b"mime_type")


@dataclass(frozen=True, slots=True)
class Fitted:
    data: bytes
    media_type: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Note:
    text: str
    once_per_message: bool = False  # a text-only model: one note a message, the message's other images go


Change = Fitted | Note
Edit = tuple[int, int, bytes]


def _json(text: str, escaped: bool) -> bytes:
    out = json.dumps(text, ensure_ascii=False).encode("utf-8")
    return out.replace(b"/", b"\\/") if escaped else out


def _member(value: Value | None, key: bytes, text: bytes) -> bytes | None:
    found = value.get(key) if value is not None else None
    return found.raw(text) if found is not None and found.kind == "string" else None


def _part(text: bytes, s: Value) -> tuple[Value, bytes] | None:
    """The image part holding the string `s`, and the text part that takes its place, in its host's shape."""
    parent = s.parent
    if parent is None or parent.kind != "object":
        return None
    grand = parent.parent
    base64_source = s.key == b"data" and _member(parent, b"type", text) == b"base64"
    if base64_source and _member(grand, b"type", text) == b"image":  # Anthropic, Claude Code
        assert grand is not None
        return grand, b'{"type":"text","text":%s}'
    if s.key == b"data" and parent.key in (b"inlineData", b"inline_data") and grand is not None:
        return grand, b'{"text":%s}'  # Gemini
    if s.key == b"data" and _member(parent, b"type", text) == b"image":  # MCP
        return parent, b'{"type":"text","text":%s}'
    if s.key == b"image_url" and _member(parent, b"type", text) == b"input_image":  # Codex, Responses
        return parent, b'{"type":"input_text","text":%s}'
    if s.key == b"url" and parent.key == b"image_url" and _member(grand, b"type", text) == b"image_url":
        assert grand is not None  # OpenAI chat
        return grand, b'{"type":"text","text":%s}'
    return None


def edits(text: bytes, strings: list[Value], change_of: Callable[[bytes], Change | None]) -> list[Edit]:
    """The edits of one record whose strings `change_of` knows (by their text as written)."""
    out: list[Edit] = []
    noted: set[int] = set()  # the messages (arrays) that have their note already
    for s in strings:
        raw = s.raw(text)
        change = change_of(raw)
        if change is None:
            continue
        escaped = b"\\/" in raw
        if isinstance(change, Fitted):
            out += _fitted(text, s, raw, change, escaped)
            continue
        part = _part(text, s)
        if part is None:
            out.append((s.start, s.end, _json(change.text, escaped)))
            continue
        value, shape = part
        message = value.parent
        if change.once_per_message and message is not None and message.kind == "array":
            if id(message) in noted:
                start, end = removal(text, value)
                out.append((start, end, b""))
                continue
            noted.add(id(message))
        out.append((value.start, value.end, shape % _json(change.text, escaped)))
    return out


def _fitted(text: bytes, s: Value, raw: bytes, fitted: Fitted, escaped: bool) -> list[Edit]:
    b64 = base64.b64encode(fitted.data)
    if raw[:5].lower() == b"data:":
        new = b"data:" + fitted.media_type.encode("ascii") + b";base64," + b64
    else:
        new = b64
    if escaped:
        new = new.replace(b"/", b"\\/")
    out: list[Edit] = [(s.start + 1, s.end - 1, new)]
    parent = s.parent
    if parent is None or parent.kind != "object":
        return out
    media = _json(fitted.media_type, escaped)
    for m in parent.members:
        is_media = m.key in _MEDIA_KEYS or (m.key == b"type" and m.raw(text).startswith(b"image"))
        if m.kind == "string" and is_media and m is not s:
            out.append((m.start, m.end, media))
        elif m.key == b"originalSize" and m.kind == "scalar":  # Claude Code's toolUseResult.file
            out.append((m.start, m.end, str(len(fitted.data)).encode("ascii")))
        elif m.key == b"dimensions" and m.kind == "object":
            for d in m.members:
                side = fitted.width if d.key in (b"originalWidth", b"displayWidth") else None
                side = fitted.height if d.key in (b"originalHeight", b"displayHeight") else side
                if side is not None and d.kind == "scalar":
                    out.append((d.start, d.end, str(side).encode("ascii")))
    return out
