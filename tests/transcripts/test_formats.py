"""Telling the formats apart: from the first line as each host writes it, else from where hosts keep their
files; --format names one."""

from __future__ import annotations

from pathlib import Path

import pytest

from attachstore.errors import InvalidRequest
from attachstore.transcripts.formats import detect, named
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
        ("/tmp/other.jsonl", "generic"),
    ],
)
def test_else_where_the_file_is_tells(path: str, name: str) -> None:
    assert detect(Path(path), b'{"something": "else"}').name == name


def test_a_format_is_named() -> None:
    assert named("claude").keys == frozenset({b"data", b"base64"})
    with pytest.raises(InvalidRequest, match="--format: one of codex, claude"):
        named("cursor")
