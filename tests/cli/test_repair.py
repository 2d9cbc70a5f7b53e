"""`attachstore transcript repair`: the command line, its report and JSON, --dry-run, --undo, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attachstore.cli import main
from tests.transcripts.test_repair import HEIC, TRUNCATED, claude


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_repair_dry_run_then_in_place_then_undo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    source = tmp_path / "s.jsonl"
    original = claude((HEIC, "image/png"), (TRUNCATED, "image/png"))
    source.write_bytes(original)
    repair = ["transcript", "repair", *data, str(source), "--for", "claude-sonnet-4-5", "--assume-closed"]

    code, out, _ = run(capsys, *repair, "--dry-run")
    assert code == 0, out
    assert out.startswith("dry-run")
    assert "images 0 kept, 1 fitted, 1 to text" in out
    assert "to text  line 3: INVALID_IMAGE" in out
    assert "largest request: 1 images (limit 100)" in out
    assert source.read_bytes() == original

    code, out, _ = run(capsys, *repair, "--in-place", "--json")
    assert code == 0, out
    [file] = json.loads(out)["files"]
    assert file["status"] == "repaired"
    assert file["images"]["fitted"][0]["to"]["media_type"] == "image/jpeg"
    assert file["images"]["text"][0]["code"] == "INVALID_IMAGE"
    assert file["request"]["limits"]["provider"] == "anthropic"
    assert Path(file["backup"]).read_bytes() == original
    assert source.read_bytes() != original

    code, out, _ = run(capsys, "transcript", "repair", *data, "--undo", str(source), "--assume-closed")
    assert code == 0, out
    assert out.startswith("undone")
    assert source.read_bytes() == original


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ([], "give --for MODEL"),
        (["--for", "claude-sonnet-4-5"], "give one of -o OUT, --in-place, --dry-run"),
        (["--for", "claude-sonnet-4-5", "--dry-run", "--in-place"], "give one of"),
    ],
)
def test_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], says: str
) -> None:
    source = tmp_path / "s.jsonl"
    source.write_bytes(claude((HEIC, "image/png")))
    code, _, err = run(capsys, "transcript", "repair", "--data-dir", str(tmp_path / "d"), str(source), *extra)
    assert code == 1  # as every usage error the parser cannot see
    assert says in err


def test_an_unknown_model_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    source.write_bytes(claude((HEIC, "image/png")))
    code, _, err = run(
        capsys,
        "transcript",
        "repair",
        "--data-dir",
        str(tmp_path / "d"),
        str(source),
        "--for",
        "no-such-x1",
        "--dry-run",
    )
    assert code == 1
    assert "INVALID_REQUEST" in err
    assert "no-such-x1" in err
