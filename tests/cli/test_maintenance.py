"""What `gc` and `audit` print: the plan's counts, progress while planning, the audit's next steps and
throttling, and the JSON's `clean`."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from attachstore.cli import main
from attachstore.text import human_bytes
from tests.support.faults import flip_byte
from tests.support.images import png


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _object(data_dir: Path, ref: str) -> Path:
    hex = ref.split(":")[1]
    return data_dir / "objects" / "sha256" / hex[:2] / hex[2:4] / hex


def _put(capsys: pytest.CaptureFixture[str], data_dir: Path, *images: Path, session: str = "") -> list[str]:
    held = ["--session", session] if session else []
    capsys.readouterr()
    assert main(["--data-dir", str(data_dir), "put", "--ref-only", *held, *map(str, images)]) == 0
    return capsys.readouterr().out.split()


def _age(data_dir: Path, ref: str, seconds: float) -> None:
    with sqlite3.connect(data_dir / "index.sqlite3") as db:
        db.execute("UPDATE objects SET lease_at = lease_at - ? WHERE ref = ?", (seconds, ref))


def _unpublish(data_dir: Path, ref: str, age: float) -> None:
    """An object file without its row, as a crash between the link and the commit leaves it."""
    with sqlite3.connect(data_dir / "index.sqlite3") as db:
        db.execute("DELETE FROM grants WHERE ref = ?", (ref,))
        db.execute("DELETE FROM objects WHERE ref = ?", (ref,))
    old = time.time() - age
    os.utime(_object(data_dir, ref), (old, old))


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    made = []
    for i in range(5):
        path = tmp_path / f"{i}.png"
        path.write_bytes(png(10 + i, 10, seed=i))
        made.append(path)
    return made


def test_the_gc_plan_counts_what_it_keeps_and_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]
) -> None:
    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "session", "create", "s1"]) == 0
    [held] = _put(capsys, data, images[0], session="s1")
    young, rooted, garbage, stray = _put(capsys, data, *images[1:])
    for ref in (held, rooted, garbage):
        _age(data, ref, 7200)
    roots = tmp_path / "log.jsonl"
    roots.write_text(f'{{"image": "{rooted}"}}\n')
    # One staging file and one unindexed object file, both older than the grace period.
    staging = data / "tmp" / ("0" * 32 + ".tmp")
    staging.write_bytes(b"partial")
    _unpublish(data, stray, age=7200)
    old = time.time() - 7200
    os.utime(staging, (old, old))

    garbage_bytes = _object(data, garbage).stat().st_size
    assert main(["gc", "--data-dir", str(data), "--grace", "1h", "--roots", str(roots), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"would collect {garbage}  {garbage_bytes} bytes  lease "
        + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_lease(data, garbage))),
        f"would remove unindexed {_object(data, stray)}",
        f"would remove staging {staging}",
        "gc plan (grace 1h): 0 expired sessions to release; "
        f"4 objects: 1 held, 1 within the grace period, 1 kept by roots, 1 to collect "
        f"({garbage_bytes} B); 1 staging file and 1 unindexed file to remove",
    ]

    assert main(["gc", "--data-dir", str(data), "--grace", "1h", "--roots", str(roots), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["held"], plan["within_grace"], plan["kept_by_roots"], plan["garbage"]) == (
        1,
        1,
        1,
        [garbage],
    )
    assert [main(["--data-dir", str(data), "stat", ref]) for ref in (held, young, rooted, garbage)] == [
        0,
        0,
        0,
        1,
    ]

    capsys.readouterr()
    assert main(["gc", "--data-dir", str(data), "--grace", "0s"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        "gc plan (grace 0s): 0 expired sessions to release; 3 objects: 1 held, 0 within the grace period, "
        "0 kept"
    )
    assert lines[1].startswith("gc: released 0 expired sessions; collected 2 objects (")
    assert "removed 0 staging files, 0 unindexed files, " in lines[1]


def _lease(data_dir: Path, ref: str) -> float:
    with sqlite3.connect(data_dir / "index.sqlite3") as db:
        [(lease,)] = db.execute("SELECT lease_at FROM objects WHERE ref = ?", (ref,)).fetchall()
    return float(lease)


def terminal(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    """Standard error, as a terminal: where the progress lines go. Called in the test itself: pytest's
    capture puts its own standard error back after each fixture."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


@pytest.fixture
def filled(capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]) -> Path:
    """A store holding the five images."""
    _put(capsys, tmp_path / "data", *images)
    return tmp_path / "data"


def test_gc_shows_progress_while_it_plans(filled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = terminal(monkeypatch)
    assert main(["gc", "--data-dir", str(filled), "--dry-run"]) == 0
    assert "\rgc plan: 1/5 objects, " in stderr.getvalue()
    assert stderr.getvalue().endswith("\r\x1b[K")  # the line is cleared before the plan is printed


def test_an_audit_with_findings_says_what_to_do_next(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]
) -> None:
    data = tmp_path / "data"
    corrupt, missing, _, _, _ = _put(capsys, data, *images)
    left = human_bytes(sum(p.stat().st_size for p in images) - _object(data, missing).stat().st_size)
    flip_byte(_object(data, corrupt), 40)
    _object(data, missing).unlink()
    where = ["--data-dir", str(data)]

    assert main(["audit", *where]) == 1
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"audit: 4 files ({left}) re-hashed, 5 rows checked; 2 findings (1 corrupt, 1 missing)",
        f"next: `attachstore audit --data-dir {data} --repair` quarantines the corrupt object; marks the row "
        "whose file is gone",
        "every finding and what to do about it: docs/operations.md#the-audit",
    ]
    assert main(["audit", *where, "--repair"]) == 1
    assert capsys.readouterr().out.splitlines()[-3:-1] == [
        f"next: `attachstore audit --data-dir {data}` again shows that the repairs took",
        "next: a ref without bytes reads again once the same bytes are admitted again "
        "(`attachstore put FILE`, from a backup, say); gc removes its row once nothing holds it",
    ]
    assert main(["audit", *where]) == 1
    out = capsys.readouterr().out
    assert "--repair" not in out  # nothing left that a repair changes
    assert "next: a ref without bytes reads again" in out


