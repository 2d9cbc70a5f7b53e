"""Verified reads on the event loop, for small objects whose bytes are already in the page cache.

A read that goes to a thread costs two wake-ups of the event loop and a hand-over of the interpreter lock
each way; for a 300 KB object that is as much as its hash. So an object of at most `RESIDENT_MAX` bytes is
first read right on the loop with `RWF_NOWAIT`, which answers from the page cache or not at all (it never
waits for the disk), and hashed there: a few hundred microseconds at most. Anything else (a cold object, a
large one, not a regular file, a file system without RWF_NOWAIT, any error or doubt) gives None and the
caller takes the usual path through a thread, which also decides what a failure means. The open (non-blocking,
so a FIFO planted at an object's path cannot hold the loop) and the fstat are metadata calls; they can wait
for the disk when the object's directory entry or inode is not cached, as nginx's opens do.

`read_all` reads many objects at once (a render's) in a few threads, one per core, each reading its share
one object after another: an object whose last page is in the page cache is read there, the rest is
left to the caller.

`Resident` also remembers, for a few seconds, the index row a verified read was served under and the file
it was read from, keyed by reference and by the caller's scope (whose grants it was looked up under). A
read that finds both again serves without the index: the bytes are still read and hashed in full, and the
header still checked against the row, every time; only the look-up of the row is saved. The file is known
by device, inode and change time: an object collected and admitted again (even into a reused inode number),
healed or restored is another file, so the remembered row no longer applies and the index is asked again.
A remembered row is dropped when this process changes its state, on any failure, and when it is older than
`ttl` seconds, which bounds what a change made by another process could go unseen for; the audit's moves
and the GC's unlinks are seen at once, as a file that is gone.

Why the change time tells a successor apart, and what that takes (docs/design.md, "Remembered rows"): a
file that takes a freed inode number is made after the remembered file was freed, which is after its read
(the read holds it open), and the kernel stamps every change time from its wall clock, truncated to the
file system's granularity. So a file whose change time is at least `SETTLED_NS` before the read (more than
a second, the coarsest granularity of a file system the resident reads run on, and a clock tick) can have
no successor with the same change time, unless the wall clock goes back that far: a younger file is served
but not remembered, and remembered rows are dropped when the wall clock has gone back by more than `STEP_NS`
against the monotonic clock since.
"""

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
RESIDENT_MAX = 1 << 20  # hashing 1 MiB takes under a millisecond here: about what a thread hop costs
SETTLED_NS = 2_000_000_000  # a file changed more recently than this before its read is not remembered
STEP_NS = 500_000_000  # a wall clock set back by more than this since a row was remembered drops it
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


def wall_ns() -> int:
    """The wall clock, which the kernel stamps change times from."""
    return time.time_ns()


class Row(Protocol):
    """What is remembered of an index row here: which object it describes, and its size."""

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
        """The object's bytes and which file they came from, if it is a regular file of exactly `size`
        bytes, all of them are in the page cache, and they pass `verify` (their keyed check, or their
        address). The file is None when it changed too recently to be told apart from a successor.
        `mapped`: the bytes where they lie, a `Mapped` that the caller releases, when the kernel grants
        it; else a copy."""
        return self._read(self.blobs.filename(ref), size, verify, None, mapped)

    async def read_all(self, wanted: Sequence[tuple[Ref, int, Verify]]) -> list[bytes | None]:
        """The bytes of many objects (ref, size, what the bytes must pass), of any size, read off the loop;
        None for each that this path leaves to the caller: one whose last page is not in the page cache, or
        any doubt. The objects are shared out by bytes among one thread per core, and each thread reads and
        hashes its share one object after another. A thread per object costs a wake-up of the loop and two
        hand-overs of the interpreter lock per object, and more threads than cores contend for the lock: a
        render's 20 objects of 600 KB took 5.3 ms that way here, and 3.0 ms in two threads. A cold object is
        left to the caller, which reads each in a thread of its own, so that the reads of a cold store
        overlap on the disk instead of queueing behind one another in a share."""
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
        """`_read` for a thread, where waiting for the disk holds up only the thread's share: the last page
        asked for with RWF_NOWAIT, as a sign that the object is in the page cache (the host may have evicted
        some other page meanwhile, which the read then waits for), and the object read with a plain read,
        into a buffer that is not zeroed first (the one RWF_NOWAIT reads into is: a memset of every byte, a
        fifth of the time of reading and hashing it)."""
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
        """`row`, just looked up under `scope`, was served from `file`: skip the look-up next time (unless the
        file is None: too young to be known by its identity)."""
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
        """The row remembered for `ref` (a reference's text, looked up as it is: anything but a reference's
        canonical text is simply not found) and the object's bytes, read from the same file as before and
        verified as `verify(row)` says (`mapped` as for `read`); None (and the row forgotten) on any doubt."""
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
        """The row of `ref` changed here (its state), or did not fit its bytes: drop it in every scope."""
        for key in [k for k in self._rows if k[0] == ref]:
            del self._rows[key]


def _kept_entries() -> int:
    """KEPT_MAX, or an eighth of the descriptors this process may open if that is fewer."""
    return min(KEPT_MAX, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 16)


def _shares(sizes: Sequence[int], n: int) -> list[list[int]]:
    """The indexes of `sizes` dealt into at most `n` shares of about equal total, the largest first."""
    shares: list[list[int]] = [[] for _ in range(max(1, min(n, len(sizes))))]
    totals = [0] * len(shares)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        least = totals.index(min(totals))
        shares[least].append(i)
        totals[least] += sizes[i]
    return shares
