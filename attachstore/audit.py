"""The audit: re-hash every object, check every row against its file and every file against its row.

Every file is read and hashed in one lean pass, on a thread against a snapshot of the rows (on a large store,
on one process per core against the rows as the index has them); a file that is not clean there is only a
suspect, read again in full for a closer look before anything is said about it.
Findings are collected, typed, and the audit keeps going after each one. Suspected findings (a row without a
file, a file without a row) are confirmed under the index's write lock, so that an admission or a GC sweep
running beside the audit is never reported as damage. `repair` acts on each confirmed finding.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sqlite3
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from .backend import StoredObject
from .blobstore import IN_FLIGHT, Listing, LocalBlobStore, StoredFile
from .config import Limits
from .errors import Rejected, StorageUnavailable
from .index import BUSY_TIMEOUT_MS, Index, ObjectRow, rows_in
from .probe import probe_header
from .progress import Progress
from .refs import Ref, hasher
from .service import Store

# Re-indexing a stray file must not re-apply admission limits: reads never do.
_NO_LIMITS = Limits(
    max_image_bytes=1 << 40,
    max_side=1 << 30,
    max_pixels=1 << 60,
    max_frames=1 << 30,
    max_animation_pixels=1 << 62,
    max_batch_images=1,
    max_batch_bytes=1 << 40,
)


# Files go to the pass a trip of about _TRIP_FILES files or _TRIP_BYTES bytes (by the index's sizes) at a
# time, whole listings: few enough trips that their cost vanishes, small enough for the pace (--max-rate)
# and the progress line. One thread, or processes, never two threads: on small files most of the work holds
# the interpreter lock, and two threads lost more handing it to each other than they gained
# (docs/performance.md).
_TRIP_FILES = 1024
_TRIP_BYTES = 16 << 20
_READ_AT_ONCE = 64 << 20  # a larger object is read in chunks, on a closer look
_READ_CHUNK = 1 << 20
_FETCHES = 16  # objects fetched at once from a remote backend (S3): latency, not CPU, bounds it
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# From this many index rows on (with an SQLite index, and no --max-rate), the trips go to one process per
# core, at most _MAX_PROCESSES, instead of the one thread. Each is spawned once (about 0.25 s) and reads the
# rows of its trips' files from the index itself, so that a trip carries only names there and refs back.
# On two cores that wins 15 % at a million rows and breaks even at 100,000.
_PROCESSES_FROM = 200_000
_MAX_PROCESSES = 4

_Part = tuple[Listing, list[str]]  # a listing and the names of it to audit


@dataclass(slots=True)
class _Trip:
    """What one trip found. A clean file leaves only its ref (for the row pass) and its size; any other file
    is a suspect, for a closer look on the event loop."""

    refs: list[str] = field(default_factory=list)
    bytes: int = 0
    suspects: list[tuple[str, Ref | None]] = field(default_factory=list)  # (path, the ref its place names)


def _trips(parts: Iterable[_Part], per_trip: int) -> Iterator[list[_Part]]:
    trip: list[_Part] = []
    files = 0
    for part in parts:
        trip.append(part)
        files += len(part[1])
        if files >= per_trip:
            yield trip
            trip, files = [], 0
    if trip:
        yield trip


def _examine(parts: list[_Part], rows: dict[str, ObjectRow]) -> _Trip:
    """Read and hash every named file. A file is clean when its bytes hash to its name, have the size of its
    row and carry the header its row records. This loop runs once per object, so it does the least it can:
    two strings (the ref and the path), three system calls (open, one read, close), no stat, no objects."""
    trip = _Trip()
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
                    data = os.read(fd, expected + 1 if 0 <= expected < _READ_AT_ONCE else _READ_AT_ONCE)
                finally:
                    os.close(fd)
            except OSError:
                suspects.append((directory + name, listing.ref(name)))
                continue
            h = hasher(algorithm)
            h.update(data)
            header = probe_header(data)
            if (
                h.hexdigest() != name  # also proves the name is 64 lowercase hex digits, as a ref's
                or len(data) != expected
                or row.state != "ok"
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


def _worker_start() -> None:
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


def _examine_elsewhere(parts: list[_Part], index: str) -> _Trip:
    """`_examine` in a worker process, against the rows of the trip's files as the index has them now, a
    moment after the audit's snapshot. A file clean against its current row is clean; anything else is a
    suspect, looked at again and judged against the snapshot like any other."""
    global _database
    if _database is None:
        uri = f"{Path(index).resolve().as_uri()}?mode=ro"
        _database = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    names = [f"{listing.algorithm}:{n}" for listing, part in parts if listing.algorithm for n in part]
    return _examine(parts, rows_in(_database, names))


def _processes(rows: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, _MAX_PROCESSES) if cores > 1 and rows >= _PROCESSES_FROM else 1


@dataclass(frozen=True, slots=True)
class _Look:
    """A suspect file, read again in full: whatever made it suspect may have passed (a heal, say)."""

    file: StoredFile
    intact: bool = False
    data: bytes | None = None  # None: not an object (file.ref is None), or unreadable (error)
    error: OSError | None = None


def _look_again(path: str, ref: Ref | None) -> _Look | None:
    """None if the file is gone (a GC sweep)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return _Look(StoredFile(Path(path), ref, 0, 0.0), error=e)
    if not stat.S_ISREG(st.st_mode):
        ref = None  # a symlink or a fifo is never an object, whatever its name
    file = StoredFile(Path(path), ref, st.st_size, st.st_mtime)
    if ref is None:
        return _Look(file)
    try:
        fd = os.open(path, _OPEN)
        try:
            chunks = []
            while chunk := os.read(fd, _READ_CHUNK):
                chunks.append(chunk)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        return _Look(file, error=e)
    data = b"".join(chunks)
    return _Look(StoredFile(file.path, ref, len(data), file.mtime), ref.matches(data), data)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The audit holds a row per object for its whole run and makes short-lived objects by the hundred
    thousand, none in a cycle: the cycle collector would traverse the rows again and again for nothing
    (a tenth of the run on 150,000 small objects). Reference counting frees everything as before. The
    switch is process-wide: the audit runs in a command of its own, never in the daemon."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Kind(StrEnum):
    MISSING = "missing"  # a row whose file is gone
    CORRUPT = "corrupt"  # a file whose bytes do not hash to its name
    STRAY_FILE = "stray_file"  # a file no row publishes, or whose name and place are not an object's
    STRAY_ROW = "stray_row"  # a row already marked missing or quarantined: no bytes stand behind it
    METADATA_MISMATCH = "metadata_mismatch"  # intact bytes whose header or size disagree with the row


