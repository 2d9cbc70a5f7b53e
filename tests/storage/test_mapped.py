"""Mappings under a read lease (attachstore/storage/mapped.py): made only of a file in the page cache that
nobody writes, their bytes unchanged while the lease is intact, a writer kept waiting only until they are
let go, and every descriptor given back."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from attachstore.storage import mapped
from attachstore.storage.mapped import Mapped, Mappings, map_resident
from tests.support.waiting import HANG, until

OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


@pytest.fixture(autouse=True)
def kernel() -> None:
    if not mapped.available():
        pytest.skip("this kernel grants no read leases or has no cachestat (Linux 6.5)")


@pytest.fixture
def object_file(tmp_path: Path) -> Path:
    path = tmp_path / "object"
    path.write_bytes(os.urandom(300_000))
    path.chmod(0o444)
    return path


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_leak() -> Iterator[None]:
    before = descriptors()
    yield
    assert descriptors() == before


def writer_would_wait(path: Path) -> bool:
    """Whether a writer opening `path` now would wait for a lease: the kernel's own answer to an open with
    O_NONBLOCK (which breaks an intact lease too: ask only once a writer has)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except BlockingIOError:
        return True
    os.close(fd)
    return False


def mapping(path: Path) -> Mapped:
    fd = os.open(path, OPEN)
    found = map_resident(fd, path.stat().st_size)
    if found is None:
        os.close(fd)
    assert found is not None
    return found


def test_a_file_in_the_page_cache_is_mapped_under_a_lease(object_file: Path, no_leak: None) -> None:
    view = mapping(object_file)
    assert view[:] == object_file.read_bytes()
    assert view.intact()
    view.release()
    assert not view.intact()
    view.release()  # twice is nothing


def test_no_lease_while_someone_has_the_file_open_for_writing(object_file: Path, no_leak: None) -> None:
    object_file.chmod(0o644)
    writer = os.open(object_file, os.O_WRONLY)
    try:
        fd = os.open(object_file, OPEN)
        assert map_resident(fd, object_file.stat().st_size) is None
        os.fstat(fd)  # still the caller's
        os.close(fd)
    finally:
        os.close(writer)


def test_a_file_not_in_the_page_cache_is_not_mapped(object_file: Path, no_leak: None) -> None:
    fd = os.open(object_file, OPEN)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if mapped._cached_pages(fd, 0):
            pytest.skip("this file system keeps the pages (tmpfs)")
        assert map_resident(fd, object_file.stat().st_size) is None
        os.fstat(fd)  # still the caller's
    finally:
        os.close(fd)


def test_a_writer_waits_for_the_mapping_to_be_let_go_and_nobody_is_signalled(object_file: Path) -> None:
    original = object_file.read_bytes()
    object_file.chmod(0o644)
    view = mapping(object_file)
    opened = threading.Event()

    def write() -> None:
        with open(object_file, "r+b") as f:  # breaks the lease, and waits for it
            opened.set()
            f.write(b"\0" * 100)

    writer = threading.Thread(target=write)
    writer.start()
    until(lambda: not view.intact(), "the writer to break the lease", every=0.01)
    # The writer has asked and is waiting: the lease says so, the bytes have not changed.
    assert not opened.wait(0.2)
    assert view[:] == original
    assert writer_would_wait(object_file)
    view.release()
    # Let go at once, not when the kernel's lease-break time (45 s) runs out: a writer waits for nothing.
    assert not writer_would_wait(object_file)
    assert opened.wait(HANG), f"the writer did not get the file within {HANG:g} s of the release"
    writer.join()
    assert object_file.read_bytes()[:100] == b"\0" * 100


def test_a_mapping_dropped_without_release_gives_its_descriptors_back(
    object_file: Path, no_leak: None
) -> None:
    view = mapping(object_file)
    assert descriptors() >= 2
    del view


def test_no_mapping_where_a_writer_would_not_wait(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "leases-enable").write_text("1\n")
    (proc / "lease-break-time").write_text("0\n")
    monkeypatch.setattr(mapped, "_PROC", proc)
    assert not mapped.available()
    (proc / "lease-break-time").write_text("45\n")
    assert mapped.available()
    (proc / "leases-enable").write_text("0\n")
    assert not mapped.available()


