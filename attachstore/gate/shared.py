"""An upload's bytes in shared memory, sealed and handed to a decode worker by its descriptor: what the worker
inspects and hashes is what the daemon stores (docs/design.md, "The decode worker pool")."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import resource
import threading
import weakref

from ..errors import ServerBusy

_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
# The part of the process's open-file limit that the uploads in progress may hold: the rest stays for the
# connections, the index, the files being stored and read, and the decode workers' pipes.
SHARE = 4


class Descriptors:
    """At most a quarter of the process's RLIMIT_NOFILE, as it is when the first is made: every SharedBuffer
    of the process takes one."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._lock = threading.Lock()  # a buffer nobody holds may be freed by the collector in any thread
        self.held = 0

    @property
    def limit(self) -> int:
        if self._limit is None:
            self._limit = max(1, nofile() // SHARE)
        return self._limit

    def take(self) -> None:
        with self._lock:
            if self.held >= self.limit:
                raise _busy(f"the uploads in progress hold {self.held} descriptors, the most they may")
            self.held += 1

    def give(self) -> None:
        with self._lock:
            self.held -= 1


def nofile() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def _busy(what: str) -> ServerBusy:
    return ServerBusy(
        f"{what}: each image of an admission in progress holds one, and together they may hold a quarter of "
        f"this process's open-file limit (RLIMIT_NOFILE {nofile()})",
        hint="retry after the Retry-After delay; send fewer images per request, or raise the daemon's "
        "open-file limit (LimitNOFILE= in its unit, ulimit -n)",
    )


DESCRIPTORS = Descriptors()


def _close(fd: int, descriptors: Descriptors) -> None:
    os.close(fd)
    descriptors.give()


class SharedBuffer:
    """A buffer nobody holds any more is freed as well, even unclosed."""

    __slots__ = ("__weakref__", "_closer", "_fd", "_map", "size", "view")

    def __init__(self) -> None:
        descriptors = DESCRIPTORS
        descriptors.take()
        try:
            self._fd = os.memfd_create("attachstore-upload", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError as e:
            descriptors.give()
            if e.errno in (errno.EMFILE, errno.ENFILE):  # the process's or the system's limit, reached
                raise _busy("no descriptor is left for this upload's bytes") from None
            raise
        self._closer = weakref.finalize(self, _close, self._fd, descriptors)
        self._map: mmap.mmap | None = None
        self.size = 0
        self.view: memoryview | None = None

    @classmethod
    def of(cls, data: bytes | memoryview) -> SharedBuffer:
        buf = cls()
        buf.write(data)
        buf.seal()
        return buf

    @property
    def fd(self) -> int:
        return self._fd

    def write(self, chunk: bytes | memoryview) -> None:
        view = memoryview(chunk)
        while view:
            written = os.write(self._fd, view)
            if written <= 0:  # pragma: no cover - a memory file takes what it is given, or raises
                raise OSError("short write to shared memory")
            self.size += written
            view = view[written:]

    def seal(self) -> memoryview:
        if self.view is None:
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, _SEALS)
            if self.size:
                self._map = mmap.mmap(self._fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ)
                self.view = memoryview(self._map)
            else:  # mmap refuses an empty mapping
                self.view = memoryview(b"")
        return self.view

    def head(self, n: int) -> bytes:
        return os.pread(self._fd, min(n, self.size), 0)

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        # the mapping goes once nothing reads it (a write of the stored object in a thread may hold a view)
        self._closer()
        self.view = self._map = None
