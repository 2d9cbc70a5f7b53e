import errno
import os
import stat
from pathlib import Path

import pytest

from attachstore.errors import Corrupt, Missing, StorageFull, StorageUnavailable
from attachstore.refs import Ref
from attachstore.storage import LocalBlobStore, Put
from attachstore.storage.backend import LocalBackend
from tests.support.faults import Filling, RecordingOps, flip_byte

DATA = b"some object bytes " * 100


@pytest.fixture
def ops() -> RecordingOps:
    return RecordingOps()


@pytest.fixture
def store(tmp_path: Path, ops: RecordingOps) -> LocalBlobStore:
    s = LocalBlobStore(tmp_path / "data", ops)
    s.create_layout()
    ops.log.clear()
    return s


def leftovers(store: LocalBlobStore) -> list[str]:
    return sorted(os.listdir(store.staging))


def test_path_mapping_is_a_pure_function_of_the_ref(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    d = ref.digest
    assert store.path(ref) == store.root / "objects" / "sha256" / d[:2] / d[2:4] / d
    assert store.path(Ref.of("blake3", DATA)).parts[-4] == "blake3"


def test_put_writes_a_read_only_object_in_the_spec_order(store: LocalBlobStore, ops: RecordingOps) -> None:
    ref = Ref.of("sha256", DATA)
    assert store.put_sync(ref, DATA) is Put.CREATED
    path = store.path(ref)
    assert path.read_bytes() == DATA
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    # staging: create, write, fsync, read-only, close; then the three new directories, the link, and the
    # fsync of every directory from the bucket up to objects/; then the staging name goes.
    assert ops.log == [
        "open",
        "write",
        "fsync",
        "fchmod",
        "close",
        "mkdir",
        "mkdir",
        "mkdir",
        "link",
        "fsync_dir",
        "fsync_dir",
        "fsync_dir",
        "fsync_dir",
        "unlink",
    ]
    assert leftovers(store) == []


def test_second_put_of_the_same_bytes_verifies_and_writes_nothing(
    store: LocalBlobStore, ops: RecordingOps
) -> None:
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    ops.log.clear()
    assert store.put_sync(ref, DATA) is Put.EXISTED
    # Verified by reading, not rewritten; the name is made durable in case its writer had not yet.
    assert ops.log == ["fsync_dir"] * 4


def test_put_heals_a_damaged_object_and_keeps_the_damaged_copy(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    flip_byte(store.path(ref))
    assert store.put_sync(ref, DATA) is Put.HEALED
    assert store.path(ref).read_bytes() == DATA
    kept = os.listdir(store.quarantine_dir)
    assert len(kept) == 1
    assert kept[0].startswith(f"sha256-{ref.digest}.")
    assert (store.quarantine_dir / kept[0]).read_bytes() != DATA


def test_put_rewrites_a_missing_object(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    store.path(ref).unlink()
    assert store.put_sync(ref, DATA) is Put.CREATED
    assert store.read_sync(ref, len(DATA)) == DATA


@pytest.mark.parametrize("step", ["open", "write", "fsync", "fchmod", "mkdir", "link"])
def test_a_failure_before_publication_leaves_nothing(
    store: LocalBlobStore, ops: RecordingOps, step: str
) -> None:
    ops.fail_at = step
    ref = Ref.of("sha256", DATA)
    with pytest.raises(StorageUnavailable):
        store.put_sync(ref, DATA)
    assert not store.path(ref).exists()
    assert leftovers(store) == []


def test_failure_after_the_link_is_reported_and_cleans_staging(
    store: LocalBlobStore, ops: RecordingOps
) -> None:
    # The object name exists but is not yet known durable; the service removes it under the index lock.
    ops.fail_at = "fsync_dir"
    with pytest.raises(StorageUnavailable):
        store.put_sync(Ref.of("sha256", DATA), DATA)
    assert leftovers(store) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_storage_full(store: LocalBlobStore, ops: RecordingOps, code: int) -> None:
    ops.fail_at, ops.fail_errno = "write", code
    with pytest.raises(StorageFull) as e:
        store.put_sync(Ref.of("sha256", DATA), DATA)
    assert (e.value.code, e.value.status) == ("STORAGE_FULL", 507)


def test_read_verifies_the_whole_object(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    assert store.read_sync(ref, len(DATA)) == DATA
    with pytest.raises(Corrupt):
        store.read_sync(ref, len(DATA) + 1)
    flip_byte(store.path(ref), 0)
    with pytest.raises(Corrupt):
        store.read_sync(ref, len(DATA))
    store.path(ref).unlink()
    with pytest.raises(Missing):
        store.read_sync(ref, len(DATA))


def test_quarantine_moves_damaged_bytes_away(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    flip_byte(store.path(ref))
    assert store.quarantine_sync(ref) == "quarantined"
    assert not store.path(ref).exists()
    assert store.quarantine_sync(ref) == "missing"
    assert len(os.listdir(store.quarantine_dir)) == 1


def test_a_fifo_at_an_objects_path_is_never_waited_on_and_is_replaced(store: LocalBlobStore) -> None:
    """A FIFO at an object's path would hold a plain open() until a writer came (forever)."""
    ref = Ref.of("sha256", DATA)
    path = store.path(ref)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(Corrupt, match="not a regular file"):
        store.read_sync(ref, len(DATA))
    assert store.quarantine_sync(ref) == "quarantined"
    assert not os.path.lexists(path)
    os.mkfifo(path)
    assert store.put_sync(ref, DATA) is Put.HEALED
    assert store.read_sync(ref, len(DATA)) == DATA


def test_a_directory_at_an_objects_path_is_corrupt_and_moved_away(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    store.path(ref).mkdir(parents=True)
    with pytest.raises(Corrupt, match="not a regular file"):
        store.read_sync(ref, len(DATA))
    assert store.quarantine_sync(ref) == "quarantined"
    assert not os.path.lexists(store.path(ref))


def test_quarantine_leaves_an_intact_object_in_place(store: LocalBlobStore) -> None:
    # A concurrent heal may have replaced the bytes between the failed read and the quarantine.
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    assert store.quarantine_sync(ref) == "intact"
    assert store.read_sync(ref, len(DATA)) == DATA
    assert os.listdir(store.quarantine_dir) == []


def test_discard_removes_the_file(store: LocalBlobStore) -> None:
    ref = Ref.of("sha256", DATA)
    store.put_sync(ref, DATA)
    store.discard_sync(ref)
    store.discard_sync(ref)  # idempotent
    assert store.stat(ref) is None


class Sweeper(RecordingOps):
    """Removes what a GC could remove just before the first link: the empty bucket, or the staging file."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def link(self, src: Path, dst: Path) -> None:
        if self.what and "link" not in self.log:
            if self.what == "bucket":
                os.rmdir(dst.parent)
            else:
                os.unlink(src)
        super().link(src, dst)


@pytest.mark.parametrize("what", ["bucket", "staging"])
def test_a_writer_survives_a_sweep_between_its_steps(tmp_path: Path, what: str) -> None:
    store = LocalBlobStore(tmp_path / "data", Sweeper(what))
    store.create_layout()
    ref = Ref.of("sha256", DATA)
    assert store.put_sync(ref, DATA) is Put.CREATED
    assert store.read_sync(ref, len(DATA)) == DATA
    assert leftovers(store) == []


async def test_setting_a_stray_aside_fails_as_storage_unavailable_and_moves_nothing(
    store: LocalBlobStore, ops: RecordingOps
) -> None:
    """The backend contract: an I/O failure is a StorageUnavailable, never a raw OSError."""
    backend = LocalBackend(store)
    stray = store.objects / "notes.txt"
    stray.write_text("not an object")
    ops.fail_at = "rename"
    with pytest.raises(StorageUnavailable, match="setting a stray file aside"):
        await backend.set_aside(str(stray))
    assert stray.exists()
    assert (await backend.set_aside(str(stray))).startswith("moved to ")
    assert not stray.exists()


def test_the_readiness_probe_writes_and_fsyncs_a_block(store: LocalBlobStore, ops: RecordingOps) -> None:
    """Creating an empty file succeeds on a full disk: the probe writes for real."""
    store.probe_writable(1 << 20, 16)
    assert ops.log == ["open", "write", "fsync", "fchmod", "close", "unlink"]
    assert leftovers(store) == []


@pytest.mark.parametrize("step", ["write", "fsync"])
async def test_a_file_system_that_refuses_the_block_is_not_ready(
    store: LocalBlobStore, ops: RecordingOps, step: str
) -> None:
    ops.fail_at, ops.fail_errno = step, errno.ENOSPC  # delayed allocation: often only the fsync says so
    with pytest.raises(StorageUnavailable, match="not writable"):
        await LocalBackend(store).probe_writable()
    assert leftovers(store) == []


@pytest.mark.parametrize(
    ("free", "inodes", "why"),
    [
        (1 << 20, 1 << 20, r"1\.0 MiB free, less than one admission may need \(32\.0 MiB\)"),
        (1 << 30, 63, "63 inodes"),
    ],
)
async def test_a_file_system_without_room_for_one_admission_is_not_ready(
    tmp_path: Path, free: int, inodes: int, why: str
) -> None:
    store = LocalBlobStore(tmp_path / "data", Filling(free, inodes))
    store.create_layout()
    with pytest.raises(StorageUnavailable, match=why):
        await LocalBackend(store).probe_writable(32 << 20, 16)
    await LocalBackend(store).probe_writable(free, inodes // 4)  # just enough
