"""The audit: every kind of finding, each repair, and what it must not report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from attachstore.audit import Audit, Kind
from attachstore.cli import main
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from tests.faults import flip_byte
from tests.images import jpeg, png


async def put(store: Store, *images: bytes) -> list[str]:
    result = await store.admit([Upload.of_bytes(i) for i in images], "user")
    return [a.ref for a in result.attachments]


async def audit(store: Store, repair: bool = False, **options: float) -> list[tuple[Kind, str | None]]:
    report = await Audit(store, repair=repair, settle=0, **options).run()
    return [(f.kind, f.ref) for f in report.findings]


async def test_a_whole_store_is_clean(store: Store) -> None:
    await put(store, png(3, 3), jpeg(5, 4))
    report = await Audit(store, settle=0).run()
    assert (report.files, report.rows, report.findings) == (2, 2, [])


async def test_corrupt_is_found_and_quarantined(store: Store) -> None:
    [ref] = await put(store, png(9, 9))
    flip_byte(store.local.path(Ref.parse(ref)), 50)
    assert await audit(store) == [(Kind.CORRUPT, ref)]
    assert await audit(store, repair=True) == [(Kind.CORRUPT, ref)]
    assert len(os.listdir(store.local.quarantine_dir)) == 1
    # Now a row with no bytes behind it: reported, until the same bytes are admitted again.
    assert await audit(store) == [(Kind.STRAY_ROW, ref)]
    await put(store, png(9, 9))
    assert await audit(store) == []


async def test_missing_is_found_and_marked(store: Store) -> None:
    [ref] = await put(store, png(8, 8))
    store.local.path(Ref.parse(ref)).unlink()
    assert await audit(store, repair=True) == [(Kind.MISSING, ref)]
    row = await store.index.get(ref)
    assert row is not None
    assert row.state == "missing"


async def test_a_stray_file_that_verifies_is_reindexed(store: Store) -> None:
    image = jpeg(12, 7)
    ref = Ref.of("sha256", image)
    path = store.local.path(ref)
    path.parent.mkdir(parents=True)
    path.write_bytes(image)
    assert await audit(store, repair=True) == [(Kind.STRAY_FILE, str(ref))]
    meta = await store.meta(str(ref))
    assert (meta.media_type, meta.width, meta.height, meta.bytes) == ("image/jpeg", 12, 7, len(image))
    assert await audit(store) == []


async def test_stray_files_that_do_not_verify_or_are_misplaced_are_quarantined(store: Store) -> None:
    wrong = store.local.path(Ref.of("sha256", b"something else"))
    wrong.parent.mkdir(parents=True)
    wrong.write_bytes(b"not those bytes")
    misplaced = store.local.objects / "sha256" / "notes.txt"
    misplaced.write_text("hello")
    findings = await audit(store, repair=True)
    assert sorted(k for k, _ in findings) == [Kind.STRAY_FILE, Kind.STRAY_FILE]
    assert not wrong.exists()
    assert not misplaced.exists()
    assert len(os.listdir(store.local.quarantine_dir)) == 2
    assert await audit(store) == []


async def test_a_young_stray_may_be_an_admission_in_flight(store: Store) -> None:
    image = png(6, 5)
    path = store.local.path(Ref.of("sha256", image))
    path.parent.mkdir(parents=True)
    path.write_bytes(image)
    assert (await Audit(store).run()).findings == []  # default settle: a minute


async def test_metadata_mismatch_is_found_and_rewritten(store: Store) -> None:
    [ref] = await put(store, png(10, 6))
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET width = 99 WHERE ref = ?", (ref,))
    assert await audit(store, repair=True) == [(Kind.METADATA_MISMATCH, ref)]
    assert (await store.meta(ref)).width == 10
    assert await audit(store) == []


async def test_a_row_marked_missing_whose_file_is_back(store: Store) -> None:
    [ref] = await put(store, png(4, 7))
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET state = 'missing' WHERE ref = ?", (ref,))
    assert await audit(store, repair=True) == [(Kind.METADATA_MISMATCH, ref)]
    assert await audit(store) == []


async def test_it_keeps_going_after_each_finding(store: Store) -> None:
    refs = await put(store, png(3, 3), png(4, 4), png(5, 5), png(6, 6))
    flip_byte(store.local.path(Ref.parse(refs[0])), 40)
    store.local.path(Ref.parse(refs[2])).unlink()
    assert sorted(await audit(store)) == sorted([(Kind.CORRUPT, refs[0]), (Kind.MISSING, refs[2])])


async def test_sample_checks_a_share(store: Store) -> None:
    for start in range(0, 40, 10):
        await put(store, *(png(3, 3, seed=i) for i in range(start, start + 10)))
    report = await Audit(store, sample=0.25, settle=0).run()
    assert 0 < report.files < 40
    assert report.rows == report.files  # a file and its row are sampled together


def test_audit_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    assert main(["audit", *data]) == 2  # no store there
    image = tmp_path / "a.png"
    image.write_bytes(png(16, 16))
    assert main(["put", *data, str(image)]) == 0
    ref = capsys.readouterr().out.split()[0]
    assert main(["audit", *data]) == 0
    assert "clean" in capsys.readouterr().out
    path = tmp_path / "data" / "objects" / "sha256" / ref[7:9] / ref[9:11] / ref[7:]
    flip_byte(path, 60)
    assert main(["audit", *data, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["ref"], f["repair"]) for f in report["findings"]] == [("corrupt", ref, None)]
    assert main(["audit", *data, "--repair"]) == 1
    assert "[quarantined]" in capsys.readouterr().out
    assert main(["audit", *data, "--sample", "0"]) == 2


async def test_max_rate_paces_the_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await put(store, png(20, 20), png(21, 21))
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr("attachstore.audit.asyncio.sleep", sleep)
    await Audit(store, max_rate=100.0, settle=0).run()  # 100 bytes/s: the reads are far ahead of the pace
    assert pauses
    assert sum(pauses) > 1
