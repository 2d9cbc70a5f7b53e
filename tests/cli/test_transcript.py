"""`attachstore transcript`: strip, restore and release from the command line, in-process and as a process."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attachstore.cli import main
from attachstore.cli.transcript import FORMAT_NAMES
from attachstore.transcripts import FORMATS
from tests.transcripts import fixtures


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A home with a Codex rollout and two Claude Code sessions idle for an hour, and a compressed rollout."""
    home = tmp_path / "home"
    files = {
        ".codex/sessions/2026/08/20/rollout-2026-08-20T10-00-00-a.jsonl": fixtures.codex().text,
        ".codex/sessions/2026/08/20/rollout-2026-08-19T10-00-00-b.jsonl.zst": b"(zstd)",
        ".claude/projects/-home-u-proj/s1.jsonl": fixtures.claude().text,
        ".claude/projects/-home-u-proj/s1/subagents/agent-1.jsonl": fixtures.claude(spaced=True).text,
    }
    hour_ago = time.time() - 3600
    for name, text in files.items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
        os.utime(path, (hour_ago, hour_ago))
    return home


def originals(home: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def test_strip_a_tree_in_place_then_restore_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tree: Path
) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    before = originals(tree)
    code, out, _ = run(capsys, "transcript", "strip", *data, str(tree), "--in-place", "--json")
    assert code == 0
    result = json.loads(out)
    statuses = {Path(f["file"]).name: (f["status"], f.get("reason")) for f in result["files"]}
    assert statuses == {
        "agent-1.jsonl": ("stripped", None),
        "s1.jsonl": ("stripped", None),
        "rollout-2026-08-19T10-00-00-b.jsonl.zst": ("skipped", "compressed"),
        "rollout-2026-08-20T10-00-00-a.jsonl": ("stripped", None),
    }
    total = result["total"]
    assert total["statuses"] == {"stripped": 3, "skipped": 1}
    assert total["images"] | {"refused": None} == {
        "found": 23,
        "distinct": 5,
        "stored": 4,
        "refused": None,
        "replaced": 22,
        "inline": 1,
        "already": 0,
        "unclaimed": 0,
    }
    assert total["images"]["refused"] == {"INVALID_IMAGE": 1}
    assert total["bytes"]["after"] < total["bytes"]["before"] / 4
    assert {f["format"] for f in result["files"] if "format" in f} == {"codex", "claude"}
    stripped = originals(tree)
    assert stripped != before

    code, out, _ = run(capsys, "transcript", "restore", *data, str(tree), "--in-place")
    assert code == 0
    assert out.splitlines()[-1].startswith("restore: 4 files (3 restored, 1 skipped)")
    assert originals(tree) == before


def test_live_sessions_are_left_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path, tree: Path) -> None:
    live = tree / ".claude/projects/-home-u-proj/s1.jsonl"
    os.utime(live, None)  # written just now
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, _ = run(capsys, "transcript", "strip", *data, str(tree), "--in-place")
    assert code == 0
    lines = {line.split()[1]: line for line in out.splitlines()[:-1]}
    assert lines[str(live)].startswith("skipped    ")
    assert "recent: modified 0 s ago (--min-age 600 s)" in lines[str(live)]
    assert live.read_bytes() == fixtures.claude().text
    code, out, _ = run(capsys, "transcript", "strip", *data, str(tree), "--in-place", "--min-age", "0s")
    assert "stripped   " + str(live) in out


