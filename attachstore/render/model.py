"""The provider-neutral conversation after assembly: every image either resolved to its verified bytes or
replaced by a placeholder text. Providers (providers.py) turn this into request bodies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    placeholder: bool = False  # stands for an image that was left out


@dataclass(frozen=True, slots=True)
class Image:
    media_type: str
    data: bytes | bytearray  # verified; the body carries them as base64
    detail: Literal["auto", "low", "high"] | None = None


Part = Text | Image


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Turn:
    role: Role
    parts: list[Part]
    tool_calls: list[ToolCall] = field(default_factory=list)  # assistant only
    tool_call_id: str | None = None  # tool only
    name: str | None = None  # tool only: the function's name (Gemini needs it)


TOOL_IMAGES_INTRO = "Attached image(s) from tool result:"
IMAGE_ONLY_TOOL_RESULT = "(see attached image)"
