"""Transcripts in each host's exact shape (from the hosts' public source: see docs/transcripts.md), built from
images made in the test, with what strip must find in them.

Every builder writes as its host does: compact JSON (serde_json, JSON.stringify: no spaces, '/' unescaped,
non-ASCII raw), keys in the host's order, one record per line; several images per line, the same image on
several lines, images inside tool results and inside tool output logged as a JSON string, a line without
any image, an invalid image, and base64 that is not an image (a PDF, audio) that must be left alone.
`spaced` gives the same records as other writers do: spaces after ':' and ',', every '/' written '\\/',
non-ASCII as \\u escapes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from tests.support.images import PDF, SVG, gif, jpeg, png, webp

PNG = png(24, 16, seed=1)
JPEG = jpeg(20, 20, seed=2)
GIF = gif(8, 8, seed=3)
WEBP = webp(16, 12, seed=4)
SCREENSHOT = png(40, 30, seed=5)
# A PNG signature, then nothing that decodes: the gate refuses it.
BROKEN_PNG = PNG[:40]
AUDIO = b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(range(64))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{b64(data)}"


@dataclass
class Transcript:
    """A transcript's bytes, and the images strip should find in it: how many occurrences, the distinct
    images it can store, and the distinct ones the gate refuses, by code."""

    text: bytes
    found: int
    stored: set[bytes]
    refused: dict[str, int] = field(default_factory=dict)
    kept: list[bytes] = field(default_factory=list)  # base64 payloads that must survive untouched

    @property
    def lines(self) -> list[bytes]:
        return self.text.splitlines()


def _line(record: Any) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def _spaced(record: Any) -> str:
    return json.dumps(record, ensure_ascii=True).replace("/", "\\/")


def _jsonl(records: list[Any], spaced: bool = False) -> bytes:
    write = _spaced if spaced else _line
    return "".join(write(r) + "\n" for r in records).encode()


# -- Codex rollouts (codex-rs/protocol models.rs, rollout recorder.rs) -----------------------------------


def codex(spaced: bool = False) -> Transcript:
    ts = "2026-08-20T10:00:0{}.456Z"
    mcp_result = [{"type": "image", "data": b64(SCREENSHOT), "mimeType": "image/png"}]
    records: list[Any] = [
        {
            "timestamp": ts.format(0),
            "type": "session_meta",
            "payload": {
                "id": "0199a213-81c0-7800-8aa1-bbab2a035a53",
                "timestamp": "2026-08-20T10:00:00.000Z",
                "cwd": "/home/u/proj",
                "originator": "codex_cli_rs",
                "cli_version": "0.120.0",
                "source": "cli",
                "model_provider": "openai",
            },
        },
        {
            "timestamp": ts.format(1),
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "<image name=[Image #1]>"},
                    {"type": "input_image", "image_url": url(PNG, "image/png"), "detail": "high"},
                    {"type": "input_text", "text": "</image>"},
                    {"type": "input_image", "image_url": url(JPEG, "image/jpeg"), "detail": "high"},
                    {"type": "input_text", "text": 'what is wrong here? "quoted", \\ and é'},
                ],
            },
        },
        {
            "timestamp": ts.format(1),
            "type": "event_msg",
            "payload": {
                "type": "user_message",
                "message": "look at this",
                "images": [url(PNG, "image/png"), url(JPEG, "image/jpeg")],
                "local_images": [],
                "text_elements": [],
            },
        },
        {
            "timestamp": ts.format(5),
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "view_image",
                "arguments": '{"path":"/home/u/proj/shot.png"}',
                "call_id": "call_abc",
            },
        },
        {
            "timestamp": ts.format(5),
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "call_abc",
                "output": [{"type": "input_image", "image_url": url(SCREENSHOT, "image/png")}],
            },
        },
        {
            "timestamp": ts.format(9),
            "type": "event_msg",
            "payload": {
                "type": "mcp_tool_call_end",
                "call_id": "call_def",
                "invocation": {"server": "playwright", "tool": "browser_take_screenshot", "arguments": {}},
                "duration": {"secs": 1, "nanos": 234000000},
                "result": {
                    "Ok": {
                        "content": [
                            {"text": "Took screenshot", "type": "text"},
                            {"data": b64(SCREENSHOT), "mimeType": "image/png", "type": "image"},
                            {"data": b64(BROKEN_PNG), "mimeType": "image/png", "type": "image"},
                            {"data": b64(AUDIO), "mimeType": "audio/mpeg", "type": "audio"},
                        ]
                    }
                },
            },
        },
        {
            # Older builds: an MCP result logged as a string of JSON.
            "timestamp": ts.format(9),
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "call_def",
                "output": json.dumps(mcp_result),
            },
        },
        {
            "timestamp": ts.format(9),
            "type": "response_item",
            "payload": {
                "type": "image_generation_call",
                "id": "ig_123",
                "status": "completed",
                "revised_prompt": "A gray tabby cat",
                "result": b64(WEBP),
            },
        },
        {
            "timestamp": ts.format(9),
            "type": "event_msg",
            "payload": {
                "type": "image_generation_end",
                "call_id": "ig_123",
                "status": "completed",
                "revised_prompt": "A gray tabby cat",
                "result": b64(WEBP),
            },
        },
        {
            "timestamp": ts.format(9),
            "type": "event_msg",
            "payload": {
                "type": "agent_message",
                "message": "Done: data:image/png;base64 is not an image here",
            },
        },
        {
            "timestamp": ts.format(9),
            "type": "compacted",
            "payload": {
                "message": "",
                "replacement_history": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": url(PNG, "image/png"), "detail": "high"}
                        ],
                    }
                ],
            },
        },
    ]
    return Transcript(
        _jsonl(records, spaced),
        found=11,
        stored={PNG, JPEG, SCREENSHOT, WEBP},
        refused={"INVALID_IMAGE": 1},
        kept=[b64(AUDIO)],
    )


# -- Claude Code sessions (public parsers and schemas: docs/transcripts.md) ------------------------------


def _claude_envelope(version: str, extra: dict[str, Any], **message: Any) -> dict[str, Any]:
    record = {
        "parentUuid": "9b1c6a1e-7f4d-4c55-8f0e-1d2c3b4a5f60",
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/u/proj",
        "sessionId": "5f0c7c4e-2b1a-4f7e-9d3c-8a6b5c4d3e2f",
        "version": version,
        "gitBranch": "main",
        "type": "user",
        "message": {"role": "user", **message},
        "uuid": "1a2b3c4d-0000-4000-8000-000000000001",
        "timestamp": "2026-09-25T18:48:53.754Z",
    }
    return record | extra


def claude(spaced: bool = False) -> Transcript:
    pasted = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}}
    read_png = {
        "type": "image",
        "source": {"type": "base64", "data": b64(SCREENSHOT), "media_type": "image/png"},
    }
    shot = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(JPEG)}}
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
    }
    records: list[Any] = [
        {
            "type": "summary",
            "summary": "Fixing the layout",
            "leafUuid": "1a2b3c4d-0000-4000-8000-000000000009",
        },
        _claude_envelope(
            "2.1.281",
            {"permissionMode": "default", "promptId": "p-1", "imagePasteIds": [1]},
            content=[{"type": "text", "text": "[Image #1] why is this broken?"}, pasted, pdf],
        ),
        _claude_envelope(
            "2.1.37",
            {
                "toolUseResult": {
                    "type": "image",
                    "file": {
                        "base64": b64(SCREENSHOT),
                        "type": "image/png",
                        "originalSize": len(SCREENSHOT),
                        "dimensions": {"originalWidth": 40, "originalHeight": 30},
                    },
                },
                "sourceToolAssistantUUID": "1a2b3c4d-0000-4000-8000-000000000002",
            },
            content=[
                {
                    "tool_use_id": "toolu_011DwFwQM9jBf7vUEqpy6Mry",
                    "type": "tool_result",
                    "content": [read_png],
                }
            ],
        ),
        _claude_envelope(
            "2.1.201",
            {"toolUseResult": [{"type": "text", "text": "Screenshot captured"}, shot]},
            content=[
                {
                    "tool_use_id": "toolu_01Xyz",
                    "type": "tool_result",
                    "content": [{"type": "text", "text": "Screenshot captured"}, shot],
                }
            ],
        ),
        _claude_envelope(
            "2.1.90",
            {"toolUseResult": "Error: the file is not valid\nsee above"},
            content=[
                {
                    "tool_use_id": "toolu_02",
                    "type": "tool_result",
                    "content": "no image here",
                    "is_error": True,
                }
            ],
        ),
        {
            "parentUuid": "9b1c6a1e-7f4d-4c55-8f0e-1d2c3b4a5f60",
            "isSidechain": False,
            "attachment": {
                "type": "queued_command",
                "prompt": [{"type": "text", "text": "[Image #1]  pic in queue"}, pasted],
                "imagePasteIds": [1],
                "commandMode": "prompt",
                "origin": {"kind": "human"},
            },
            "type": "attachment",
            "uuid": "1a2b3c4d-0000-4000-8000-000000000003",
            "timestamp": "2026-09-29T07:37:30.298Z",
        },
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "It overflows. 🙂"}]},
            "uuid": "1a2b3c4d-0000-4000-8000-000000000004",
        },
    ]
    return Transcript(_jsonl(records, spaced), found=6, stored={PNG, SCREENSHOT, JPEG}, kept=[b64(PDF)])


# -- gemini-cli chats (packages/core/src/services/chatRecordingService.ts) -------------------------------


MCP_NOTE = "[Tool 'shot' provided the following image data with mime-type: image/gif]"


def _gemini_records() -> list[Any]:
    read_file = {
        "id": "read_file_1724230809000_0",
        "name": "read_file",
        "args": {"file_path": "shot.png"},
        "result": [
            {
                "functionResponse": {
                    "id": "read_file_1724230809000_0",
                    "name": "read_file",
                    "response": {"output": "Binary content provided (1 item(s))."},
                }
            },
            {"inlineData": {"data": b64(SCREENSHOT), "mimeType": "image/png"}},
        ],
        "status": "success",
        "timestamp": "2026-08-21T10:00:09.000Z",
        "resultDisplay": "Read image file: shot.png",
        "description": "shot.png",
        "displayName": "ReadFile",
        "renderOutputAsMarkdown": True,
    }
    return [
        {
            "id": "7d3e9f6a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
            "timestamp": "2026-08-21T10:00:05.000Z",
            "type": "user",
            "content": [
                {"text": "describe @shot.png"},
                {"text": "\n--- Content from referenced files ---"},
                {"inlineData": {"data": b64(PNG), "mimeType": "image/png"}},
                {"inlineData": {"data": b64(AUDIO), "mimeType": "audio/mpeg"}},
                {"text": "\n--- End of content ---"},
            ],
            "displayContent": [{"text": "describe @shot.png"}],
        },
        {
            "id": "8e4f0a7b-2c3d-4e5f-9a01-b2c3d4e5f6a7",
            "timestamp": "2026-08-21T10:00:09.000Z",
            "type": "gemini",
            "content": "",
            "toolCalls": [read_file],
            "thoughts": [],
            "model": "gemini-2.5-pro",
        },
        {
            "id": "9f5a1b8c-3d4e-4f60-8b12-c3d4e5f6a7b8",
            "timestamp": "2026-08-21T10:00:09.100Z",
            "type": "user",
            "content": [
                {
                    "functionResponse": {
                        "id": "call_9",
                        "name": "mcp_shot",
                        "response": {"output": MCP_NOTE},
                        "parts": [{"inlineData": {"mimeType": "image/gif", "data": b64(GIF)}}],
                    }
                }
            ],
        },
    ]


def gemini(spaced: bool = False) -> Transcript:
    head = {
        "sessionId": "7d3e9f6a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
        "projectHash": "3f" * 32,
        "startTime": "2026-08-21T10:00:00.000Z",
        "lastUpdated": "2026-08-21T10:00:00.000Z",
        "kind": "main",
    }
    messages = _gemini_records()
    records: list[Any] = [
        head,
        messages[0],
        {"$set": {"lastUpdated": "2026-08-21T10:00:05.001Z"}},
        messages[1],
        messages[2],
        {"$set": {"messages": messages, "lastUpdated": "2026-08-21T10:00:10.000Z"}},  # a checkpoint
        {"$rewindTo": messages[1]["id"]},
    ]
    return Transcript(_jsonl(records, spaced), found=6, stored={PNG, SCREENSHOT, GIF}, kept=[b64(AUDIO)])


def gemini_legacy() -> Transcript:
    """gemini-cli up to v0.38: one pretty-printed JSON document, JSON.stringify(conversation, null, 2)."""
    conversation = {
        "sessionId": "7d3e9f6a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
        "projectHash": "3f" * 32,
        "startTime": "2026-03-01T10:00:00.000Z",
        "lastUpdated": "2026-03-01T10:00:05.000Z",
        "messages": _gemini_records(),
    }
    text = (json.dumps(conversation, indent=2, ensure_ascii=False) + "\n").encode()
    return Transcript(text, found=3, stored={PNG, SCREENSHOT, GIF}, kept=[b64(AUDIO)])


# -- OpenAI request bodies and MCP results ---------------------------------------------------------------


def openai(spaced: bool = False) -> Transcript:
    records: list[Any] = [
        {
            "model": "gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this image?"},
                        {"type": "image_url", "image_url": {"url": url(PNG, "image/png"), "detail": "auto"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    ],
                }
            ],
        },
        {
            "model": "gpt-4.1",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "And this one?"},
                        {"type": "input_image", "image_url": url(JPEG, "image/jpeg"), "detail": "auto"},
                    ],
                },
                {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": b64(WEBP)},
            ],
        },
        {
            "custom_id": "req-1",
            "method": "POST",
            "url": "/v1/responses",
            "body": {
                "model": "gpt-4.1",
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "call_1",
                        "output": [
                            {"type": "input_image", "image_url": url(PNG, "image/png"), "detail": "auto"}
                        ],
                    }
                ],
            },
        },
    ]
    return Transcript(_jsonl(records, spaced), found=4, stored={PNG, JPEG, WEBP})


def mcp(spaced: bool = False) -> Transcript:
    records: list[Any] = [
        {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {
                "content": [
                    {"type": "text", "text": "Screenshot taken"},
                    {"type": "image", "data": b64(SCREENSHOT), "mimeType": "image/png"},
                    {
                        "type": "resource",
                        "resource": {"uri": "file:///tmp/a.png", "mimeType": "image/png", "blob": b64(PNG)},
                    },
                    {"type": "audio", "data": b64(AUDIO), "mimeType": "audio/mpeg"},
                ],
                "isError": False,
            },
        },
        {"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "nothing to see"}]}},
    ]
    return Transcript(_jsonl(records, spaced), found=2, stored={SCREENSHOT, PNG}, kept=[b64(AUDIO)])


def generic() -> Transcript:
    """Any JSON: data URLs wherever they are, written plainly, with '\\/' escapes, in other cases; and what
    the gate refuses (SVG), base64 that is not canonical, and bare base64 (not looked at: no format names
    its key)."""
    padded = PNG + bytes(-(len(PNG) - 1) % 3)  # two '=' of padding, left out: not valid base64
    noncanonical = url(padded, "image/png").removesuffix("==")
    plain = json.dumps(
        {"note": url(GIF, "image/gif"), "more": [url(GIF, "image/gif"), url(SVG, "image/svg+xml")]}
    )
    escaped = json.dumps({"pic": url(JPEG, "image/jpeg")}).replace("/", "\\/")
    upper = json.dumps({"pic": "DATA:IMAGE/PNG;BASE64," + b64(PNG), "bare": b64(PNG)})
    bad = json.dumps({"x": noncanonical, "y": "data:image/png;charset=utf8,<svg/>"})
    text = f"{plain}\n{escaped}\n{upper}\n{bad}\n".encode()
    return Transcript(
        text,
        found=7,
        stored={GIF, JPEG, PNG},
        refused={"UNSUPPORTED_IMAGE_TYPE": 1, "INVALID_IMAGE_BASE64": 2},
        kept=[b64(PNG)],
    )


BUILDERS = {
    "codex": codex,
    "claude": claude,
    "gemini": gemini,
    "openai": openai,
    "mcp": mcp,
}
