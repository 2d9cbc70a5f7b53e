"""FileOps that record every call of the write path and can fail one of them."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from attachstore.storage import FileOps


class RecordingOps(FileOps):
    def __init__(self, log: list[str] | None = None) -> None:
        self.log: list[str] = [] if log is None else log
        self.fail_at: str | None = None
        self.fail_errno = errno.EIO
        self.fail_count = 1

    def _step(self, name: str) -> None:
        self.log.append(name)
        if self.fail_at == name and self.fail_count > 0:
            self.fail_count -= 1
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))

    def open_exclusive(self, path: Path) -> int:
        self._step("open")
        return super().open_exclusive(path)

    def write(self, fd: int, data: memoryview) -> int:
        self._step("write")
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._step("fsync")
        super().fsync(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        self._step("fchmod")
        super().fchmod(fd, mode)

    def close(self, fd: int) -> None:
        self.log.append("close")
        super().close(fd)

    def mkdir(self, path: Path) -> None:
        self._step("mkdir")
        super().mkdir(path)

    def link(self, src: Path, dst: Path) -> None:
        self._step("link")
        super().link(src, dst)

    def rename(self, src: Path, dst: Path) -> None:
        self._step("rename")
        super().rename(src, dst)

    def fsync_dir(self, path: Path) -> None:
        self._step("fsync_dir")
        super().fsync_dir(path)

    def unlink(self, path: Path) -> None:
        self.log.append("unlink")
        super().unlink(path)


class Filling(RecordingOps):
    """A file system with `free` bytes and `inodes` inodes left, as statvfs reports them."""

    def __init__(self, free: int, inodes: int = 1 << 20) -> None:
        super().__init__()
        self.free, self.inodes = free, inodes

    def statvfs(self, path: Path) -> os.statvfs_result:
        real = super().statvfs(path)
        blocks = self.free // real.f_frsize
        free = (real.f_bsize, real.f_frsize, real.f_blocks, blocks, blocks)
        inodes = (max(real.f_files, self.inodes), self.inodes, self.inodes)
        return os.statvfs_result((*free, *inodes, real.f_flag, real.f_namemax))


def flip_byte(path: Path, offset: int = -1) -> None:
    """Damage an object file in place (objects are read-only, as a disk fault would not care)."""
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.chmod(path, 0o444)
