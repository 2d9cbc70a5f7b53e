"""The audit: every kind of finding, each repair, and what it must not report."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor as ProcessPool
from pathlib import Path
from typing import Any

import pytest

from attachstore.cli import main
from attachstore.errors import StorageUnavailable
from attachstore.index import ObjectRow, SqliteIndex
from attachstore.maintenance import Audit, Kind, filepass
from attachstore.maintenance import audit as audit_module
from attachstore.progress import Progress
from attachstore.refs import Checker, Ref
from attachstore.service import Store, Upload
from attachstore.storage import Listing
from tests.conftest import MakeConfig
from tests.support.faults import RecordingOps, flip_byte
from tests.support.images import jpeg, png
from tests.support.waiting import until


async def put(store: Store, *images: bytes) -> list[str]:
    result = await store.admit([Upload.of_bytes(i) for i in images], "user")
    return [a.ref for a in result.attachments]


async def audit(store: Store, repair: bool = False, **options: float) -> list[tuple[Kind, str | None]]:
    report = await Audit(store, repair=repair, settle=0, **options).run()
    return [(f.kind, f.ref) for f in report.findings]


@pytest.fixture(params=["thread", "processes"])
def passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The file pass on its one thread, and as on a large store: two spawned processes, each reading the
    rows of its files from the index itself."""
    if request.param == "processes":
        monkeypatch.setattr(filepass, "processes", lambda rows: 2)
    return str(request.param)


@pytest.mark.usefixtures("passes")
async def test_a_whole_store_is_clean(store: Store) -> None:
    await put(store, png(3, 3), jpeg(5, 4))
    report = await Audit(store, settle=0).run()
    assert (report.files, report.rows, report.findings) == (2, 2, [])


