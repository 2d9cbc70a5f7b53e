"""The transcript formats strip recognizes, and how one is told from the others. A format adds to the data
URLs every format finds the keys under which bare base64 is an image (docs/transcripts.md, "What strip
does")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    keys: frozenset[bytes]  # keys whose bare base64 values are images
    what: str


FORMATS = {
    f.name: f
    for f in (
        Format(
            "codex",
            frozenset({b"data", b"blob", b"result"}),
            "Codex rollouts: data URLs in input_image and tool outputs, base64 in MCP results and "
            "image generation results",
        ),
        Format(
            "claude",
            frozenset({b"data", b"base64"}),
            "Claude Code sessions: image blocks (source.data) in messages and tool results, "
            "toolUseResult.file.base64",
        ),
        Format("gemini", frozenset({b"data"}), "gemini-cli chats, JSONL and legacy JSON: inlineData.data"),
        Format(
            "openai",
            frozenset({b"result"}),
            "OpenAI chat and Responses payloads: data URLs, image generation results",
        ),
        Format("mcp", frozenset({b"data", b"blob"}), "MCP tool results: image content, resource blobs"),
        Format("generic", frozenset(), "any JSON or JSONL: data:image/… URLs only"),
    )
}

HEAD_BYTES = 1 << 16  # what detection reads of a file
_CODEX = re.compile(
    rb'\{\s*"timestamp"\s*:\s*"[^"]{1,40}"\s*,\s*(?:"ordinal"\s*:\s*[0-9]+\s*,\s*)?"type"\s*:\s*"[a-z_]{1,40}"\s*,'
    rb'\s*"payload"\s*:'
)
_GEMINI = (re.compile(rb'"sessionId"\s*:'), re.compile(rb'"projectHash"\s*:'))
_CLAUDE = re.compile(
    rb'"(?:parentUuid|leafUuid|isSidechain)"\s*:|"type":"(?:file-history-snapshot|queue-operation|summary)"'
)
_MCP = re.compile(rb'"jsonrpc"\s*:\s*"2\.0"|^\s*\{\s*"content"\s*:\s*\[')
_OPENAI = re.compile(rb'"(?:messages|input|custom_id)"\s*:')


def named(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise InvalidRequest(f"--format: one of {', '.join(FORMATS)}, not {name!r}") from None


def detect(path: Path, head: bytes) -> Format:
    """The format of a transcript from its first bytes (the first line is enough: every line of the JSONL
    formats is a record of the same family), else from where hosts keep their files, else generic."""
    first = head.split(b"\n", 1)[0] if not head.lstrip().startswith(b"{\n") else head
    if _CODEX.match(first):
        return FORMATS["codex"]
    if all(p.search(first) for p in _GEMINI):
        return FORMATS["gemini"]
    if _CLAUDE.search(first):
        return FORMATS["claude"]
    if _MCP.search(first):
        return FORMATS["mcp"]
    if _OPENAI.search(first):
        return FORMATS["openai"]
    parts = path.parts
    if path.name.startswith("rollout-") and path.name.endswith(".jsonl"):
        return FORMATS["codex"]
    if ".claude" in parts and "projects" in parts:
        return FORMATS["claude"]
    if ".gemini" in parts and "chats" in parts:
        return FORMATS["gemini"]
    return FORMATS["generic"]
