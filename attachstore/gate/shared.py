"""An upload's bytes in shared memory: written once by the edge (or the base64 decode), then sealed against
any change and handed to a decode worker by its file descriptor, so that no pipe carries (and no message
encoding copies) the bytes of an image. What the worker inspects and hashes is what the daemon stores: after
the seal no process, the worker included, can change them."""

from __future__ import annotations

import fcntl
import mmap
import os
import weakref

_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


class SharedBuffer:
    """An anonymous memory file (memfd). `write` appends; `seal` ends the writing and maps the bytes
    read-only (`view`). `close` frees them; a buffer nobody holds any more is freed as well, even unclosed
    (the mapping and the descriptor go with the object)."""

    __slots__ = ("__weakref__", "_closer", "_fd", "_map", "size", "view")

    def __init__(self) -> None:
        self._fd = os.memfd_create("attachstore-upload", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self._closer = weakref.finalize(self, os.close, self._fd)
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
        """Let go of the bytes: the descriptor is closed at once, the mapping as soon as nothing reads it
        any more (a write of the stored object in a thread may still hold a view of it)."""
        self._closer()
        self.view = self._map = None
