"""The safe replacement of a file and who has it open for writing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attachstore.transcripts import files, writers
from attachstore.transcripts.files import Snapshot, Staged


def test_a_staged_file_replaces_its_target_with_its_mode_and_times(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_bytes(b"old\n")
    os.chmod(target, 0o640)
    os.utime(target, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    before = Snapshot.of(os.stat(target))
    steps: list[str] = []
    staged = Staged(target, steps.append)
    assert files.is_temp(staged.path)
    assert staged.path.parent == tmp_path
    assert not staged.path.name.endswith((".json", ".jsonl"))  # no host reads it as a transcript
    staged.write(b"new\n")
    staged.sync()
    assert target.read_bytes() == b"old\n"  # untouched until the rename
    staged.prepare(before)
    assert staged.rename()  # exchanged: the replaced file is at the temporary name until the end
    assert staged.path.read_bytes() == b"old\n"
    staged.close(exchanged=True)
    assert target.read_bytes() == b"new\n"
    st = os.stat(target)
    assert (st.st_mode & 0o777, st.st_mtime_ns) == (0o640, before.mtime_ns)
    assert steps == ["created", "synced", "renamed", "dir_synced"]
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_discard_leaves_the_target_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_bytes(b"old\n")
    staged = Staged(target, lambda _s: None)
    staged.write(b"half")
    staged.discard()
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_a_snapshot_sees_appends_and_replacements(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_bytes(b"a\n")
    before = Snapshot.of(os.stat(target))
    assert before.unchanged(target)
    with open(target, "ab") as f:
        f.write(b"b\n")
    assert not before.unchanged(target)
    target.unlink()
    assert not before.unchanged(target)


def test_a_process_writing_the_file_is_named(tmp_path: Path) -> None:
    target = tmp_path / "rollout.jsonl"
    target.write_bytes(b"{}\n")
    # Like Codex: one O_APPEND descriptor for the whole session.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, time; f = open({str(target)!r}, 'ab'); print(1, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline()
        found = writers.writers(target)
        assert found.unknown is None
        assert [pid for pid, _ in found.found] == [holder.pid]
        refusal = found.refusal(target)
        assert refusal is not None
        assert f"pid {holder.pid}" in refusal.message
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert writers.writers(target).found == []


def test_readers_are_not_writers(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_bytes(b"{}\n")
    with open(target, "rb"):
        assert writers.writers(target) == writers.Writers([])


def test_without_proc_or_lsof_it_says_it_cannot_tell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.jsonl"
    target.write_bytes(b"{}\n")
    monkeypatch.setattr(writers.shutil, "which", lambda _name: None)
    found = writers.writers(target, proc=tmp_path / "no-proc")
    assert found.found == []
    assert found.unknown is not None
    refusal = found.refusal(target)
    assert refusal is not None
    assert "--assume-closed" in (refusal.hint or "")


def test_lsof_output_is_read() -> None:
    out = "p101\ncclaude\nfr3\nar\np202\nccodex\nf7\naw\nf8\nau\n"
    assert writers.parse_lsof(out).found == [(202, "codex")]


@pytest.mark.parametrize(("owner", "unknown"), [("other", False), ("same", True)])
def test_processes_that_cannot_be_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: str, unknown: bool
) -> None:
    # A /proc with one process whose descriptors cannot be listed: another user's is not the host writing
    # this user's session; one of the same user leaves it unknown.
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    (proc / "4242" / "fd").mkdir(parents=True)
    target = tmp_path / "t.jsonl"
    target.write_bytes(b"{}\n")
    listdir = os.listdir

    def refuse(path: str) -> list[str]:
        if "4242" in str(path):
            raise PermissionError(13, "Permission denied")
        return listdir(path)

    monkeypatch.setattr(writers.os, "listdir", refuse)
    monkeypatch.setattr(writers, "_owner", lambda path: os.getuid() if owner == "same" else os.getuid() + 1)
    found = writers.writers(target, proc=proc)
    assert found.found == []
    assert (found.unknown is not None) == unknown
