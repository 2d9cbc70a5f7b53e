"""Strip and restore beyond the round trip: in place, again on a stripped file, across files, refusals, a host
writing the file, dry runs, failures that leave everything as it was, release, and bounded memory."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attachstore.gate import sniff
from attachstore.maintenance import gc
from attachstore.service import Store
from attachstore.transcripts import (
    Options,
    Restorer,
    Stripper,
    inline,
    named,
    release,
    restore_file,
    session_for,
)
from attachstore.transcripts.reports import TranscriptError
from tests.conftest import MakeConfig
from tests.support.images import png
from tests.transcripts import fixtures

REF = b"attachstore:(sha256:[0-9a-f]{64})"


def rollout(*images: bytes) -> bytes:
    lines = [
        json.dumps(
            {
                "timestamp": "2026-08-20T10:00:01.456Z",
                "type": "response_item",
                "payload": {
                    "content": [{"type": "input_image", "image_url": fixtures.url(im, sniff(im) or "")}]
                },
            },
            separators=(",", ":"),
        )
        for im in images
    ]
    return "".join(line + "\n" for line in lines).encode()


async def strip(store: Store, source: Path, output: Path | None = None, **options: Any) -> Any:
    stripper = Stripper(store, Options(**options))
    try:
        return await stripper.strip(source, output if output is not None else source)
    finally:
        await stripper.close()


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@contextlib.contextmanager
def held_open(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process that keeps `path` open for appending, as Codex keeps its rollout for a whole session."""
    code = f"import time; f = open({str(path)!r}, 'ab'); print(1, flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline()
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def write_long_line(path: Path) -> int:
    """One line of about 64 MB: 24 MB of text, then 40 MB of images (four distinct ones, many times over).
    Returns how many images it holds."""
    images = [png(300, 300, seed=s) for s in range(4)]
    count = size = 0
    with open(path, "wb") as f:
        f.write(b'{"type":"x","payload":{"text":"')
        for _ in range(24):
            f.write(b"lorem ipsum \\n " * 69_905)
        f.write(b'","content":[')
        while size < 40_000_000:
            part = b'{"image_url":"' + fixtures.url(images[count % 4], "image/png").encode() + b'"},'
            f.write(part)
            size, count = size + len(part), count + 1
        f.write(b'{"end":true}]}}\n')
    return count