def test_a_stray_file_is_left_to_gc(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]
) -> None:
    data = tmp_path / "data"
    _, stray = _put(capsys, data, *images[:2])
    _unpublish(data, stray, age=120)
    assert main(["audit", "--data-dir", str(data)]) == 1
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "next: the stray file is most often left by a crash: gc removes it once it is older than the grace "
        "period (`--repair` re-indexes it if its bytes verify as an image, else quarantines it)",
        "every finding and what to do about it: docs/operations.md#the-audit",
    ]


def test_audit_json_says_whether_the_store_is_clean(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]
) -> None:
    data = tmp_path / "data"
    [ref] = _put(capsys, data, images[0])
    assert main(["audit", "--data-dir", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True
    assert main(["audit", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out.endswith("1 row checked; clean\n")  # no next step
    flip_byte(_object(data, ref), 40)
    assert main(["audit", "--data-dir", str(data), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["clean"] is False


def test_audit_with_max_rate_says_it_is_throttled(
    capsys: pytest.CaptureFixture[str], filled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = filled
    stderr = terminal(monkeypatch)
    assert main(["audit", "--data-dir", str(data), "--max-rate", "1"]) == 0
    assert "/s (throttled to 1.0 MiB/s), ETA" in stderr.getvalue()
    assert capsys.readouterr().out.startswith("audit (throttled to 1.0 MiB/s): 5 files (")
    assert main(["audit", "--data-dir", str(data), "--max-rate", "1", "--sample", "0.5"]) == 0
    assert capsys.readouterr().out.startswith("audit (sample 0.5, throttled to 1.0 MiB/s): ")


def _expire(data_dir: Path, session: str, seconds: float) -> None:
    """Move the session's last use `seconds` into the past (its expiry with it)."""
    with sqlite3.connect(data_dir / "index.sqlite3") as db:
        db.execute(
            "UPDATE sessions SET used_at = used_at - ?, expires_at = expires_at - ? WHERE id = ?",
            (seconds, seconds, session),
        )


def test_gc_releases_expired_sessions_and_counts_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]
) -> None:
    data = tmp_path / "data"
    for session, ttl in (("gone", "1h"), ("live", "1h"), ("kept", None)):
        lifetime = ["--ttl", ttl] if ttl else []
        assert main(["--data-dir", str(data), "session", "create", session, *lifetime]) == 0
    [gone] = _put(capsys, data, images[0], session="gone")
    [live] = _put(capsys, data, images[1], session="live")
    [kept] = _put(capsys, data, images[2], session="kept")
    for ref in (gone, live, kept):
        _age(data, ref, 4 * 86400)
    _expire(data, "gone", 3 * 86400)  # expired two days and 23 hours ago
    _expire(data, "kept", 3 * 86400)  # no lifetime: never expires

    assert main(["gc", "--data-dir", str(data), "--grace", "1d", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("would release expired session gone (tenant '', expired ")
    assert out[2].startswith("gc plan (grace 1d): 1 expired session to release; 3 objects: 2 held, ")
    assert "2 held, 0 within the grace period, 0 kept by roots, 1 to collect (" in out[2]
    assert main(["gc", "--data-dir", str(data), "--grace", "1d", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["session"] for s in report["plan"]["expired_sessions"]] == ["gone"]
    assert report["plan"]["garbage"] == [gone]
    assert (report["result"]["sessions_released"], report["result"]["collected"]) == (1, [gone])
    assert [main(["--data-dir", str(data), "stat", ref]) for ref in (gone, live, kept)] == [1, 0, 0]


def test_session_release_expired(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, images: list[Path]
) -> None:
    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "session", "create", "old", "--ttl", "30d"]) == 0
    assert main(["--data-dir", str(data), "session", "create", "new", "--ttl", "30d"]) == 0
    [ref] = _put(capsys, data, images[0], session="old")
    _expire(data, "old", 31 * 86400)
    release = ["--data-dir", str(data), "session", "release", "--expired"]
    assert main([*release, "--dry-run"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["dry_run"] is True
    assert [(s["tenant"], s["session"], s["released"]) for s in listed["sessions"]] == [("", "old", None)]
    assert main(release) == 0
    assert [(s["session"], s["released"]) for s in json.loads(capsys.readouterr().out)["sessions"]] == [
        ("old", 1)
    ]
    assert main(release) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == []
    assert main(["--data-dir", str(data), "session", "show", "old"]) == 1
    assert main(["--data-dir", str(data), "session", "show", "new"]) == 0
    assert main(["--data-dir", str(data), "stat", ref]) == 0  # released: gc collects it after the grace
