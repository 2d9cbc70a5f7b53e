"""The audit's file pass: every file under objects/ read and hashed in trips, doing the least it can per
file; anything not clean is a suspect for audit.py to look at again (docs/design.md, "Garbage collection
and the audit", says when it runs on one process per core)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..cores import cores
from ..gate import probe_header
from ..index import BUSY_TIMEOUT_MS, ObjectRow, rows_in
from ..refs import Checker, Ref, hasher
from ..storage import Listing, StoredFile

# Files go to the pass a trip of about TRIP_FILES files or TRIP_BYTES bytes (by the index's sizes) at a
# time, whole listings: few enough trips that their cost vanishes, small enough for the pace (--max-rate)
# and the progress line. One thread, or processes, never two threads: on small files most of the work holds
# the interpreter lock, and two threads lost more handing it to each other than they gained
# (docs/performance.md).
TRIP_FILES = 1024
TRIP_BYTES = 16 << 20
READ_AT_ONCE = 64 << 20  # a larger object is read in chunks, on a closer look
READ_CHUNK = 1 << 20
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# From this many index rows on (with an SQLite index, and no --max-rate), the trips go to one process per
# core, at most MAX_PROCESSES, instead of the one thread (where that pays: docs/performance.md, "Audit at a
# million objects"). Each reads the rows of its trips' files from the index itself, so that a trip carries
# only names there and refs back.
PROCESSES_FROM = 200_000
MAX_PROCESSES = 4

Part = tuple[Listing, list[str]]  # a listing and the names of it to audit


@dataclass(slots=True)
class Trip:
    refs: list[str] = field(default_factory=list)
    bytes: int = 0
    suspects: list[tuple[str, Ref | None]] = field(default_factory=list)  # (path, the ref its place names)


def trips(parts: Iterable[Part], per_trip: int) -> Iterator[list[Part]]:
    trip: list[Part] = []
    files = 0
    for part in parts:
        trip.append(part)
        files += len(part[1])
        if files >= per_trip:
            yield trip
            trip, files = [], 0
    if trip:
        yield trip


def examine(parts: list[Part], rows: dict[str, ObjectRow], checker: Checker) -> Trip:
    """Read and hash every named file. A file is clean when its bytes hash to its name, have the size of its
    row, carry the header its row records and (sha256) fit the row's keyed check, made with this key. This
    loop runs once per object, so it does the least it can: two strings (the ref and the path), three system
    calls (open, one read, close), no stat, no objects."""
    trip = Trip()
    refs, suspects = trip.refs, trip.suspects
    size = 0
    for listing, names in parts:
        algorithm = listing.algorithm
        if algorithm is None:  # not a bucket: nothing in it is an object
            suspects.extend((listing.path(name), None) for name in names)
            continue
        directory = listing.directory + "/"
        head = algorithm + ":"
        bucket = listing.bucket
        irregular = listing.irregular
        for name in names:
            ref = head + name
            row = rows.get(ref)
            if row is None or name in irregular or not name.startswith(bucket):
                suspects.append((directory + name, listing.ref(name)))
                continue
            expected = row.bytes
            try:
                fd = os.open(directory + name, _OPEN)
                try:
                    # One byte more than the row says: a longer file shows itself, a shorter one ends early.
                    data = os.read(fd, expected + 1 if 0 <= expected < READ_AT_ONCE else READ_AT_ONCE)
                finally:
                    os.close(fd)
            except OSError:
                suspects.append((directory + name, listing.ref(name)))
                continue
            h = hasher(algorithm)
            h.update(data)
            header = probe_header(data)
            check = row.keyed_check
            if (
                h.hexdigest() != name  # also proves the name is 64 lowercase hex digits, as a ref's
                or len(data) != expected
                or row.state != "ok"
                or (
                    algorithm == "sha256"
                    and not (
                        check
                        and checker.mine(check)
                        and checker.holds(check, ref, expected, row.media_type, data)
                    )
                )
                or header is None
                or header.media_type != row.media_type
                or header.width != row.width
                or header.height != row.height
            ):
                suspects.append((directory + name, listing.ref(name)))
                continue
            refs.append(ref)
            size += expected
    trip.bytes = size
    return trip


_database: sqlite3.Connection | None = None  # a worker process's own read-only connection to the index


def worker_start() -> None:
    """In each worker process, first: ^C is the audit's to handle (it shuts the pool down), and a worker
    ends as soon as the audit's process is gone, however it went (killed, say): a worker left behind would
    keep the index open and hold the standard output of `attachstore audit --json | …` open forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        sentinel = parent.sentinel

        def watch() -> None:
            multiprocessing.connection.wait([sentinel])
            os._exit(1)

        threading.Thread(target=watch, name="audit-parent", daemon=True).start()


def examine_in_process(parts: list[Part], index: str, checker: Checker) -> Trip:
    """Against the rows as the index has them now: a file clean against its current row is clean; anything
    else is a suspect, judged against the snapshot like any other."""
    global _database
    if _database is None:
        uri = f"{Path(index).resolve().as_uri()}?mode=ro"
        _database = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    names = [f"{listing.algorithm}:{n}" for listing, part in parts if listing.algorithm for n in part]
    return examine(parts, rows_in(_database, names), checker)


def processes(rows: int) -> int:
    n = cores()
    return min(n, MAX_PROCESSES) if n > 1 and rows >= PROCESSES_FROM else 1


@dataclass(frozen=True, slots=True)
class Look:
    file: StoredFile
    data: bytes | None = None  # the bytes, held only when they hash to the file's ref (intact)
    error: OSError | None = None  # it cannot be read


def look_again(path: str, ref: Ref | None, size: int | None = None) -> Look | None:
    """None if the file is gone (a GC sweep). The file is hashed a chunk at a time and its bytes are kept
    only while they can be the object's: as long as its row's `size` (when it has one) and, past it or
    without a row, only once they turned out to hash to its ref (read again then). A large file planted at
    an object's path (a sparse one takes no room on the disk) never sits in memory."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return Look(StoredFile(Path(path), ref, 0, 0.0), error=e)
    if not stat.S_ISREG(st.st_mode):
        ref = None  # a symlink or a fifo is never an object, whatever its name
    file = StoredFile(Path(path), ref, st.st_size, st.st_mtime)
    if ref is None:
        return Look(file)
    try:
        length, digest, data = _hash(path, ref, size)
        if digest == ref.digest and data is None:  # the object's bytes, whatever its row says: kept
            length, digest, data = _hash(path, ref, None, keep=True)
    except FileNotFoundError:
        return None
    except OSError as e:
        return Look(file, error=e)
    file = StoredFile(file.path, ref, length, file.mtime)
    return Look(file, data if digest == ref.digest else None)


def _hash(path: str, ref: Ref, size: int | None, keep: bool = False) -> tuple[int, str, bytes | None]:
    fd = os.open(path, _OPEN)
    try:
        keep = keep or os.fstat(fd).st_size == size
        h = hasher(ref.algorithm)
        chunks: list[bytes] = []
        length = 0
        while chunk := os.read(fd, READ_CHUNK):
            h.update(chunk)
            length += len(chunk)
            if keep and (size is None or length <= size):
                chunks.append(chunk)
            else:
                keep, chunks = False, []
    finally:
        os.close(fd)
    return length, h.hexdigest(), b"".join(chunks) if keep else None
