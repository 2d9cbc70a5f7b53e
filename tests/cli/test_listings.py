"""`attachstore session list` and `attachstore stats`, from the data dir in process and from a daemon with
--url."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import image_file, run  # noqa: F401  (a fixture)
from tests.support.daemon import Daemons


def test_session_list_and_stats_from_the_data_dir(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    image_file: Path,  # noqa: F811
) -> None:
    d = ["--data-dir", str(tmp_path / "data")]
    for id_ in ("mcp-1", "mcp-2", "other"):
        assert run(capsys, "session", "create", *d, id_)[0] == 0
    assert run(capsys, "put", *d, "--session", "mcp-2", str(image_file))[0] == 0
    code, out, _ = run(capsys, "session", "list", *d, "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert (code, [s["session"] for s in listed]) == (0, ["mcp-2", "other", "mcp-1"])  # put used mcp-2 last
    assert listed[0]["images"] == 1
    code, out, _ = run(capsys, "session", "list", *d, "--prefix", "mcp-")
    lines = out.splitlines()
    assert lines[0].split() == ["SESSION", "LAST", "USED", "EXPIRES", "IMAGES", "BYTES", "ROUTE"]
    assert [line.split()[0] for line in lines[1:-1]] == ["mcp-2", "mcp-1"]
    assert lines[-1] == "2 sessions"
    assert run(capsys, "session", "list", *d, "--expired")[1].splitlines()[-1] == "0 sessions"

    code, out, _ = run(capsys, "stats", *d, "--json")
    stats = json.loads(out)
    assert (code, stats["objects"], stats["sessions"], stats["tenant"]) == (0, 1, 3, None)
    assert stats["collectible"]["objects"] == 0  # counted now: held, and within its grace
    code, out, _ = run(capsys, "stats", *d)
    assert "objects:          1 (" in out
    assert "sessions:         3 (0 expired)" in out
    assert "gc would collect: 0 (0 B)" in out


def test_session_list_and_stats_from_a_daemon(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    daemons: Daemons,
    image_file: Path,  # noqa: F811
) -> None:
    daemon = daemons.start(*daemons.store("[admission]\ndecode_workers = 1\n"))
    assert run(capsys, "session", "create", "--data-dir", str(tmp_path / "data"), "s")[0] == 0
    code, out, _ = run(capsys, "session", "list", "--url", daemon.url, "--json")
    assert (code, [json.loads(line)["session"] for line in out.splitlines()]) == (0, ["s"])
    code, out, _ = run(capsys, "stats", "--url", daemon.url, "--json")
    assert (code, json.loads(out)["sessions"]) == (0, 1)
