"""Provider-neutral turns to the request fields a host merges into its provider call (SPEC section 10).
Pure and deterministic: the same turns always give the same body, keys in the same order. Where each
protocol wants tool images and empty texts: docs/render.md, "Where tool images go, and why". `embed` makes
what stands for an image's base64: a str by default; the HTTP answer keeps it out of the body's strings."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from typing import Any

import pybase64

from .model import IMAGE_ONLY_TOOL_RESULT, TOOL_IMAGES_INTRO, Image, Text, Turn

Json = dict[str, Any]
Embed = Callable[[str, Image], Any]  # (prefix, image) -> the string value "<prefix><the image's base64>"

EMPTY = "(empty)"


def as_text(prefix: str, image: Image) -> str:
    return prefix + pybase64.b64encode(image.data).decode("ascii")


def render_body(provider: str, turns: Sequence[Turn], embed: Embed = as_text) -> Json:
    """The body for `provider`: one of openai-chat, openai-responses, anthropic, gemini."""
    encode = _ENCODERS.get(provider)
    if encode is None:
        raise ValueError(f"unknown provider {provider!r}")
    return encode(turns, embed)


# Shared helpers.


def _texts(turn: Turn) -> list[str]:
    return [p.text for p in turn.parts if isinstance(p, Text) and p.text]


def _images(turn: Turn) -> list[Image]:
    return [p for p in turn.parts if isinstance(p, Image)]


def _parts(turn: Turn) -> list[Text | Image]:
    return [p for p in turn.parts if isinstance(p, Image) or p.text]


def _system_text(turns: Iterable[Turn]) -> str:
    return "\n\n".join(text for t in turns if t.role == "system" for text in _texts(t))


def _tool_output(turn: Turn) -> str:
    # An image-only result says where its images went.
    text = "\n".join(_texts(turn))
    return IMAGE_ONLY_TOOL_RESULT if not text and _images(turn) else text


def _call_id(turn: Turn) -> str:
    if not turn.tool_call_id:
        raise ValueError("a tool turn needs its tool_call_id")
    return turn.tool_call_id


def _arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, separators=(",", ":"), sort_keys=False)


def _data_url(image: Image, embed: Embed) -> Any:
    return embed(f"data:{image.media_type};base64,", image)


def _runs(turns: Sequence[Turn]) -> Iterable[tuple[bool, list[Turn]]]:
    for is_tool, run in groupby(turns, key=lambda t: t.role == "tool"):
        yield is_tool, list(run)


def _merged(messages: Iterable[Json], key: str, first: Callable[[Json], bool], empty: Json) -> list[Json]:
    """Consecutive messages of the same role joined into one, their `key` lists concatenated. In each, the
    items `first` picks (tool results) come before the others, as the protocols want the answers to the
    tool calls to open the message; a message left with nothing gets one `empty` item."""
    out: list[Json] = []
    for m in messages:
        if out and out[-1]["role"] == m["role"]:
            out[-1] = {**out[-1], key: out[-1][key] + m[key]}
        else:
            out.append(m)
    for m in out:
        m[key] = sorted(m[key], key=lambda item: not first(item)) or [dict(empty)]
    return out


# OpenAI chat completions.


def _openai_chat(turns: Sequence[Turn], embed: Embed) -> Json:
    messages: list[Json] = []
    for is_tool, run in _runs(turns):
        if not is_tool:
            messages.extend(_chat_message(t, embed) for t in run)
            continue
        messages.extend(
            {"role": "tool", "tool_call_id": _call_id(t), "content": _tool_output(t)} for t in run
        )
        images = [image for t in run for image in _images(t)]
        if images:
            parts = [{"type": "text", "text": TOOL_IMAGES_INTRO}, *(_chat_image(i, embed) for i in images)]
            messages.append({"role": "user", "content": parts})
    return {"messages": messages}


def _chat_message(turn: Turn, embed: Embed) -> Json:
    if turn.role == "system":
        return {"role": "system", "content": "\n\n".join(_texts(turn))}
    if turn.role == "assistant":
        text = "\n\n".join(_texts(turn))
        if not turn.tool_calls:
            return {"role": "assistant", "content": text}
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c.arguments)},
            }
            for c in turn.tool_calls
        ]
        return {"role": "assistant", "content": text or None, "tool_calls": calls}
    parts = [
        _chat_image(p, embed) if isinstance(p, Image) else {"type": "text", "text": p.text}
        for p in _parts(turn)
    ]
    return {"role": "user", "content": parts or ""}  # the API refuses an empty list, not an empty string


def _chat_image(image: Image, embed: Embed) -> Json:
    url: Json = {"url": _data_url(image, embed)}
    if image.detail:
        url["detail"] = image.detail
    return {"type": "image_url", "image_url": url}


# OpenAI responses.


def _openai_responses(turns: Sequence[Turn], embed: Embed) -> Json:
    items: list[Json] = []
    for t in turns:
        if t.role == "user":
            items.append({"role": "user", "content": [_input_part(p, embed) for p in _parts(t)] or ""})
        elif t.role == "assistant":
            text = "\n\n".join(_texts(t))
            if text or not t.tool_calls:
                items.append({"role": "assistant", "content": text})
            items.extend(
                {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": _arguments(c.arguments),
                }
                for c in t.tool_calls
            )
        elif t.role == "tool":
            output: str | list[Json] = "\n".join(_texts(t))
            if _images(t):
                output = [_input_part(p, embed) for p in _parts(t)]
            items.append({"type": "function_call_output", "call_id": _call_id(t), "output": output})
    system = _system_text(turns)
    return {"instructions": system, "input": items} if system else {"input": items}


def _input_part(part: Text | Image, embed: Embed) -> Json:
    if isinstance(part, Text):
        return {"type": "input_text", "text": part.text}
    return {"type": "input_image", "image_url": _data_url(part, embed), "detail": part.detail or "auto"}


# Anthropic messages.


def _anthropic(turns: Sequence[Turn], embed: Embed) -> Json:
    messages: list[Json] = []
    for t in turns:
        if t.role == "assistant":
            calls = [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in t.tool_calls
            ]
            blocks = [_anthropic_block(p, embed) for p in _parts(t)]
            messages.append({"role": "assistant", "content": [*blocks, *calls]})
        elif t.role == "tool":
            result: Json = {"type": "tool_result", "tool_use_id": _call_id(t)}
            if blocks := [_anthropic_block(p, embed) for p in _parts(t)]:
                result["content"] = blocks
            messages.append({"role": "user", "content": [result]})
        elif t.role == "user":
            messages.append({"role": "user", "content": [_anthropic_block(p, embed) for p in _parts(t)]})
    empty = {"type": "text", "text": EMPTY}
    merged = _merged(messages, "content", first=lambda block: block["type"] == "tool_result", empty=empty)
    system = _system_text(turns)
    return {"system": system, "messages": merged} if system else {"messages": merged}


def _anthropic_block(part: Text | Image, embed: Embed) -> Json:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    source = {"type": "base64", "media_type": part.media_type, "data": embed("", part)}
    return {"type": "image", "source": source}


# Gemini generateContent.


def _gemini(turns: Sequence[Turn], embed: Embed) -> Json:
    contents: list[Json] = []
    names: dict[str, str] = {}  # tool call id → function name, for tool turns that do not say it
    for is_tool, run in _runs(turns):
        if is_tool:
            # The function responses stay together, one per call, as the API counts them against the
            # calls; the images follow them as plain parts.
            responses = [_function_response(t.name or names.get(_call_id(t), "tool"), t) for t in run]
            images = [_inline_data(image, embed) for t in run for image in _images(t)]
            contents.append({"role": "user", "parts": responses + images})
            continue
        for t in run:
            if t.role == "assistant":
                names.update((c.id, c.name) for c in t.tool_calls)
                calls = [{"function_call": {"name": c.name, "args": c.arguments}} for c in t.tool_calls]
                parts = [_gemini_part(p, embed) for p in _parts(t)]
                contents.append({"role": "model", "parts": [*parts, *calls]})
            elif t.role == "user":
                contents.append({"role": "user", "parts": [_gemini_part(p, embed) for p in _parts(t)]})
    merged = _merged(contents, "parts", first=lambda part: "function_response" in part, empty={"text": EMPTY})
    system = _system_text(turns)
    if not system:
        return {"contents": merged}
    return {"system_instruction": {"parts": [{"text": system}]}, "contents": merged}


def _function_response(name: str, turn: Turn) -> Json:
    return {"function_response": {"name": name, "response": {"output": _tool_output(turn)}}}


def _gemini_part(part: Text | Image, embed: Embed) -> Json:
    return {"text": part.text} if isinstance(part, Text) else _inline_data(part, embed)


def _inline_data(image: Image, embed: Embed) -> Json:
    return {"inline_data": {"mime_type": image.media_type, "data": embed("", image)}}


_ENCODERS: dict[str, Callable[[Sequence[Turn], Embed], Json]] = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