def kept_mapping(path: Path, mappings: Mappings) -> Mapped:
    fd = os.open(path, OPEN)
    st = os.fstat(fd)
    view = mappings.map(str(path), fd, st.st_size, (st.st_dev, st.st_ino, st.st_ctime_ns))
    assert view is not None
    view.served()
    return view


def test_a_served_mapping_is_kept_for_the_next_read_of_the_same_file(
    object_file: Path, no_leak: None
) -> None:
    mappings = Mappings(entries=1, idle=60)
    view = kept_mapping(object_file, mappings)
    size = object_file.stat().st_size
    again = mappings.again(str(object_file), size, None)
    assert again is not None
    assert again[0] is view
    assert mappings.again(str(object_file), size + 1, None) is None  # not the object's size: let go
    assert not view.intact()
    assert len(mappings) == 0


def test_a_kept_mapping_of_a_file_no_longer_at_its_path_is_let_go(object_file: Path, no_leak: None) -> None:
    mappings = Mappings(entries=1, idle=60)
    view = kept_mapping(object_file, mappings)
    copy = object_file.with_name("copy")
    copy.write_bytes(object_file.read_bytes())
    os.replace(copy, object_file)  # the same bytes in another file
    assert mappings.again(str(object_file), object_file.stat().st_size, None) is None
    assert not view.intact()
    object_file.unlink()
    assert mappings.again(str(object_file), 300_000, None) is None


def test_a_full_table_keeps_nothing_more_and_idle_mappings_go(tmp_path: Path, no_leak: None) -> None:
    paths = []
    for name in "ab":
        paths.append(tmp_path / name)
        paths[-1].write_bytes(os.urandom(10_000))
    mappings = Mappings(entries=1, idle=60)
    first, second = (kept_mapping(p, mappings) for p in paths)
    assert first.intact()
    assert not second.intact()  # let go when served: no room
    mappings.idle = -1
    assert mappings.again(str(paths[0]), 10_000, None) is not None  # used again: idle from now on
    mappings.sweep()
    assert not first.intact()
    assert len(mappings) == 0
    third = kept_mapping(paths[1], Mappings(entries=1, idle=60))
    assert third.intact()
    third._keeper.close()  # type: ignore[union-attr]
    assert not third.intact()


async def test_a_writer_of_a_kept_mapping_waits_only_until_the_signal_is_handled(object_file: Path) -> None:
    os.chmod(object_file, 0o644)
    mappings = Mappings(entries=1, idle=3600)
    view = kept_mapping(object_file, mappings)
    loop = asyncio.get_running_loop()
    assert mapped.watch(mappings, loop)
    try:
        writer = asyncio.to_thread(lambda: os.close(os.open(object_file, os.O_WRONLY)))
        # Without the handler, the writer would wait for the lease-break time (45 s by default).
        await asyncio.wait_for(writer, 30)
    finally:
        loop.remove_signal_handler(mapped.BREAK_SIGNAL)
    assert not view.intact()
    assert len(mappings) == 0


def test_no_watch_where_the_loop_cannot_handle_signals() -> None:
    """Only the main thread's loop can: elsewhere the lane's timer alone lets go of broken mappings."""
    found: list[bool] = []
    thread = threading.Thread(target=lambda: found.append(asyncio.run(_watched())))
    thread.start()
    thread.join()
    assert found == [False]


async def _watched() -> bool:
    return mapped.watch(Mappings(entries=1, idle=1), asyncio.get_running_loop())


def test_a_probe_a_seccomp_filter_would_kill_says_no(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under a filter that kills on a refused call (systemd's SystemCallFilter= without
    SystemCallErrorNumber=), the probe runs in a child: its death by SIGSYS turns mapped reads off, said once,
    and the caller goes on (issue 33)."""
    monkeypatch.setattr(mapped, "_filtered", lambda: True)
    monkeypatch.setattr(mapped, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSYS)")
    assert not mapped.available()
    assert "seccomp filter refuses the cachestat" in caplog.text


def test_under_a_filter_that_allows_it_the_probe_in_a_child_says_yes(monkeypatch: pytest.MonkeyPatch) -> None:
    if not mapped.available():
        pytest.skip("no leases or no cachestat here")
    monkeypatch.setattr(mapped, "_filtered", lambda: True)
    assert mapped.available()


def test_this_process_is_not_taken_for_filtered() -> None:
    status = Path("/proc/self/status").read_text()
    assert mapped._filtered() == ("Seccomp:\t2" in status)
