"""The system calls of the local write and read paths (`FileOps`, which tests replace to record calls and
inject faults), and how an OS error becomes a storage error."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from ..errors import AttachstoreError, ServerBusy, StorageFull, StorageUnavailable

OBJECT_MODE = 0o444
STAGING_MODE = 0o600


class FileOps:
    def open_exclusive(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, STAGING_MODE)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        os.fchmod(fd, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def mkdir(self, path: Path) -> None:
        os.mkdir(path, 0o755)

    def link(self, src: Path, dst: Path) -> None:
        os.link(src, dst)

    def rename(self, src: Path, dst: Path) -> None:
        os.rename(src, dst)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def statvfs(self, path: Path) -> os.statvfs_result:
        return os.statvfs(path)


# How an object file is opened to be read: non-blocking, so that a FIFO planted at its path cannot hold the
# caller until a writer comes (O_NONBLOCK means nothing to a regular file's reads).
OPEN_READ = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK


class NotRegular(OSError): ...


def open_regular(path: str | Path) -> BinaryIO:
    fd = os.open(path, OPEN_READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_sized(path: str | Path, size: int) -> bytes | None:
    """None, without reading a byte, when the file's size is not `size`: a sparse file planted at an object's
    path costs no memory. One byte more is read if there is one (a file that grew is not the object)."""
    with open_regular(path) as f:
        return f.read(size + 1) if os.fstat(f.fileno()).st_size == size else None


def storage_error(e: OSError, doing: str) -> AttachstoreError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(f"the store is full ({doing}): {e.strerror}")
    if e.errno in (errno.EMFILE, errno.ENFILE):  # the process's or the system's limit: a moment's trouble
        return ServerBusy(f"the daemon has no descriptor left ({doing}): {e.strerror}", hint="retry later")
    return StorageUnavailable(f"storage I/O error while {doing}: {e.strerror or e}")
