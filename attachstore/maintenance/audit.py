"""The audit: re-hash every object, check every row against its file and every file against its row
(docs/design.md, "Garbage collection and the audit"). A suspect file is read again in full before anything
is said of it, and a stray is confirmed under the index's write lock, so that an admission or a GC sweep
running beside the audit is never reported as damage."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import random
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StorageUnavailable
from ..gate import probe_header
from ..index import ObjectRow, SqliteIndex
from ..progress import Progress
from ..refs import Ref
from ..service import Store
from ..storage import IN_FLIGHT, LocalBlobStore, StoredFile, StoredObject
from . import filepass, repairs
from .findings import AuditReport, Finding, Kind

_FETCHES = 16  # objects fetched at once from a remote backend (S3): latency, not CPU, bounds it


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The audit holds a row per object for its whole run and makes none in a cycle: the collector would only
    traverse the rows again and again (docs/performance.md, "What the profiles showed"). The switch is
    process-wide: the audit runs in a command of its own, never in the daemon."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass(slots=True)
class _Run:
    rows: dict[str, ObjectRow]
    report: AuditReport
    bar: Progress | None
    started: float
    seen: set[str] = field(default_factory=set)


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
        per_trip = max(1, min(filepass.TRIP_FILES, filepass.TRIP_BYTES // max(mean, 1)))
        bar = None
        if self.progress:
            bar = self.progress(round(len(rows) * self.sample), round(total * self.sample))
        run = _Run(rows, report, bar, time.monotonic())
        if self.store.local is not None:
            await self._local_pass(self.store.local, run, per_trip)
        else:
            await self._backend_pass(run)
        for ref in sorted(rows.keys() - run.seen):
            if self._pick(ref):
                report.rows += 1
                await self._check_row_without_file(rows[ref], report)
        report.rows += len(run.seen & rows.keys())
        if bar:
            bar.finish()
        if self.sample >= 1.0:
            await self._links(report)
        figures = {"files": report.files, "bytes": report.bytes, "findings": len(report.findings)}
        await self.store.index.record_run("audit" if self.sample >= 1 else "audit_sample", figures)
        return report

    async def _local_pass(self, local: LocalBlobStore, run: _Run, per_trip: int) -> None:
        # The walk is listed as it goes, on the audit's thread, a trip at a time: nothing is listed ahead.
        trips = filepass.trips(self._parts(local), per_trip)
        index = self.store.index
        database = str(index.path) if isinstance(index, SqliteIndex) else None
        # --max-rate asks to spare the machine: one thread then, never every core in bursts.
        processes = filepass.processes(len(run.rows)) if database and not self.max_rate else 1
        lister = ThreadPoolExecutor(1, thread_name_prefix="audit")
        spawn = multiprocessing.get_context("spawn")
        pool = (
            ProcessPoolExecutor(processes, mp_context=spawn, initializer=filepass.worker_start)
            if processes > 1
            else None
        )
        loop = asyncio.get_running_loop()
        checker = self.store.checker

        def on_the_thread() -> filepass.Trip | None:
            parts = next(trips, None)
            return None if parts is None else filepass.examine(parts, run.rows, checker)

        async def in_a_process() -> filepass.Trip | None:
            parts = await loop.run_in_executor(lister, next, trips, None)
            if parts is None or database is None:
                return None
            try:
                return await loop.run_in_executor(pool, filepass.examine_in_process, parts, database, checker)
            except (sqlite3.Error, BrokenProcessPool) as e:  # the index, or a worker killed (out of memory)
                raise StorageUnavailable(f"an audit process failed: {e or type(e).__name__}") from e

        def start() -> asyncio.Future[filepass.Trip | None]:
            return (
                asyncio.ensure_future(in_a_process()) if pool else loop.run_in_executor(lister, on_the_thread)
            )

        # Two trips per worker wait while the loop looks at the one before: no worker ever idles.
        pending = deque(start() for _ in range(2 * processes))
        try:
            while pending:
                found = await pending.popleft()
                if found is None:
                    continue
                before = run.report.bytes
                run.seen.update(found.refs)
                run.report.files += len(found.refs)
                run.report.bytes += found.bytes
                for path, named in found.suspects:
                    row = run.rows.get(str(named)) if named is not None else None
                    size = row.bytes if row is not None else None
                    await self._look(await asyncio.to_thread(filepass.look_again, path, named, size), run)
                await self._advance(run, len(found.refs) + len(found.suspects), before)
                pending.append(start())
        finally:
            for waiting in pending:  # on an error, no trip after the ones under way
                waiting.cancel()
            lister.shutdown(cancel_futures=True)
            if pool:
                pool.shutdown(cancel_futures=True)

    async def _backend_pass(self, run: _Run) -> None:
        batch: list[StoredObject] = []
        async for found in self.store.blobs.walk():
            if self._pick(str(found.ref) if found.ref else found.key):
                batch.append(found)
            if len(batch) >= _FETCHES:
                await self._backend_batch(batch, run)
                batch = []
        if batch:
            await self._backend_batch(batch, run)

    async def _backend_batch(self, batch: list[StoredObject], run: _Run) -> None:
        looks = await asyncio.gather(*(self._fetch(found) for found in batch))
        before = run.report.bytes
        for look in looks:
            await self._look(look, run)
        await self._advance(run, len(batch), before)

    async def _advance(self, run: _Run, files: int, before: int) -> None:
        if run.bar:
            run.bar.advance(files, run.report.bytes - before)
        await self._throttle(run.report.bytes, run.started)

    async def _look(self, look: filepass.Look | None, run: _Run) -> None:
        """None: gone since the listing (a GC sweep); the row pass decides about its row."""
        if look is None:
            return
        row = None
        if look.file.ref is not None:
            run.seen.add(str(look.file.ref))
            row = run.rows.get(str(look.file.ref))
        run.report.files += 1
        run.report.bytes += look.file.size
        await self._check_file(look, row, run.report)

    async def _fetch(self, found: StoredObject) -> filepass.Look | None:
        data = await self.store.blobs.fetch(found.key)
        if data is None:
            return None
        file = StoredFile(Path(found.key), found.ref, len(data), found.mtime)
        if found.ref is None:
            return filepass.Look(file)
        intact = await asyncio.to_thread(found.ref.matches, data)
        return filepass.Look(file, data if intact else None)

    def _parts(self, local: LocalBlobStore) -> Iterator[filepass.Part]:
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

    async def _check_file(self, look: filepass.Look, row: ObjectRow | None, report: AuditReport) -> None:
        f = look.file
        path = str(f.path)
        if f.ref is None:
            done = await repairs.set_aside(self.store, f.path) if self.repair else None
            report.findings.append(
                Finding(
                    Kind.STRAY_FILE, None, path, "not an object: its name or place is not a reference's", done
                )
            )
            return
        ref = f.ref
        if look.error is not None:
            detail = f"cannot be read: {look.error.strerror or look.error}"
            report.findings.append(Finding(Kind.CORRUPT, str(ref), path, detail))
            return
        if row is None:
            await self._stray(ref, f, look.data, report)
        elif look.data is None:
            done = await repairs.quarantine(self.store, ref) if self.repair else None
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
        checker = self.store.checker
        if ref.algorithm == "sha256" and checker.mine(row.keyed_check):
            if not checker.holds(row.keyed_check or "", row.ref, row.bytes, row.media_type, data):
                problems.append(
                    "the keyed check does not fit the bytes as the row describes them (damaged, forged or "
                    "copied from another row in the index)"
                )
        elif ref.algorithm == "sha256" and not problems:
            # A row older than checks (or with another key's, or a check of the bytes alone): it gains
            # one, as on its first verified read.
            await self.store.index.record_check(
                str(ref), checker.of(row.ref, row.bytes, row.media_type, data)
            )
            report.checks_recorded += 1
        if not problems:
            return
        done = await repairs.reindex(self.store, ref, data, row.name) if self.repair else None
        report.findings.append(Finding(Kind.METADATA_MISMATCH, str(ref), None, "; ".join(problems), done))

    async def _stray(self, ref: Ref, f: StoredFile, data: bytes | None, report: AuditReport) -> None:
        if f.mtime > self._started - self.settle:
            return  # young: most likely an admission between its link and its commit
        # The row may have been published after the snapshot: confirm under the write lock.
        if await self.store.index.published_now(str(ref)):
            return
        detail = "no row publishes it; " + (
            "its bytes verify" if data is not None else "its bytes do not verify"
        )
        done = None
        if self.repair and data is not None:
            done = await repairs.reindex(self.store, ref, data, None)
        elif self.repair:
            found = await self.store.blobs.quarantine(ref)  # re-checks the bytes after moving them
            done = {"quarantined": "quarantined", "missing": "gone meanwhile"}.get(found, "healed meanwhile")
        report.findings.append(Finding(Kind.STRAY_FILE, str(ref), str(f.path), detail, done))

    # -- a row without a file ---------------------------------------------------------------------------

    async def _links(self, report: AuditReport) -> None:
        """Every variant link against its keyed check. A link whose check does not hold (damaged, or forged
        to send another object in place of its source's variant) is a finding, and --repair removes it: the
        daemon would not follow it anyway, and derives the variant again. A link without a check of this key
        (older than link checks) is counted only: the daemon derives it again on first use."""
        checker = self.store.checker
        for link in await self.store.index.links():
            report.links += 1
            if not checker.mine(link.check):
                report.links_unchecked += 1
                continue
            if checker.link_holds(link.check, link.source, link.spec, link.variant):
                continue
            done = None
            if self.repair:
                removed = await self.store.index.unlink(link)
                done = "removed the link (the variant is derived again when next wanted)" if removed else None
                done = done or "relinked meanwhile: left"
            detail = (
                f"the link of {link.spec!r} to {link.variant} does not fit its keyed check (damaged or "
                "forged in the index): it is not followed"
            )
            report.findings.append(Finding(Kind.LINK_MISMATCH, link.source, None, detail, done))

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
