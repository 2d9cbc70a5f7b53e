"""Replacing a transcript without ever losing it: the new version goes to a temporary file beside the target,
is fsynced and checked, and only then renamed over it (then the directory is fsynced). Until the rename the
target is untouched; after it, the target is the complete, checked new version."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ..errors import AttachstoreError
from .reports import TranscriptError
from .writers import refuse_writers, writers, writers_of_fd

Steps = Callable[[str], None]
TEMP_SUFFIX = ".tmp"
_BUFFER = 1 << 20


class Appended(Protocol):
    message: str | None
    bytes_after: int
    appended: int


def _appended_while(report: Appended, appended: int) -> None:
    if appended:
        report.appended = appended
        report.bytes_after += appended
        report.message = (
            f"a host appended {appended:,} bytes while it was replaced: they are kept at its end as they "
            "came (the next run strips their images)"
        )


def temp_name(target: Path) -> Path:
    # No host reads a hidden name as a transcript (none ends in .json or .jsonl).
    return target.with_name(f".{target.name}.attachstore-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def is_temp(path: Path) -> bool:
    return path.name.startswith(".") and ".attachstore-" in path.name and path.name.endswith(TEMP_SUFFIX)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a file was when it was read: the same inode, size and mtime later mean nobody wrote to it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    atime_ns: int
    mode: int
    uid: int
    gid: int
    links: int

    @classmethod
    def of(cls, st: os.stat_result) -> Snapshot:
        return cls(
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_atime_ns,
            stat.S_IMODE(st.st_mode),
            st.st_uid,
            st.st_gid,
            st.st_nlink,
        )

    def unchanged(self, path: Path) -> bool:
        try:
            now = Snapshot.of(os.stat(path))
        except FileNotFoundError:
            return False
        return (now.dev, now.ino, now.size, now.mtime_ns) == (self.dev, self.ino, self.size, self.mtime_ns)


class Staged:
    def __init__(self, target: Path, steps: Steps) -> None:
        self.target = target
        self.path = temp_name(target)
        self.steps = steps
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self.file: BinaryIO = os.fdopen(fd, "wb", buffering=_BUFFER)
        self.size = 0  # once prepared
        self.replaced = False  # our name holds the file we replaced (exchanged with it, not yet removed)
        self.steps("created")

    def write(self, data: bytes | memoryview) -> None:
        self.file.write(data)

    def sync(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.steps("synced")

    def prepare(self, like: Snapshot | None) -> None:
        # Stays open, to take what a host appends to the target meanwhile.
        self.file.flush()
        fd = self.file.fileno()
        if like is not None:
            os.fchmod(fd, like.mode)
            if os.geteuid() == 0:
                os.fchown(fd, like.uid, like.gid)
            os.utime(fd, ns=(like.atime_ns, like.mtime_ns))
        os.fsync(fd)
        self.size = os.fstat(fd).st_size

    def rename(self) -> bool:
        # True: exchanged, the replaced file is then at our temporary name; False: renamed over it.
        exchanged = self.replaced = _exchange(self.path, self.target)
        if not exchanged:
            os.replace(self.path, self.target)
        self.steps("renamed")
        return exchanged

    def appending(self) -> None:
        fd = self.file.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)

    def append(self, data: bytes | memoryview) -> None:
        fd = self.file.fileno()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def close(self, exchanged: bool) -> None:
        os.fsync(self.file.fileno())
        self.file.close()
        if exchanged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.replaced = False
        fsync_dir(self.target.parent)
        self.steps("dir_synced")

    def discard(self) -> None:
        """Remove the new version. After an exchange our name holds the replaced file, with whatever a host
        appended to it: it is swapped back first, and where that fails it is left at our name, never
        removed."""
        if self.replaced:
            with contextlib.suppress(OSError, ValueError):
                _put_back(self)
            if self.replaced:
                with contextlib.suppress(OSError):
                    self.file.close()
                return
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def same_file(a: Path, b: Path) -> bool:
    return a == b or (a.exists() and b.exists() and os.path.samefile(a, b))


def replace(
    staged: Staged,
    source: Path,
    before: Snapshot,
    source_fd: int,
    report: Appended,
    *,
    check_writers: bool,
    action: str,
) -> None:
    """The last steps of docs/transcripts.md, "Nothing lost, ever": what takes time first, then the check that
    `source` is as it was read (`before`) and at once the rename, so that a host's write has the least time
    to fall in between. What a host appended to `source` meanwhile (seen through `source_fd`, open since
    it was read) goes to the end of the new version, as `report` says; else TranscriptError, the target as
    it was."""
    in_place = (before.dev, before.ino) == _inode(staged.target) == _inode(source)
    edge = b""
    if in_place:
        edge = os.pread(source_fd, min(_EDGE, before.size), before.size - min(_EDGE, before.size))
    staged.prepare(before)
    if check_writers:
        refuse_writers(staged.target)
    if not before.unchanged(source):
        raise TranscriptError(
            f"{source} changed while it was {action} (a host wrote to it); it is left as it was",
            hint="run again once its session is idle",
        )
    staged.steps("checked")
    exchanged = staged.rename()
    added = 0
    if in_place:
        added = _catch_up(
            staged, source_fd, before, edge, exchanged=exchanged, check_writers=check_writers, action=action
        )
    staged.close(exchanged)
    _appended_while(report, added)


_EDGE = 4096  # the last bytes read: still there after the rename, the file was only appended to
_WAITS = 100  # polls, 10 ms apart, for a host to close the replaced file


def _catch_up(
    staged: Staged,
    source_fd: int,
    before: Snapshot,
    edge: bytes,
    *,
    exchanged: bool,
    check_writers: bool,
    action: str,
) -> int:
    # A host that opened the file by path before the rename may still append to it: that goes to the
    # end of the new version.
    busy = None
    if check_writers:  # one that opened it by path before the rename may not have written yet
        for _ in range(_WAITS):
            busy = (writers(staged.path) if exchanged else writers_of_fd(source_fd)).refusal(staged.target)
            if busy is None:
                break
            time.sleep(0.01)
    size = os.fstat(source_fd).st_size
    appended = size >= before.size and os.pread(source_fd, len(edge), before.size - len(edge)) == edge
    if busy is None and appended:
        staged.appending()
        offset = before.size
        while offset < (size := os.fstat(source_fd).st_size):
            chunk = os.pread(source_fd, min(size - offset, _BUFFER), offset)
            if not chunk:
                break
            staged.append(chunk)
            offset += len(chunk)
        return offset - before.size
    if not exchanged:
        what = "rewritten by a host" if busy is None else f"opened for good by a host ({busy.message})"
        raise AttachstoreError(
            f"{staged.target} was {what} while it was {action}, and the file system cannot swap it back: "
            f"what the host wrote, or writes, to the replaced file is lost (the {action} version took its "
            "place)",
            code="TRANSCRIPT_LOST",
        )
    _put_back(staged)
    raise busy or TranscriptError(
        f"{staged.target} was rewritten by a host while it was {action}; it is left as the host wrote it",
        hint="run again once its session is idle",
    )


def _put_back(staged: Staged) -> None:
    staged.file.flush()
    if not _exchange(staged.path, staged.target):
        raise OSError(errno.EIO, f"cannot swap {staged.target} back")
    staged.replaced = False
    fd = staged.file.fileno()  # now the replaced one's name, holding the new version
    grown = os.fstat(fd).st_size
    if grown > staged.size:
        with open(staged.target, "ab") as f:
            f.write(os.pread(fd, grown - staged.size, staged.size))
            os.fsync(f.fileno())
    fsync_dir(staged.target.parent)


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


_libc = ctypes.CDLL(None, use_errno=True)
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    # Swaps the two at once (renameat2 RENAME_EXCHANGE); False where the system cannot.
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None or not b.exists():
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