async def test_in_place_and_back(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-1.jsonl"
    original = rollout(fixtures.PNG, fixtures.SCREENSHOT, fixtures.PNG)
    source.write_bytes(original)
    os.chmod(source, 0o600)
    mtime = os.stat(source).st_mtime_ns
    report = await strip(store, source)
    assert report.status == "stripped"
    assert report.session == session_for(source)
    assert report.tally.summary() | {"refused": None} == {
        "found": 3,
        "distinct": 2,
        "stored": 2,
        "refused": None,
        "replaced": 3,
        "inline": 0,
        "already": 0,
        "unclaimed": 0,
    }
    st = os.stat(source)
    assert (st.st_mode & 0o777, st.st_mtime_ns) == (0o600, mtime)  # the host's listing order stays
    assert source.read_bytes() != original
    assert files_in(tmp_path) == ["data", "rollout-1.jsonl"]  # no temporary file left
    back = await restore_file(Restorer(store), source, source)
    assert back.status == "restored"
    assert source.read_bytes() == original


async def test_nothing_to_strip_leaves_the_file_alone(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "plain.jsonl"
    source.write_bytes(b'{"type":"user","text":"no image"}\n')
    inode = os.stat(source).st_ino
    report = await strip(store, source)
    assert report.status == "unchanged"
    assert os.stat(source).st_ino == inode


async def test_a_session_whose_first_line_no_host_tells_is_stripped_as_its_host(
    store: Store, tmp_path: Path
) -> None:
    source = tmp_path / "shared" / "5f0c7c4e.jsonl"  # not where Claude Code keeps it
    source.parent.mkdir()
    torn = b'ssistant","message":{"role":"assistant","content":[]}}\n'
    source.write_bytes(torn + fixtures.claude().text)
    report = await strip(store, source)
    assert (report.status, report.format, report.tally.replaced) == ("stripped", "claude", 6)
    assert (report.tally.unclaimed, report.formats) == (0, [])


@pytest.mark.parametrize(("name", "found", "unclaimed"), [("generic", 0, 6), ("gemini", 5, 1)])
async def test_a_format_that_leaves_a_hosts_images_names_the_one_that_takes_them(
    store: Store, tmp_path: Path, name: str, found: int, unclaimed: int
) -> None:
    source = tmp_path / "session.jsonl"
    source.write_bytes(fixtures.claude().text)
    stripper = Stripper(store, Options(dry_run=True))
    try:
        report = await stripper.strip(source, None, fmt=named(name))
    finally:
        await stripper.close()
    assert (report.tally.found, report.tally.unclaimed, report.formats) == (found, unclaimed, ["claude"])
    assert report.summary()["formats"] == ["claude"]
    assert source.read_bytes() == fixtures.claude().text


async def test_stripping_again_changes_nothing_and_new_images_are_stripped_too(
    store: Store, tmp_path: Path
) -> None:
    source = tmp_path / "rollout-2.jsonl"
    original = rollout(fixtures.PNG, fixtures.JPEG)
    source.write_bytes(original)
    await strip(store, source)
    stripped = source.read_bytes()
    again = await strip(store, source)
    assert (again.status, again.tally.already, source.read_bytes()) == ("unchanged", 2, stripped)
    # The host was resumed without a restore and logged one more image: only that one is new.
    more = rollout(fixtures.GIF)
    append(source, more)
    report = await strip(store, source)
    assert (report.status, report.tally.already, report.tally.replaced) == ("stripped", 2, 1)
    back = await restore_file(Restorer(store), source, tmp_path / "back.jsonl")
    assert (tmp_path / "back.jsonl").read_bytes() == original + more
    assert back.refs == 3


async def test_each_transcript_holds_its_refs_until_it_is_released(store: Store, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(rollout(fixtures.PNG, fixtures.JPEG))
    b.write_bytes(rollout(fixtures.JPEG))
    stripper = Stripper(store, Options())
    first, second = await stripper.strip(a, a), await stripper.strip(b, b)
    await stripper.close()
    jpeg_ref = next(r for r in first.tally.stored if r in second.tally.stored)
    # The JPEG was admitted once, for a's session; b's session holds it too.
    assert jpeg_ref in (await store.sessions.get(("", second.session))).holds
    with pytest.raises(TranscriptError) as e:
        await release(store, ("", first.session), a)
    assert e.value.code == "TRANSCRIPT_STRIPPED"
    assert await release(store, ("", first.session), a, force=True) == 2
    await gc.execute(store, await gc.plan(store, grace=0))
    # a's own PNG is gone with its session; the JPEG that b names too is kept.
    stripped = a.read_bytes()
    for target in (tmp_path / "a2.jsonl", a):
        report = await restore_file(Restorer(store), a, target)
        assert (report.status, report.reason) == ("failed", "ATTACHMENT_NOT_FOUND")
        assert f"{a}: line 1: " in (report.message or "")
    assert a.read_bytes() == stripped  # nothing half-written
    assert files_in(tmp_path) == ["a.jsonl", "b.jsonl", "data"]
    assert (await restore_file(Restorer(store), b, tmp_path / "b2.jsonl")).status == "restored"


async def test_release_after_restore(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "c.jsonl"
    source.write_bytes(rollout(fixtures.PNG))
    report = await strip(store, source)
    await restore_file(Restorer(store), source, source)
    assert await release(store, ("", report.session), source) == 1


async def test_what_the_stored_limits_refuse_stays_inline(make_config: MakeConfig, tmp_path: Path) -> None:
    # Oversize images are fitted by the configuration, but a transcript's images are stored exactly or not.
    big = png(64, 64, seed=7)
    store = await Store.open(make_config(limits={"max_image_bytes": 4000}, admission={"oversize": "fit"}))
    try:
        source = tmp_path / "d.jsonl"
        original = rollout(fixtures.PNG, big, big)
        source.write_bytes(original)
        report = await strip(store, source)
        assert report.tally.summary()["refused"] == {"IMAGE_TOO_LARGE": 1}
        assert (report.tally.replaced, report.tally.inline) == (1, 2)
        assert fixtures.b64(big).encode() in source.read_bytes()
        await restore_file(Restorer(store), source, source)
        assert source.read_bytes() == original
    finally:
        await store.close()


async def test_a_file_a_host_writes_meanwhile_is_left_as_it_is(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "e.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)

    def host_appends(step: str) -> None:
        if step == "verified":
            append(source, b'{"type":"user"}\n')

    report = await strip(store, source, steps=host_appends)
    assert (report.status, report.reason) == ("skipped", "TRANSCRIPT_BUSY")
    assert "changed while it was stripped" in (report.message or "")
    assert source.read_bytes() == original + b'{"type":"user"}\n'
    assert files_in(tmp_path) == ["data", "e.jsonl"]


async def test_a_file_open_for_writing_is_refused_in_place(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-f.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)
    with held_open(source) as holder:
        report = await strip(store, source)
        assert (report.status, report.reason) == ("skipped", "TRANSCRIPT_BUSY")
        assert f"pid {holder.pid}" in (report.message or "")
        assert source.read_bytes() == original
        assert await store.index.refs() == set()  # refused before any work
        back = await restore_file(Restorer(store), source, source)
        assert (back.status, back.reason) == ("skipped", "TRANSCRIPT_BUSY")
        forced = await strip(store, source, assume_closed=True)
        assert forced.status == "stripped"


async def test_a_dry_run_writes_and_stores_nothing(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "g.jsonl"
    original = fixtures.codex().text
    source.write_bytes(original)
    stripper = Stripper(store, Options(dry_run=True))
    report = await stripper.strip(source, None)
    await stripper.close()
    assert report.status == "dry-run"
    assert report.tally.summary()["stored"] == 4  # would be stored
    assert report.tally.summary()["refused"] == {"INVALID_IMAGE": 1}
    assert report.bytes_after < report.bytes_before
    assert source.read_bytes() == original
    assert files_in(tmp_path) == ["data", "g.jsonl"]
    assert await store.index.refs() == set()


async def test_a_placeholder_naming_nothing_fails_and_changes_nothing(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "h.jsonl"
    text = json.dumps({"a": "attachstore:sha256:" + "0" * 64, "b": fixtures.url(fixtures.PNG, "image/png")})
    source.write_bytes(text.encode() + b"\n")
    report = await strip(store, source)
    assert (report.status, report.reason) == ("failed", "ATTACHMENT_NOT_FOUND")
    assert source.read_bytes() == text.encode() + b"\n"
    assert files_in(tmp_path) == ["data", "h.jsonl"]


async def test_a_stripped_file_that_would_not_restore_exactly_is_not_written(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "i.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)
    monkeypatch.setattr(inline.Placeholder, "base64", lambda self, data: b"AAAA")
    report = await strip(store, source)
    assert (report.status, report.reason) == ("failed", "TRANSCRIPT_UNVERIFIED")
    assert source.read_bytes() == original
    assert files_in(tmp_path) == ["data", "i.jsonl"]


async def test_restore_checks_the_hash_it_is_given(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "j.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)
    await strip(store, source)
    stripped = source.read_bytes()
    wrong = await restore_file(Restorer(store), source, source, expect="0" * 64)
    assert (wrong.status, wrong.reason) == ("failed", "TRANSCRIPT_UNVERIFIED")
    assert source.read_bytes() == stripped
    right = await restore_file(Restorer(store), source, source, expect=hashlib.sha256(original).hexdigest())
    assert right.status == "restored"
    assert source.read_bytes() == original


async def test_memory_is_bounded_by_the_images_not_the_line(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "k.jsonl"
    count = write_long_line(source)
    line = source.stat().st_size
    tracemalloc.start()
    try:
        report = await strip(store, source, tmp_path / "k.stripped.jsonl")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.status == "stripped", report.message
    assert report.tally.replaced == count
    assert line > 60_000_000
    assert peak < 24_000_000, f"peak {peak / 1e6:.0f} MB for a line of {line / 1e6:.0f} MB"
