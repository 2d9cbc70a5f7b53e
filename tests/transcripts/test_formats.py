"""Telling the formats apart: from the first lines as each host writes them, else from where hosts keep their
files; --format names one."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from attachstore.errors import InvalidRequest
from attachstore.transcripts.formats import HEAD_BYTES, detect, named, read_head, taking
from tests.transcripts import fixtures


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("name", ["codex", "claude", "gemini", "openai", "mcp"])
def test_each_host_is_told_by_its_first_line(name: str, spaced: bool) -> None:
    transcript = fixtures.BUILDERS[name](spaced)
    assert detect(Path("anything.jsonl"), transcript.text[:65536]).name == name


def test_legacy_gemini_json_and_the_generic_fallback() -> None:
    assert detect(Path("session-x.json"), fixtures.gemini_legacy().text).name == "gemini"
    assert detect(Path("notes.json"), b'{"note": "hello"}').name == "generic"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/home/u/.codex/sessions/2026/08/20/rollout-2026-08-20T10-00-00-x.jsonl", "codex"),
        ("/home/u/.claude/projects/-home-u-proj/abc.jsonl", "claude"),
        ("/home/u/.gemini/tmp/proj/chats/session-2026-08-21T10-00-7d3e9f6a.jsonl", "gemini"),
        ("/home/u/.codex/archived_sessions/old.jsonl", "codex"),
        ("/home/u/.gemini/tmp/proj/checkpoint-fix.json", "gemini"),
        ("/tmp/other.jsonl", "generic"),
    ],
)
def test_else_where_the_file_is_tells(path: str, name: str) -> None:
    assert detect(Path(path), b'{"something": "else"}').name == name


def claude_after(first: bytes) -> bytes:
    """A Claude Code session whose first line is `first`, and no other line a summary."""
    return first + b"\n" + fixtures.claude().text.split(b"\n", 1)[1]


@pytest.mark.parametrize(
    "first",
    [
        b'ssistant","message":{"role":"assistant","content":[]}}',  # torn: the end of a record
        b'{"type": "summary", "summary": "Fixing the layout"}',  # written again with spaces, no leafUuid
        b"\xef\xbb\xbf" + b"x" * (3 * HEAD_BYTES),  # longer than what is read of a line
        json.dumps({"message": {"content": [{"data": fixtures.b64(b"\x89PNG" * HEAD_BYTES)}]}}).encode()
        + b', "parentUuid": null}',  # its mark past the part of the line read
    ],
)
def test_a_first_line_no_host_tells_is_passed_over(first: bytes) -> None:
    head = read_head(io.BytesIO(claude_after(first)))
    assert detect(Path("/tmp/shared/5f0c7c4e.jsonl"), head).name == "claude"


def test_the_head_is_bounded_by_lines_and_bytes() -> None:
    long = b"y" * (5 * HEAD_BYTES)
    head = read_head(io.BytesIO(long + b"\n" + b"\n".join(b"%d" % i for i in range(200)) + b"\n"))
    lines = head.split(b"\n")
    assert lines[0] == long[:HEAD_BYTES]
    assert lines[1:4] == [b"0", b"1", b"2"]
    assert len(lines) == 64
    assert read_head(io.BytesIO(b"")) == b""
    assert read_head(io.BytesIO(b'{"a": 1}')) == b'{"a": 1}'


def test_where_the_file_is_tells_before_marks_of_request_bodies() -> None:
    line = b'{"type":"tool","input":{"command":"ls"}}'
    assert detect(Path("/home/u/.claude/projects/p/s.jsonl"), line).name == "claude"
    assert detect(Path("/tmp/s.jsonl"), line).name == "openai"


def test_the_formats_that_take_keys() -> None:
    assert taking([b"data", b"base64"]) == ["claude"]
    assert taking([b"result"]) == ["codex", "openai"]
    assert taking([b"data"]) == ["codex", "claude", "gemini", "mcp"]


def test_a_format_is_named() -> None:
    assert named("claude").keys == frozenset({b"data", b"base64"})
    with pytest.raises(InvalidRequest, match="--format: one of codex, claude"):
        named("cursor")