@pytest.mark.usefixtures("passes")
async def test_clean_files_are_never_looked_at_twice(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file pass itself clears them (on its thread, or in the processes): none is a suspect."""
    await put(store, *(png(6, 5, seed=i) for i in range(6)), jpeg(9, 9))
    looked: list[str] = []
    look_again = filepass.look_again
    monkeypatch.setattr(filepass, "look_again", lambda p, r, s: looked.append(p) or look_again(p, r, s))
    report = await Audit(store, settle=0).run()
    assert (report.files, report.rows, report.findings, looked) == (7, 7, [], [])


@pytest.mark.usefixtures("passes")
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


@pytest.mark.usefixtures("passes")
async def test_missing_is_found_and_marked(store: Store) -> None:
    [ref] = await put(store, png(8, 8))
    store.local.path(Ref.parse(ref)).unlink()
    assert await audit(store, repair=True) == [(Kind.MISSING, ref)]
    row = await store.index.get(ref)
    assert row is not None
    assert row.state == "missing"


@pytest.mark.usefixtures("passes")
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


async def test_a_reindexed_stray_is_made_durable_before_its_row_is_committed(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stray's name may never have been fsynced (its writer was killed between its link and its directory
    # fsyncs): published as it was, a power cut could leave the row without its file (test_power_loss.py).
    ops = RecordingOps()
    store = await Store.open(make_config(), ops)
    try:
        image = jpeg(12, 7)
        path = store.local.path(Ref.of("sha256", image))
        path.parent.mkdir(parents=True)
        path.write_bytes(image)
        real = SqliteIndex.publish

        async def publish(self: SqliteIndex, *args: Any) -> None:
            await real(self, *args)
            ops.log.append("commit")

        monkeypatch.setattr(SqliteIndex, "publish", publish)
        ops.log.clear()
        assert [f.repair for f in (await Audit(store, repair=True, settle=0).run()).findings] == [
            "re-indexed"
        ]
        assert ops.log == ["fsync_dir"] * 4 + ["commit"]  # the bucket and each level up to objects/
    finally:
        await store.close()


@pytest.mark.usefixtures("passes")
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


@pytest.mark.usefixtures("passes")
async def test_metadata_mismatch_is_found_and_rewritten(store: Store) -> None:
    [ref] = await put(store, png(10, 6))
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET width = 99 WHERE ref = ?", (ref,))
    assert await audit(store, repair=True) == [(Kind.METADATA_MISMATCH, ref)]
    assert (await store.meta(ref)).width == 10
    assert await audit(store) == []


@pytest.mark.usefixtures("passes")
async def test_a_row_marked_missing_whose_file_is_back(store: Store) -> None:
    [ref] = await put(store, png(4, 7))
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET state = 'missing' WHERE ref = ?", (ref,))
    assert await audit(store, repair=True) == [(Kind.METADATA_MISMATCH, ref)]
    assert await audit(store) == []


@pytest.mark.usefixtures("passes")
async def test_it_keeps_going_after_each_finding(store: Store) -> None:
    refs = await put(store, png(3, 3), png(4, 4), png(5, 5), png(6, 6))
    flip_byte(store.local.path(Ref.parse(refs[0])), 40)
    store.local.path(Ref.parse(refs[2])).unlink()
    assert sorted(await audit(store)) == sorted([(Kind.CORRUPT, refs[0]), (Kind.MISSING, refs[2])])


@pytest.mark.usefixtures("passes")
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

    monkeypatch.setattr("attachstore.maintenance.audit.asyncio.sleep", sleep)
    await Audit(store, max_rate=100.0, settle=0).run()  # 100 bytes/s: the reads are far ahead of the pace
    assert pauses
    assert sum(pauses) > 1


# -- the fast pass and its closer looks --------------------------------------------------------------------


async def test_a_failing_audit_process_is_storage_unavailable(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Not a traceback and exit status 1 (which says "findings"): the command's exit status 2."""
    await put(store, png(5, 5))
    monkeypatch.setattr(filepass, "processes", lambda rows: 2)
    monkeypatch.setattr(store.index, "path", tmp_path / "nowhere" / "index.sqlite3")  # what the workers open
    with pytest.raises(StorageUnavailable, match="an audit process failed"):
        await Audit(store, settle=0).run()


async def test_max_rate_keeps_the_pass_on_one_thread(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await put(store, png(5, 5))
    monkeypatch.setattr(filepass, "processes", lambda rows: 2)
    pools: list[object] = []
    monkeypatch.setattr(
        audit_module, "ProcessPoolExecutor", lambda *a, **k: pools.append(a) or ProcessPool(*a, **k)
    )
    await Audit(store, settle=0, max_rate=1e9).run()
    assert pools == []
    await Audit(store, settle=0).run()
    assert len(pools) == 1


def test_an_audit_process_ends_when_the_audit_is_killed() -> None:
    """A worker left behind would hold the index and the command's standard output open."""
    program = (
        "import multiprocessing, os, sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from attachstore.maintenance import filepass\n"
        "pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('spawn'),"
        " initializer=filepass.worker_start)\n"
        "print(pool.submit(os.getpid).result(), flush=True)\n"
        "time.sleep(60)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as audit_process:
        try:
            assert audit_process.stdout is not None
            worker = int(audit_process.stdout.readline())
            os.kill(worker, 0)  # alive
        finally:
            audit_process.kill()

    def gone() -> bool:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(worker, os.WNOHANG)  # not ours: never a zombie here, but harmless
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        return False

    until(gone, f"the audit's worker {worker} to end with the audit")


@pytest.mark.usefixtures("passes")
async def test_a_row_whose_size_is_wrong_either_way_is_a_mismatch(store: Store) -> None:
    # Each file is read for one byte more than its row says: both errors show, and the bytes still verify.
    shorter, longer = await put(store, png(5, 5), png(6, 6))
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET bytes = bytes - 1 WHERE ref = ?", (shorter,))
        await db.execute("UPDATE objects SET bytes = bytes + 1 WHERE ref = ?", (longer,))
    report = await Audit(store, settle=0).run()
    assert sorted((f.kind, f.ref) for f in report.findings) == sorted(
        [(Kind.METADATA_MISMATCH, shorter), (Kind.METADATA_MISMATCH, longer)]
    )
    assert all(f.detail.startswith("size ") for f in report.findings)


@pytest.mark.usefixtures("passes")
async def test_a_file_with_bytes_appended_is_corrupt(store: Store) -> None:
    [ref] = await put(store, png(7, 7))
    path = store.local.path(Ref.parse(ref))
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes() + b"\0")
    assert await audit(store) == [(Kind.CORRUPT, ref)]


async def test_objects_too_large_for_one_read_are_read_whole(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = await put(store, png(30, 30, seed=1), png(31, 31, seed=2))
    monkeypatch.setattr("attachstore.maintenance.filepass.READ_AT_ONCE", 64)
    report = await Audit(store, settle=0).run()
    assert (report.files, report.findings) == (2, [])
    assert report.bytes == sum(store.local.path(Ref.parse(r)).stat().st_size for r in refs)
    flip_byte(store.local.path(Ref.parse(refs[1])), -10)
    assert await audit(store) == [(Kind.CORRUPT, refs[1])]


@pytest.mark.usefixtures("passes")
async def test_findings_are_the_same_whatever_the_size_of_a_trip(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = await put(store, *(png(3, 3, seed=i) for i in range(7)))
    flip_byte(store.local.path(Ref.parse(refs[2])), 40)
    store.local.path(Ref.parse(refs[5])).unlink()
    (store.local.objects / "sha256" / "notes.txt").write_text("hello")
    expected = sorted([(Kind.CORRUPT, refs[2]), (Kind.MISSING, refs[5]), (Kind.STRAY_FILE, None)], key=str)
    for per_trip in (1, 2, 3, 1024):
        monkeypatch.setattr("attachstore.maintenance.filepass.TRIP_FILES", per_trip)
        report = await Audit(store, settle=0).run()
        assert sorted(((f.kind, f.ref) for f in report.findings), key=str) == expected
        assert (report.files, report.rows) == (7, 7)


@pytest.mark.usefixtures("passes")
async def test_links_and_fifos_are_never_objects(store: Store, tmp_path: Path) -> None:
    [ref] = await put(store, png(7, 7))
    link = store.local.path(Ref.of("sha256", png(8, 8)))
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(store.local.path(Ref.parse(ref)))  # named like an object, pointing at one
    fifo = store.local.path(Ref.of("sha256", b"a fifo"))
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)  # opened, it would block a reader that waits for a writer
    elsewhere = store.local.objects / "sha256" / "elsewhere"
    elsewhere.symlink_to(tmp_path, target_is_directory=True)  # not followed, not skipped
    assert await audit(store, repair=True) == [(Kind.STRAY_FILE, None)] * 3
    assert not any(p.is_symlink() or p.exists() for p in (link, fifo, elsewhere))
    assert await audit(store) == []


async def test_a_file_swept_between_the_listing_and_its_read_is_no_finding_of_its_own(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    [ref] = await put(store, png(9, 9))
    examine = filepass.examine

    def sweep_first(
        parts: list[tuple[Listing, list[str]]], rows: dict[str, ObjectRow], checker: Checker
    ) -> object:
        store.local.path(Ref.parse(ref)).unlink()  # what a GC sweep does first
        return examine(parts, rows, checker)

    monkeypatch.setattr("attachstore.maintenance.filepass.examine", sweep_first)
    report = await Audit(store, settle=0).run()
    # Not "cannot be read": the row pass confirms it under the lock (a sweep would have taken the row too).
    assert [(f.kind, f.ref) for f in report.findings] == [(Kind.MISSING, ref)]
    assert report.files == 0


async def test_a_suspect_healed_before_its_closer_look_is_not_reported(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    [ref] = await put(store, png(10, 10))
    path = store.local.path(Ref.parse(ref))
    good = path.read_bytes()
    flip_byte(path, 40)
    look_again = filepass.look_again

    def heal_first(where: str, named: Ref | None, size: int | None) -> object:
        os.chmod(path, 0o644)
        path.write_bytes(good)  # as an admission of the same bytes heals it
        os.chmod(path, 0o444)
        return look_again(where, named, size)

    monkeypatch.setattr("attachstore.maintenance.filepass.look_again", heal_first)
    assert await audit(store) == []


@pytest.mark.usefixtures("passes")
async def test_progress_counts_every_file_and_byte(store: Store) -> None:
    await put(store, *(png(4, 4, seed=i) for i in range(5)))
    bars: list[Progress] = []

    def progress(objects: int, size: int) -> Progress:
        bars.append(Progress("audit", objects, size, io.StringIO()))
        return bars[-1]

    report = await Audit(store, settle=0, progress=progress).run()
    [bar] = bars
    assert (bar.objects, bar.bytes) == (report.files, report.bytes) == (5, report.bytes)
    assert (bar.total_objects, bar.total_bytes) == (report.files, report.bytes)  # from the index's sizes


async def test_the_cycle_collector_is_back_on_after_a_run(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await put(store, png(3, 3))
    await Audit(store, settle=0).run()
    assert gc.isenabled()

    async def broken() -> list[ObjectRow]:
        raise StorageUnavailable("index error while reading")

    monkeypatch.setattr(store.index, "rows", broken)
    with pytest.raises(StorageUnavailable):
        await Audit(store, settle=0).run()
    assert gc.isenabled()


async def test_the_listing_walks_as_walk_objects_and_os_walk_do(store: Store) -> None:
    refs = await put(store, *(png(3, 3, seed=i) for i in range(6)))
    objects = store.local.objects
    (objects / "sha256" / "notes.txt").write_text("not an object")
    deep = objects / "sha256" / "ab" / "cd" / "ef"
    deep.mkdir(parents=True)
    (deep / "x").write_text("too deep")
    image = png(5, 5)
    ref = Ref.of("sha256", image)
    odd = objects / "sha256" / ref.digest[0:1] / ref.digest[1:4]  # the name's start, cut elsewhere
    odd.mkdir(parents=True)
    (odd / ref.digest).write_bytes(image)

    listed = [
        (listing.path(n), listing.ref(n)) for listing in store.local.list_objects() for n in listing.names
    ]
    walked = [(str(f.path), f.ref) for f in store.local.walk_objects()]
    expected = []
    for directory, subdirectories, names in os.walk(objects):
        subdirectories.sort()
        expected += [os.path.join(directory, n) for n in sorted(names)]
    assert [p for p, _ in listed] == [p for p, _ in walked] == expected
    assert [r for _, r in listed] == [r for _, r in walked]
    assert sorted(str(r) for _, r in listed if r) == sorted(refs)