@dataclass(frozen=True)
class Finding:
    kind: Kind
    ref: str | None
    path: str | None
    detail: str
    repair: str | None = None  # what --repair did, if anything


@dataclass
class AuditReport:
    files: int = 0
    bytes: int = 0
    rows: int = 0
    sample: float = 1.0
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings


class Audit:
    def __init__(
        self,
        store: Store,
        *,
        repair: bool = False,
        sample: float = 1.0,
        max_rate: float | None = None,
        progress: Callable[[int, int], Progress] | None = None,
        settle: float = IN_FLIGHT,
    ) -> None:
        self.store = store
        self.repair = repair
        self.sample = sample
        self.max_rate = max_rate  # bytes per second, or None
        self.progress = progress
        self.settle = settle
        self._started = time.time()
        self._picked: dict[str, bool] = {}
        self._rng = random.Random()

    def _pick(self, key: str) -> bool:
        """A file and its row are sampled together."""
        if self.sample >= 1.0:
            return True
        return self._picked.setdefault(key, self._rng.random() < self.sample)

    async def run(self) -> AuditReport:
        with _no_cycle_collection():
            return await self._run()

    async def _run(self) -> AuditReport:
        self._started = time.time()
        report = AuditReport(sample=self.sample)
        rows = {r.ref: r for r in await self.store.index.rows()}
        # With the collector off, what the loading left in reference cycles would stay until the end (the
        # reader's finished future holds every raw row): one young-generation pass frees it now.
        gc.collect(0)
        # The index's count and sizes stand for what the walk will find: they size the trips and the
        # progress line before anything is listed.
        total = sum(r.bytes for r in rows.values())
        mean = total // len(rows) if rows else 1
        per_trip = max(1, min(_TRIP_FILES, _TRIP_BYTES // max(mean, 1)))
        bar = None
        if self.progress:
            bar = self.progress(round(len(rows) * self.sample), round(total * self.sample))
        started = time.monotonic()
        seen: set[str] = set()
        if self.store.local is not None:
            await self._local_pass(self.store.local, rows, per_trip, report, bar, seen, started)
        else:
            await self._backend_pass(rows, report, bar, seen, started)
        for ref in sorted(rows.keys() - seen):
            if self._pick(ref):
                report.rows += 1
                await self._check_row_without_file(rows[ref], report)
        report.rows += len(seen & rows.keys())
        if bar:
            bar.finish()
        figures = {"files": report.files, "bytes": report.bytes, "findings": len(report.findings)}
        await self.store.index.record_run("audit" if self.sample >= 1 else "audit_sample", figures)
        return report

    async def _local_pass(
        self,
        local: LocalBlobStore,
        rows: dict[str, ObjectRow],
        per_trip: int,
        report: AuditReport,
        bar: Progress | None,
        seen: set[str],
        started: float,
    ) -> None:
        """Every file under objects/, read in trips by one thread (on a large store with an SQLite index, by
        one process per core); suspects looked at again on the loop."""
        # The walk is listed as it goes, on the audit's thread, a trip at a time: nothing is listed ahead.
        trips = _trips(self._parts(local), per_trip)
        index = self.store.index
        database = str(index.path) if isinstance(index, Index) else None
        # --max-rate asks to spare the machine: one thread then, never every core in bursts.
        processes = _processes(len(rows)) if database and not self.max_rate else 1
        lister = ThreadPoolExecutor(1, thread_name_prefix="audit")
        spawn = multiprocessing.get_context("spawn")
        pool = (
            ProcessPoolExecutor(processes, mp_context=spawn, initializer=_worker_start)
            if processes > 1
            else None
        )
        loop = asyncio.get_running_loop()

        def trip() -> _Trip | None:
            parts = next(trips, None)
            return None if parts is None else _examine(parts, rows)

        async def elsewhere() -> _Trip | None:
            parts = await loop.run_in_executor(lister, next, trips, None)
            if parts is None or database is None:
                return None
            try:
                return await loop.run_in_executor(pool, _examine_elsewhere, parts, database)
            except (sqlite3.Error, BrokenProcessPool) as e:  # the index, or a worker killed (out of memory)
                raise StorageUnavailable(f"an audit process failed: {e or type(e).__name__}") from e

        def start() -> asyncio.Future[_Trip | None]:
            return asyncio.ensure_future(elsewhere()) if pool else loop.run_in_executor(lister, trip)

        # Two trips per worker wait while the loop looks at the one before: no worker ever idles.
        pending = deque(start() for _ in range(2 * processes))
        try:
            while pending:
                found = await pending.popleft()
                if found is None:
                    continue
                before = report.bytes
                seen.update(found.refs)
                report.files += len(found.refs)
                report.bytes += found.bytes
                for path, named in found.suspects:
                    await self._look(await asyncio.to_thread(_look_again, path, named), rows, report, seen)
                if bar:
                    bar.advance(len(found.refs) + len(found.suspects), report.bytes - before)
                await self._throttle(report.bytes, started)
                pending.append(start())
        finally:
            for waiting in pending:  # on an error, no trip after the ones under way
                waiting.cancel()
            lister.shutdown(cancel_futures=True)
            if pool:
                pool.shutdown(cancel_futures=True)

    async def _backend_pass(
        self,
        rows: dict[str, ObjectRow],
        report: AuditReport,
        bar: Progress | None,
        seen: set[str],
        started: float,
    ) -> None:
        """Every object a remote backend (S3) lists, fetched _FETCHES at a time as it is, hashed off the
        loop, and checked against its row like a local file's closer look."""
        batch: list[StoredObject] = []
        async for found in self.store.blobs.walk():
            if self._pick(str(found.ref) if found.ref else found.key):
                batch.append(found)
            if len(batch) >= _FETCHES:
                await self._backend_batch(batch, rows, report, bar, seen, started)
                batch = []
        if batch:
            await self._backend_batch(batch, rows, report, bar, seen, started)

    async def _backend_batch(
        self,
        batch: list[StoredObject],
        rows: dict[str, ObjectRow],
        report: AuditReport,
        bar: Progress | None,
        seen: set[str],
        started: float,
    ) -> None:
        looks = await asyncio.gather(*(self._fetch(found) for found in batch))
        before = report.bytes
        for look in looks:
            await self._look(look, rows, report, seen)
        if bar:
            bar.advance(len(batch), report.bytes - before)
        await self._throttle(report.bytes, started)

    async def _look(
        self, look: _Look | None, rows: dict[str, ObjectRow], report: AuditReport, seen: set[str]
    ) -> None:
        """Count a file looked at closely and check it against its row; None: gone since the listing (a GC
        sweep), and the row pass decides about its row."""
        if look is None:
            return
        row = None
        if look.file.ref is not None:
            seen.add(str(look.file.ref))
            row = rows.get(str(look.file.ref))
        report.files += 1
        report.bytes += look.file.size
        await self._check_file(look, row, report)

    async def _fetch(self, found: StoredObject) -> _Look | None:
        data = await self.store.blobs.fetch(found.key)
        if data is None:
            return None
        file = StoredFile(Path(found.key), found.ref, len(data), found.mtime)
        if found.ref is None:
            return _Look(file)
        return _Look(file, await asyncio.to_thread(found.ref.matches, data), data)

    def _parts(self, local: LocalBlobStore) -> Iterator[_Part]:
        for listing in local.list_objects():
            if self.sample >= 1.0:
                yield listing, listing.names
            else:
                yield (
                    listing,
                    [n for n in listing.names if self._pick(str(listing.ref(n) or listing.path(n)))],
                )

    async def _throttle(self, done: int, started: float) -> None:
        if self.max_rate:
            ahead = done / self.max_rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)

    # -- a file, against its row ------------------------------------------------------------------------

    async def _check_file(self, look: _Look, row: ObjectRow | None, report: AuditReport) -> None:
        f = look.file
        path = str(f.path)
        if f.ref is None:
            done = await self._quarantine_path(f.path) if self.repair else None
            report.findings.append(
                Finding(
                    Kind.STRAY_FILE, None, path, "not an object: its name or place is not a reference's", done
                )
            )
            return
        ref = f.ref
        if look.data is None:
            error = look.error
            detail = f"cannot be read: {error.strerror or error}" if error else "cannot be read"
            report.findings.append(Finding(Kind.CORRUPT, str(ref), path, detail))
            return
        if row is None:
            await self._stray(ref, f, look.data, look.intact, report)
        elif not look.intact:
            done = await self._quarantine(ref, row) if self.repair else None
            report.findings.append(
                Finding(Kind.CORRUPT, str(ref), path, "the bytes do not hash to the object's name", done)
            )
        else:
            await self._compare(ref, row, look.data, report)

    async def _compare(self, ref: Ref, row: ObjectRow, data: bytes, report: AuditReport) -> None:
        header = probe_header(data)
        found = (header.media_type, header.width, header.height) if header else None
        problems = []
        if len(data) != row.bytes:
            problems.append(f"size {len(data)} != row {row.bytes}")
        if found != (row.media_type, row.width, row.height):
            problems.append(f"header {found} != row {(row.media_type, row.width, row.height)}")
        if row.state != "ok":
            problems.append(f"row marked {row.state!r} but the bytes verify")
        if not problems:
            return
        done = await self._reindex(ref, data, row.name) if self.repair else None
        report.findings.append(Finding(Kind.METADATA_MISMATCH, str(ref), None, "; ".join(problems), done))

    async def _stray(self, ref: Ref, f: StoredFile, data: bytes, intact: bool, report: AuditReport) -> None:
        if f.mtime > self._started - self.settle:
            return  # young: most likely an admission between its link and its commit
        # The row may have been published after the snapshot: confirm under the write lock.
        if await self.store.index.published_now(str(ref)):
            return
        detail = "no row publishes it; " + ("its bytes verify" if intact else "its bytes do not verify")
        done = None
        if self.repair and intact:
            done = await self._reindex(ref, data, None)
        elif self.repair:
            found = await self.store.blobs.quarantine(ref)  # re-checks the bytes after moving them
            done = {"quarantined": "quarantined", "missing": "gone meanwhile"}.get(found, "healed meanwhile")
        report.findings.append(Finding(Kind.STRAY_FILE, str(ref), str(f.path), detail, done))

    # -- a row without a file ---------------------------------------------------------------------------

    async def _check_row_without_file(self, row: ObjectRow, report: AuditReport) -> None:
        ref = Ref.parse(row.ref)

        async def gone() -> bool:
            return await self.store.blobs.stat(ref) is None

        # Confirmed under the index's lock: a GC sweep removes the file, then the row, in one transaction.
        state = await self.store.index.confirm_missing(row.ref, gone, mark=self.repair)
        if state is None:
            return
        if state == "ok":
            done = "marked missing" if self.repair else None
            report.findings.append(Finding(Kind.MISSING, row.ref, None, "the object file is gone", done))
        else:
            report.findings.append(
                Finding(
                    Kind.STRAY_ROW,
                    row.ref,
                    None,
                    f"the row is marked {state!r}: no bytes stand behind it until the same bytes are "
                    "admitted again, or gc removes it when nothing holds it",
                )
            )

    # -- repairs ---------------------------------------------------------------------------------------

    async def _quarantine(self, ref: Ref, row: ObjectRow) -> str:
        found = await self.store.blobs.quarantine(ref)
        if found == "intact":
            return "healed meanwhile; left in place"
        await self.store.index.set_state(row, found)
        return "quarantined" if found == "quarantined" else "marked missing"

    async def _quarantine_path(self, path: Path) -> str:
        return await self.store.blobs.set_aside(str(path))

    async def _reindex(self, ref: Ref, data: bytes, name: str | None) -> str:
        """Publish a row for intact bytes, with metadata read from the bytes themselves."""
        try:
            found = await self.store.pool.inspect(data, None, _NO_LIMITS, ref.algorithm)
        except Rejected as e:
            return f"not re-indexed: {e.code}: {e.message}"
        now = time.time()
        existing = await self.store.index.get(str(ref))
        row = ObjectRow(
            str(ref),
            found.media_type,
            len(data),
            found.width,
            found.height,
            found.frames,
            name,
            existing.created_at if existing else now,
            now,
        )

        async def still_there() -> None:
            if await self.store.blobs.stat(ref) is None:
                raise FileNotFoundError(str(ref))

        try:
            await self.store.index.publish([row], still_there)
        except FileNotFoundError:
            return "gone meanwhile"
        return "re-indexed"
