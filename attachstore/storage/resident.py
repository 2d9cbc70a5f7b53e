"""Verified reads on the event loop for small objects already in the page cache, and the index rows remembered
for the next read of the same file (`docs/design.md`, "Verified reads"). Every read here serves or steps
aside (None) for the thread path, which alone decides what a failure means."""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar

from ..cores import cores
from ..refs import Ref
from .fileops import OPEN_READ
from .local import LocalBlobStore, Verify
from .mapped import FileId, Mapped, Mappings, available

KEPT_MAX = 256  # mappings kept for the next read of their file; two descriptors each
KEPT_IDLE = 5.0  # seconds a kept mapping waits for its next read
RESIDENT_MAX = 1 << 20  # a larger object's hash would hold the loop longer than a thread hop costs
SETTLED_NS = 2_000_000_000  # a file changed more recently than this before its read is not remembered
STEP_NS = 500_000_000  # a wall clock set back by more than this since a row was remembered drops it
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


def wall_ns() -> int:
    """The clock the kernel stamps change times from."""
    return time.time_ns()


class Row(Protocol):
    @property
    def ref(self) -> str: ...

    @property
    def bytes(self) -> int: ...


R = TypeVar("R", bound=Row)


class _Remembered(NamedTuple, Generic[R]):
    row: R
    path: str  # the object's file name
    file: FileId
    until: float  # monotonic seconds
    offset: int  # the wall clock less the monotonic clock, in ns, when remembered


class Resident(Generic[R]):
    def __init__(self, blobs: LocalBlobStore, *, ttl: float = 5.0, entries: int = 4096) -> None:
        self.blobs = blobs
        self.ttl = ttl
        self.entries = entries
        self._rows: OrderedDict[tuple[str, str | None], _Remembered[R]] = OrderedDict()
        self.enabled = bool(_NOWAIT)
        # What `mapped` reads are made and kept by, where the kernel grants leases (storage/mapped.py).
        self.mappings = Mappings(_kept_entries(), KEPT_IDLE) if available() else None
        self.threads = cores()  # a batch's readers: counted once (it reads the cgroups' files)

    def read(
        self, ref: Ref, size: int, verify: Verify, mapped: bool = False
    ) -> tuple[bytearray | Mapped, FileId | None] | None:
        """The file is None when it changed too recently to be told apart from a successor; `mapped` asks for
        a `Mapped` (the caller releases it) where the kernel grants one."""
        return self._read(self.blobs.filename(ref), size, verify, None, mapped)

    async def read_all(self, wanted: Sequence[tuple[Ref, int, Verify]]) -> list[bytes | None]:
        """One thread per core reads its share (docs/performance.md, "The render's reads, this round"); None
        for each object left to the caller, cold or in doubt, so that a cold store's reads overlap on the
        disk."""
        found: list[bytes | None] = [None] * len(wanted)
        if not self.enabled or not wanted:
            return found

        def read_share(share: list[int]) -> None:
            for i in share:
                ref, size, verify = wanted[i]
                found[i] = self._read_warm(self.blobs.filename(ref), size, verify)

        shares = _shares([size for _, size, _ in wanted], self.threads)
        await asyncio.gather(*(asyncio.to_thread(read_share, share) for share in shares))
        return found

    def _read_warm(self, path: str, size: int, verify: Verify) -> bytes | None:
        """The last page asked for with RWF_NOWAIT says the object is in the page cache; then a plain read,
        into a buffer not zeroed first as RWF_NOWAIT's must be."""
        try:
            fd = os.open(path, OPEN_READ)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size != size or not stat.S_ISREG(st.st_mode):
                return None
            if size and os.preadv(fd, [bytearray(1)], size - 1, _NOWAIT) != 1:
                return None
            data = os.read(fd, size + 1)  # one byte more: a longer file is not the object
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                self.enabled = False
            return None
        finally:
            os.close(fd)
        return data if len(data) == size and verify(data) else None

    def _read(
        self, path: str, size: int, verify: Verify, file: FileId | None, mapped: bool = False
    ) -> tuple[bytearray | Mapped, FileId | None] | None:
        if not self.enabled or size > RESIDENT_MAX:
            return None
        if mapped and self.mappings is not None:
            again = self.mappings.again(path, size, file)
            if again is not None:
                view, st = again
                if verify(view):
                    return view, view.file if st.st_ctime_ns < wall_ns() - SETTLED_NS else None
                view.release()
                return None  # the usual path decides what the bytes are
        try:
            fd = os.open(path, OPEN_READ)
        except OSError:
            return None
        data: bytearray | Mapped | None = None
        try:
            st = os.fstat(fd)
            found = (st.st_dev, st.st_ino, st.st_ctime_ns)
            if st.st_size != size or not stat.S_ISREG(st.st_mode) or file not in (None, found):
                return None
            # Asked while the file is open, so before any successor can take its inode number.
            settled = st.st_ctime_ns < wall_ns() - SETTLED_NS
            if mapped and self.mappings is not None:
                data = self.mappings.map(path, fd, size, found)  # takes the descriptor over
            if data is None:
                data = bytearray(size)
                if size and os.preadv(fd, [data], 0, _NOWAIT) != size:
                    return None
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # this kernel or file system cannot say
                self.enabled = False
            return None
        finally:
            if not isinstance(data, Mapped):
                os.close(fd)
        if not verify(data):
            if isinstance(data, Mapped):
                data.release()
            return None
        return data, found if settled else None

    def close(self) -> None:
        if self.mappings is not None:
            self.mappings.close()

    def remember(self, row: R, scope: str | None, file: FileId | None) -> None:
        """Unless `file` is None: too young to be known by its identity."""
        if file is None:
            return
        key = (row.ref, scope)
        path = self.blobs.filename(Ref.parse(row.ref))
        now = time.monotonic_ns()
        self._rows[key] = _Remembered(row, path, file, now / 1e9 + self.ttl, wall_ns() - now)
        self._rows.move_to_end(key)
        if len(self._rows) > self.entries:
            self._rows.popitem(last=False)

    def recall(
        self, ref: str, scope: str | None, verify: Callable[[R], Verify], mapped: bool = False
    ) -> tuple[R, bytearray | Mapped] | None:
        """Only from the same file as before; None, and the row forgotten, on any doubt. `ref` is looked up as
        it is: anything but a reference's canonical text is simply not found."""
        key = (ref, scope)
        got = self._rows.get(key)
        if got is None:
            return None
        now = time.monotonic_ns()
        current = now / 1e9 < got.until and wall_ns() - now > got.offset - STEP_NS
        found = self._read(got.path, got.row.bytes, verify(got.row), got.file, mapped) if current else None
        if found is None:
            del self._rows[key]
            return None
        self._rows.move_to_end(key)
        return got.row, found[0]

    def forget(self, ref: str) -> None:
        for key in [k for k in self._rows if k[0] == ref]:
            del self._rows[key]


def _kept_entries() -> int:
    return min(KEPT_MAX, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 16)


def _shares(sizes: Sequence[int], n: int) -> list[list[int]]:
    shares: list[list[int]] = [[] for _ in range(max(1, min(n, len(sizes))))]
    totals = [0] * len(shares)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        least = totals.index(min(totals))
        shares[least].append(i)
        totals[least] += sizes[i]
    return shares
