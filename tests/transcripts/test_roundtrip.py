"""Strip then restore, on transcripts of every format in its host's exact shape: the stripped file is valid
JSON, names refs that read back verified and that its session holds, gc keeps them, and restoring gives the
original bytes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from attachstore.maintenance import gc
from attachstore.service import Store
from attachstore.transcripts import Options, Restorer, Stripper, restore_file
from tests.transcripts import fixtures
from tests.transcripts.fixtures import Transcript

REFS = re.compile(rb"attachstore:(sha256:[0-9a-f]{64})")
# Where each host keeps its files (the spaced variants are told apart by where they are, for codex).
NAMES = {
    "codex": ".codex/sessions/2026/08/20/rollout-2026-08-20T10-00-00-0199a213-81c0-7800-8aa1.jsonl",
    "claude": ".claude/projects/-home-u-proj/5f0c7c4e-2b1a-4f7e-9d3c-8a6b5c4d3e2f.jsonl",
    "gemini": ".gemini/tmp/proj/chats/session-2026-08-21T10-00-7d3e9f6a.jsonl",
    "openai": "requests.jsonl",
    "mcp": "results.jsonl",
}


def written(transcript: Transcript, payload: str, spaced: bool) -> bytes:
    return (payload.replace("/", "\\/") if spaced else payload).encode()


async def strip_and_check(
    store: Store, tmp_path: Path, name: str, transcript: Transcript, spaced: bool
) -> bytes:
    source = tmp_path / "home" / NAMES.get(name, f"{name}.json")
    source.parent.mkdir(parents=True)
    source.write_bytes(transcript.text)
    output = source.with_name("stripped-" + source.name)
    stripper = Stripper(store, Options())
    report = await stripper.strip(source, output)
    await stripper.close()
    assert (report.status, report.message) == ("stripped", None)
    assert report.format == name.removesuffix("_legacy")
    images = report.tally.summary()
    assert images["found"] == transcript.found
    assert images["stored"] == len(transcript.stored)
    assert images["refused"] == transcript.refused
    assert images["replaced"] + images["inline"] == transcript.found

    stripped = output.read_bytes()
    assert report.bytes_after == len(stripped) < report.bytes_before == len(transcript.text)
    if name == "gemini_legacy":
        json.loads(stripped)
    else:
        assert len(stripped.splitlines()) == len(transcript.lines)
        for line in stripped.splitlines():  # each line still valid JSON
            json.loads(line)
    for image in transcript.stored:
        if fixtures.b64(image) not in transcript.kept:
            assert written(transcript, fixtures.b64(image), spaced) not in stripped
    for payload in transcript.kept:  # what is not an image stays where it was
        assert written(transcript, payload, spaced) in stripped
    # Every ref reads back verified, is one of the images, and the transcript's session holds it.
    refs = {m.decode() for m in REFS.findall(stripped)}
    assert {bytes((await store.read(ref))[1]) for ref in refs} == transcript.stored
    session = await store.sessions.get(("", report.session or ""))
    assert set(session.holds) == refs
    return stripped, output


@pytest.mark.parametrize("spaced", [False, True], ids=["as-written", "spaced-escaped"])
@pytest.mark.parametrize("name", sorted(fixtures.BUILDERS))
async def test_strip_then_restore_is_byte_identical(
    store: Store, tmp_path: Path, name: str, spaced: bool
) -> None:
    transcript = fixtures.BUILDERS[name](spaced)
    _, stripped = await strip_and_check(store, tmp_path, name, transcript, spaced)
    back = tmp_path / "restored"
    report = await restore_file(Restorer(store), stripped, back)
    assert report.status == "restored", report.message
    assert back.read_bytes() == transcript.text
    assert report.sha256 == hashlib.sha256(transcript.text).hexdigest()


@pytest.mark.parametrize("name", ["gemini_legacy", "generic"])
async def test_pretty_json_and_generic_data_urls(store: Store, tmp_path: Path, name: str) -> None:
    transcript = fixtures.gemini_legacy() if name == "gemini_legacy" else fixtures.generic()
    stripped, output = await strip_and_check(store, tmp_path, name, transcript, spaced=False)
    back = tmp_path / "restored"
    await restore_file(Restorer(store), output, back)
    assert back.read_bytes() == transcript.text
    if name == "generic":  # refused ones stay exactly as they were
        assert b"data:image/svg+xml;base64," in stripped
        assert b'"data:image/png;charset=utf8,<svg/>"' in stripped


async def test_gc_at_grace_zero_keeps_what_a_stripped_transcript_holds(store: Store, tmp_path: Path) -> None:
    transcript = fixtures.codex()
    _, stripped = await strip_and_check(store, tmp_path, "codex", transcript, spaced=False)
    result = await gc.execute(store, await gc.plan(store, grace=0))
    assert result.collected == []
    back = tmp_path / "restored"
    assert (await restore_file(Restorer(store), stripped, back)).status == "restored"
    assert back.read_bytes() == transcript.text