def test_strip_one_file_to_another_restore_check_and_release(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    source = tmp_path / "session.jsonl"
    source.write_bytes(fixtures.gemini().text)
    out_file = tmp_path / "stripped.jsonl"
    code, out, _ = run(capsys, "transcript", "strip", *data, str(source), "-o", str(out_file))
    assert code == 0
    assert out.startswith(f"stripped   {source} -> {out_file}  [gemini] images 6 found, 3 distinct, 3 stored")
    assert source.read_bytes() == fixtures.gemini().text
    digest = hashlib.sha256(source.read_bytes()).hexdigest()

    code, out, _ = run(capsys, "transcript", "restore", *data, str(out_file), "--dry-run", "--sha256", digest)
    assert code == 0
    assert f"sha256 {digest}" in out
    code, _, err = run(capsys, "transcript", "release", *data, str(out_file))
    assert code == 1
    assert "TRANSCRIPT_STRIPPED" in err
    back = tmp_path / "back.jsonl"
    assert run(capsys, "transcript", "restore", *data, str(out_file), "-o", str(back))[0] == 0
    assert back.read_bytes() == source.read_bytes()
    code, out, _ = run(capsys, "transcript", "release", *data, str(out_file), "--force", "--json")
    assert code == 0
    assert json.loads(out)["released"][0]["released"] == 3


def test_a_generic_run_over_a_hosts_images_names_its_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    source = tmp_path / "s.jsonl"
    source.write_bytes(fixtures.claude().text)
    code, out, _ = run(capsys, "transcript", "strip", *data, str(source), "--in-place", "--format", "generic")
    assert code == 0
    first, total = out.splitlines()
    assert first.startswith(f"unchanged  {source}  [generic] images 0 found")
    assert first.endswith("; 6 images left inline under keys of --format claude: run again with it")
    assert total.startswith(
        "strip: 1 files (1 unchanged); images 0 found, 0 distinct, 0 stored, 0 refused, 6 unclaimed"
    )
    assert source.read_bytes() == fixtures.claude().text
    code, out, _ = run(
        capsys, "transcript", "strip", *data, str(source), "--dry-run", "--format", "gemini", "--json"
    )
    [file] = json.loads(out)["files"]
    assert (code, file["images"]["unclaimed"], file["formats"]) == (0, 1, ["claude"])


def test_a_ref_that_cannot_be_read_fails_naming_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    source = tmp_path / "s.jsonl"
    source.write_bytes(
        b'{"a":1}\n{"image_url":"attachstore:sha256:' + b"0" * 64 + b';data:image/png;base64,"}\n'
    )
    assert run(capsys, "transcript", "strip", *data, str(tmp_path / "s.jsonl"), "--dry-run")[0] == 0
    code, out, _ = run(capsys, "transcript", "restore", *data, str(source), "-o", str(tmp_path / "r.jsonl"))
    assert code == 1
    assert f"failed     {source} -> {tmp_path / 'r.jsonl'}  ATTACHMENT_NOT_FOUND: {source}: line 2: " in out
    assert not (tmp_path / "r.jsonl").exists()


def test_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    source = tmp_path / "s.jsonl"
    source.write_bytes(b"{}\n")
    for argv, message in (
        ([str(source)], "give -o OUT or --in-place"),
        ([str(source), "-o", str(source)], "is the input: use --in-place"),
        ([str(tmp_path / "nothing.jsonl"), "--in-place"], "no such file or directory"),
        ([str(source), "--in-place", "--min-age", "soon"], "--min-age: not a duration"),
    ):
        code, _, err = run(capsys, "transcript", "strip", *data, *argv)
        assert code in (1, 2), argv
        assert message in err, err
    code, _, err = run(capsys, "transcript", "release", *data)
    assert "name the transcripts" in err
    code, _, err = run(
        capsys, "transcript", "restore", "--data-dir", str(tmp_path / "none"), str(source), "--dry-run"
    )
    assert code == 2
    assert "no attachstore store at" in err


def test_format_offers_every_format_strip_knows() -> None:
    # The parser spells the names itself, so that it needs no store (docs/performance.md, "MCP start-up").
    assert tuple(FORMATS) == FORMAT_NAMES


def test_a_progress_line_on_a_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    source = tmp_path / "rollout-x.jsonl"
    source.write_bytes(fixtures.codex().text)
    code = main(["transcript", "strip", "--data-dir", str(tmp_path / "data"), str(source), "--in-place"])
    assert code == 0
    assert "\rstrip: 0/1 files, " in screen.getvalue()
    assert screen.getvalue().endswith("\r\x1b[K")


def test_the_command_as_a_process(tmp_path: Path) -> None:
    source = tmp_path / "rollout-y.jsonl"
    source.write_bytes(fixtures.codex().text)
    strip = ["transcript", "strip", "--data-dir", str(tmp_path / "d"), str(source), "--in-place", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "attachstore", *strip],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["statuses"] == {"stripped": 1}
