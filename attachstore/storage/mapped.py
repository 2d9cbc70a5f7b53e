"""An object's bytes where they lie in the page cache: a read-only shared mapping of its file under a read
lease, which the read lane hashes and sends without a copy (`docs/design.md`, "Mapped reads"). The lease's
break signal is SIGURG, ignored unless handled, so a writer never disturbs a process."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import logging
import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_GETLEASE = getattr(fcntl, "F_GETLEASE", 1025)
BREAK_SIGNAL = signal.SIGURG  # ignored by default; `watch` handles it
_SYS_CACHESTAT = 451  # the same number on every architecture (the generic system call table)
_PROC = Path("/proc/sys/fs")
_libc = ctypes.CDLL(None, use_errno=True)
log = logging.getLogger(__name__)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recent")]


def available() -> bool:
    """Leases, `cachestat`, and a lease-break time of a second at least."""
    try:
        enabled = (_PROC / "leases-enable").read_text().strip() == "1"
        waits = int((_PROC / "lease-break-time").read_text()) >= 1
    except (OSError, ValueError):
        return False
    if not (enabled and waits):
        return False
    return _probe_in_child() if _filtered() else _probe()


def _probe() -> bool:
    fd = os.open("/", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _cached_pages(fd, 0) is not None  # 0: to the end of the file
    finally:
        os.close(fd)


def _filtered() -> bool:
    """A seccomp filter is in force (systemd's `SystemCallFilter=`, a container's profile)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return True
    return any(line.split()[1:2] == ["2"] for line in status.splitlines() if line.startswith("Seccomp:"))


_PROBE = "import sys; from attachstore.storage.mapped import _probe; sys.exit(0 if _probe() else 1)"


def _probe_in_child() -> bool:
    """A system call that a seccomp filter refuses may kill the caller (SIGSYS) rather than fail, as
    `SystemCallFilter=@system-service` does to `cachestat` unless `SystemCallErrorNumber=` is set: asked in a
    child, which inherits the filter, the question costs nothing worse than a no."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], stdin=subprocess.DEVNULL, capture_output=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if done.returncode == -signal.SIGSYS:
        log.warning("mapped reads are off: this process's seccomp filter refuses the cachestat system call")
    return done.returncode == 0


def _cached_pages(fd: int, size: int) -> int | None:
    stat = _Stat()
    if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(_Range(0, size)), ctypes.byref(stat), 0) != 0:
        return None
    return int(stat.cache)


FileId = tuple[int, int, int]  # st_dev, st_ino, st_ctime_ns: which file, not just which name


def _cached(fd: int, size: int) -> bool:
    pages = _cached_pages(fd, size)
    return pages is not None and pages >= -(-size // mmap.PAGESIZE)


class Mapped(mmap.mmap):
    """A buffer (hash it, write it, probe its header). Once sent it is `served()`, else `release()`d; the
    lease goes with the mapping and the descriptor."""

    _fd = -1
    _keeper: Mappings | None = None
    path = ""
    file: FileId = (0, 0, 0)
    idle = 0.0  # monotonic seconds: kept until then unless used again

    def resident(self) -> bool:
        return self._fd >= 0 and _cached(self._fd, len(self))

    def intact(self) -> bool:
        """Nobody asked to write to the file since the lease was granted: its bytes are the ones hashed, for
        lease-break-time seconds at least."""
        try:
            return self._fd >= 0 and fcntl.fcntl(self._fd, _F_GETLEASE) == fcntl.F_RDLCK
        except OSError:
            return False

    def served(self) -> None:
        if self._keeper is None or not self._keeper.keep(self):
            self.release()

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(BufferError):  # a view still held: unmapped with the last one
                self.close()
            os.close(fd)

    def __del__(self) -> None:
        self.release()


class Mappings:
    """Served mappings are kept for the next read of the same file, since one made per read costs more than
    the copy it saves; a kept mapping holds its lease until `sweep` lets it go, so a writer waits at most
    until the next sweep."""

    def __init__(self, entries: int, idle: float) -> None:
        self.entries = entries
        self.idle = idle
        self._kept: dict[str, Mapped] = {}

    def map(self, path: str, fd: int, size: int, file: FileId) -> Mapped | None:
        mapped = map_resident(fd, size)
        if mapped is not None:
            mapped.path, mapped.file, mapped._keeper = path, file, self
        return mapped

    def again(self, path: str, size: int, file: FileId | None) -> tuple[Mapped, os.stat_result] | None:
        # only if `path` still names that very file, of `size` bytes, its lease intact, every page cached
        kept = self._kept.pop(path, None)
        if kept is None:
            return None
        try:
            st: os.stat_result | None = os.stat(path)
        except OSError:
            st = None
        if (
            st is None
            or (st.st_dev, st.st_ino, st.st_ctime_ns) != kept.file
            or file not in (None, kept.file)
            or st.st_size != size
            or not (kept.intact() and kept.resident())
        ):
            kept.release()
            return None
        self._kept[path] = kept
        kept.idle = time.monotonic() + self.idle
        return kept, st

    def keep(self, mapped: Mapped) -> bool:
        kept = self._kept.get(mapped.path)
        if kept is not None:
            return kept is mapped
        # a full table keeps nothing more until an entry goes: no churn of mappings
        if len(self._kept) >= self.entries or not mapped.intact():
            return False
        mapped.idle = time.monotonic() + self.idle
        self._kept[mapped.path] = mapped
        return True

    def sweep(self) -> None:
        now = time.monotonic()
        for path, kept in list(self._kept.items()):
            if kept.idle < now or not kept.intact():
                del self._kept[path]
                kept.release()

    def close(self) -> None:
        for kept in self._kept.values():
            kept.release()
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


def watch(mappings: Mappings, loop: asyncio.AbstractEventLoop) -> bool:
    """From `loop`, which must run on the main thread; False where the loop cannot handle signals."""
    try:
        loop.add_signal_handler(BREAK_SIGNAL, mappings.sweep)
    except (RuntimeError, ValueError):  # not the main thread
        return False
    return True


def map_resident(fd: int, size: int) -> Mapped | None:
    """The mapping takes `fd` over (its `release` closes it); on None, for any reason, the caller keeps it."""
    try:
        fcntl.fcntl(fd, _F_SETSIG, BREAK_SIGNAL)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
    except OSError:
        return None
    try:
        if size == 0 or not _cached(fd, size):
            raise _Unmapped
        mapped = Mapped(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (_Unmapped, OSError, ValueError):
        _unlease(fd)
        return None
    mapped._fd = fd
    return mapped


class _Unmapped(Exception):
    pass


def _unlease(fd: int) -> None:
    try:
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
    except OSError as e:
        if e.errno not in (errno.EBADF, errno.EINVAL):
            raise
