"""A record a host appends by path while strip or restore replaces the file is never lost: before the last
check it makes the file busy (left as it was, with the record); between the check and the rename, or written
just after the rename through a descriptor opened before it, it ends up in the new file, as it came, and the
report says so. The points of the window are reached through the replacement's steps hook."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from attachstore.service import Store
from attachstore.transcripts import Options, Restorer, Stripper, files, restore_file
from tests.support.images import png
from tests.transcripts import fixtures
from tests.transcripts.test_strip import rollout

# A record of the host's, with an inline image of its own: appended after strip read the file.
RECORD = rollout(png(7, 5, seed=9))


class Host:
    """Appends RECORD to `path` by path at one point of the replacement: `at` a step (open, write, close at
    once), or opened at `opened` and written and closed at `written` (a host whose append straddles the
    rename)."""

    def __init__(
        self, path: Path, at: str | None = None, opened: str | None = None, written: str = ""
    ) -> None:
        self.path, self.at, self.opened, self.written = path, at, opened, written
        self.fd: int | None = None
        self.appended = False

    def __call__(self, step: str) -> None:
        if step == self.at:
            with open(self.path, "ab") as f:
                f.write(RECORD)
            self.appended = True
        if step == self.opened:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if step == self.written and self.fd is not None:
            os.write(self.fd, RECORD)
            os.close(self.fd)
            self.fd = None
            self.appended = True


async def strip(store: Store, source: Path, **options: Any) -> Any:
    stripper = Stripper(store, Options(**options))
    try:
        return await stripper.strip(source, source)
    finally:
        await stripper.close()


WINDOW = {
    "between the check and the rename": {"at": "checked"},
    "opened before the rename, written after it": {"opened": "checked", "written": "renamed"},
    "opened before the check, written after the rename": {"opened": "synced", "written": "renamed"},
}


@pytest.fixture(params=["exchange", "rename"])
def swap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways the new version takes the file's place: exchanged with it, or (a file system that cannot
    exchange) renamed over it."""
    if request.param == "rename":
        monkeypatch.setattr(files, "_exchange", lambda _a, _b: False)
    return str(request.param)


@pytest.mark.parametrize("point", list(WINDOW))
async def test_a_record_appended_in_the_window_is_in_the_stripped_file(
    store: Store, tmp_path: Path, point: str, swap: str
) -> None:
    source = tmp_path / "rollout-1.jsonl"
    original = rollout(fixtures.PNG, fixtures.SCREENSHOT)
    source.write_bytes(original)
    host = Host(source, **WINDOW[point])
    report = await strip(store, source, steps=host, assume_closed=point.startswith("opened before the check"))
    assert host.appended
    text = source.read_bytes()
    assert text.endswith(RECORD), f"the record is lost: {report.status} {report.message}"
    assert report.status == "stripped"
    assert report.appended == len(RECORD)
    assert "appended" in (report.message or "")
    assert report.bytes_after == len(text)
    assert sorted(os.listdir(tmp_path)) == ["data", source.name]
    # The record came as it was: restoring gives the original and the record, byte for byte.
    back = tmp_path / "back.jsonl"
    assert (await restore_file(Restorer(store), source, back)).status == "restored"
    assert back.read_bytes() == original + RECORD
    # And the next run strips the record's image too.
    again = await strip(store, source)
    assert (again.status, again.tally.replaced, again.tally.already) == ("stripped", 1, 2)


async def test_a_record_appended_before_the_check_leaves_the_file_busy(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-2.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)
    report = await strip(store, source, steps=Host(source, at="synced"))
    assert (report.status, report.reason) == ("skipped", "TRANSCRIPT_BUSY")
    assert source.read_bytes() == original + RECORD


@pytest.mark.parametrize("point", list(WINDOW))
async def test_a_record_appended_while_restoring_in_place_is_kept(
    store: Store, tmp_path: Path, point: str
) -> None:
    source = tmp_path / "rollout-3.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)
    await strip(store, source)
    host = Host(source, **WINDOW[point])
    report = await restore_file(
        Restorer(store),
        source,
        source,
        steps=host,
        assume_closed=point.startswith("opened before the check"),
    )
    assert host.appended
    assert source.read_bytes() == original + RECORD, f"the record is lost: {report.status}"
    assert report.status == "restored"
    assert report.appended == len(RECORD)


async def test_a_file_a_host_rewrote_in_the_window_is_put_back(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-4.jsonl"
    source.write_bytes(rollout(fixtures.PNG, fixtures.SCREENSHOT))
    rewritten = rollout(fixtures.JPEG)  # shorter: the host compacted it in place

    def host(step: str) -> None:
        if step == "checked":
            source.write_bytes(rewritten)

    report = await strip(store, source, steps=host)
    assert (report.status, report.reason) == ("skipped", "TRANSCRIPT_BUSY")
    assert source.read_bytes() == rewritten
    assert sorted(os.listdir(tmp_path)) == ["data", source.name]


async def test_a_host_that_opened_the_file_in_the_window_and_keeps_it_gets_it_back(
    store: Store, tmp_path: Path
) -> None:
    source = tmp_path / "rollout-5.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)
    host = Host(source, opened="checked", written="never")
    report = await strip(store, source, steps=host)
    assert host.fd is not None
    os.write(host.fd, RECORD)  # it goes on writing, into the file at the path
    os.close(host.fd)
    assert (report.status, report.reason) == ("skipped", "TRANSCRIPT_BUSY")
    assert source.read_bytes() == original + RECORD


async def test_without_an_exchange_a_rewrite_in_the_window_is_reported_lost(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_exchange", lambda _a, _b: False)
    source = tmp_path / "rollout-6.jsonl"
    source.write_bytes(rollout(fixtures.PNG, fixtures.SCREENSHOT))

    def host(step: str) -> None:
        if step == "checked":
            source.write_bytes(rollout(fixtures.JPEG))

    report = await strip(store, source, steps=host)
    assert (report.status, report.reason) == ("failed", "TRANSCRIPT_LOST")
    assert "rewritten by a host" in (report.message or "")


@pytest.mark.parametrize("fails", ["append", "close"])
async def test_a_failure_after_the_exchange_puts_the_hosts_file_back(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """The disk fills (or fsync fails) once the new version has taken the file's place: the replaced file,
    with the record a host appended meanwhile, goes back to the path; it is never removed."""
    source = tmp_path / "rollout-5.jsonl"
    original = rollout(fixtures.PNG)
    source.write_bytes(original)

    def full(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.Staged, fails, full)
    report = await strip(store, source, steps=Host(source, at="checked"))
    assert report.status != "stripped"
    assert source.read_bytes() == original + RECORD
    assert sorted(os.listdir(tmp_path)) == ["data", source.name]
