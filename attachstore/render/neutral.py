"""The provider-neutral request of POST /v1/render (SPEC section 10), decoded with msgspec."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ..config import Provider
from ..errors import InvalidRequest, UnsupportedContent
from ..service import SESSION_ID_PATTERN

Detail = Literal["auto", "low", "high"]
# Free-form JSON (a tool call's arguments) nests at most this deep: msgspec recurses once per level to decode
# it and again to encode it into the answer, and the interpreter's limit is some 900 levels further down.
MAX_NESTING = 64


class _In(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class TextBlock(_In, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageBlock(_In, frozen=True, tag_field="type", tag="image"):
    ref: str  # any string: render's Ref.parse refuses what is not a ref, as INVALID_ATTACHMENT_REF
    path: Annotated[str, Meta(max_length=4096)] | None = None  # where the image came from, for re-reading
    detail: Detail | None = None


Block = TextBlock | ImageBlock


class ToolCallIn(_In, frozen=True):
    id: str
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class MessageIn(_In, frozen=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[Block] = ""
    tool_calls: list[ToolCallIn] | None = None  # assistant
    tool_call_id: str | None = None  # tool
    name: str | None = None  # tool: the function's name

    @property
    def blocks(self) -> list[Block]:
        return [TextBlock(self.content)] if isinstance(self.content, str) else self.content


class RenderRequest(_In, frozen=True):
    messages: list[MessageIn]
    provider: Provider | None = None  # else the route's
    route: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    session: Annotated[str, Meta(pattern=SESSION_ID_PATTERN)] | None = None
    max_image_bytes: Annotated[int, Meta(gt=0)] | None = None  # base64 bytes; at most the route's or 20 MiB
    max_images: Annotated[int, Meta(ge=0)] | None = None  # else the route's, else no limit
    vision: bool | None = None  # false: project to text whatever the route says


def check(request: RenderRequest) -> None:
    # What the types cannot say: which role may carry what.
    if not request.messages:
        raise InvalidRequest("invalid request at $.messages: at least one message is needed")
    for i, m in enumerate(request.messages):
        where = f"$.messages[{i}]"
        if m.role in ("system", "assistant") and any(isinstance(b, ImageBlock) for b in m.blocks):
            raise UnsupportedContent(
                f"{where}: {'a system' if m.role == 'system' else 'an assistant'} message cannot carry "
                "images; only user and tool messages can",
                hint="put the image in a user message, or in the result of the tool that produced it",
            )
        if m.tool_calls and m.role != "assistant":
            raise InvalidRequest(f"invalid request at {where}.tool_calls: only assistant messages call tools")
        if m.role == "tool" and not m.tool_call_id:
            raise InvalidRequest(f"invalid request at {where}.tool_call_id: a tool message needs it")
        if m.role != "tool" and (m.tool_call_id or m.name):
            raise InvalidRequest(f"invalid request at {where}: tool_call_id and name belong to tool messages")
        for k, call in enumerate(m.tool_calls or ()):
            if nested_deeper(call.arguments, MAX_NESTING):
                raise InvalidRequest(
                    f"invalid request at {where}.tool_calls[{k}].arguments: nested more than {MAX_NESTING} "
                    "levels deep"
                )


def nested_deeper(value: object, levels: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > levels:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
