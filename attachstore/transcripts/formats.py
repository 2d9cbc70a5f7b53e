"""The transcript formats strip recognizes, and how one is told from the others. A format adds to the data
URLs every format finds the keys under which bare base64 is an image (docs/transcripts.md, "What strip
does")."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

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

HOST_KEYS = frozenset[bytes]().union(*(f.keys for f in FORMATS.values()))
HEAD_BYTES = 1 << 16  # what detection reads of each line
_HEAD_LINES = 64  # the lines it reads
_READ_MAX = 64 << 20  # what it reads through at most, to reach them past lines of images
_CHUNK = 1 << 20
_CODEX = re.compile(
    rb'\{\s*"timestamp"\s*:\s*"[^"]{1,40}"\s*,\s*(?:"ordinal"\s*:\s*[0-9]+\s*,\s*)?"type"\s*:\s*"[a-z_]{1,40}"\s*,'
    rb'\s*"payload"\s*:'
)
_GEMINI = (re.compile(rb'"sessionId"\s*:'), re.compile(rb'"projectHash"\s*:'))
_CLAUDE = re.compile(
    rb'"(?:parentUuid|leafUuid|isSidechain)"\s*:'
    rb'|"type"\s*:\s*"(?:file-history-snapshot|queue-operation|summary|custom-title)"'
)
_MCP = re.compile(rb'"jsonrpc"\s*:\s*"2\.0"|^\s*\{\s*"content"\s*:\s*\[')
_OPENAI = re.compile(rb'"(?:messages|input|custom_id)"\s*:')


def named(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise InvalidRequest(f"--format: one of {', '.join(FORMATS)}, not {name!r}") from None


def taking(keys: Iterable[bytes]) -> list[str]:
    """The formats that take bare base64 under every one of `keys`."""
    wanted = frozenset(keys)
    return [f.name for f in FORMATS.values() if f.keys and wanted <= f.keys]


def read_head(f: BinaryIO) -> bytes:
    """What detection reads of a file, from where it stands: the start of each of its first lines (up to
    HEAD_BYTES of each, _HEAD_LINES lines), one a line, reading through _READ_MAX bytes at most."""
    lines: list[bytes] = []
    line = bytearray()
    read = 0
    while len(lines) < _HEAD_LINES and read < _READ_MAX and (chunk := f.read(_CHUNK)):
        read += len(chunk)
        pos = 0
        while len(lines) < _HEAD_LINES:
            newline = chunk.find(b"\n", pos)
            end = len(chunk) if newline < 0 else newline
            line += chunk[pos : min(end, pos + HEAD_BYTES - len(line))]
            if newline < 0:
                break
            lines.append(bytes(line))
            line.clear()
            pos = newline + 1
    if line and len(lines) < _HEAD_LINES:
        lines.append(bytes(line))
    return b"\n".join(lines)


def detect(path: Path, head: bytes) -> Format:
    """The format of a transcript from its head (`read_head`): the first line a host's marks tell is enough,
    since every line of the JSONL formats is a record of the same family, and a line none tells (torn, cut,
    written by another program) is passed over. Else where hosts keep their files; else the marks of request
    bodies and MCP results; else generic."""
    lines = [head] if head.lstrip().startswith(b"{\n") else head.split(b"\n")
    for line in lines:
        if _CODEX.match(line):
            return FORMATS["codex"]
        if all(p.search(line) for p in _GEMINI):
            return FORMATS["gemini"]
        if _CLAUDE.search(line):
            return FORMATS["claude"]
    parts = path.parts
    rollout = path.name.startswith("rollout-") and path.name.endswith(".jsonl")
    if rollout or _within(parts, ".codex", "sessions", "archived_sessions"):
        return FORMATS["codex"]
    if _within(parts, ".claude", "projects"):
        return FORMATS["claude"]
    if _within(parts, ".gemini", "tmp"):
        return FORMATS["gemini"]
    for line in lines:
        if _MCP.search(line):
            return FORMATS["mcp"]
        if _OPENAI.search(line):
            return FORMATS["openai"]
    return FORMATS["generic"]


def _within(parts: tuple[str, ...], home: str, *under: str) -> bool:
    """Whether a path is under `home/<one of under>` (`~/.claude/projects`, at any depth)."""
    return any(a == home and b in under for a, b in pairwise(parts))
