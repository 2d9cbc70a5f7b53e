"""The audit: re-hash every object, check every row against its file and every file against its row.

Findings are collected, typed, and the audit keeps going after each one. Suspected findings (a row without a
file, a file without a row) are confirmed under the index's write lock, so that an admission or a GC sweep
running beside the audit is never reported as damage. `repair` acts on each confirmed finding.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from .blobstore import IN_FLIGHT, StoredFile
from .config import Limits
from .errors import Rejected
from .index import ObjectRow
from .probe import probe_header
from .progress import Progress
from .refs import Ref
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


_BATCH = 128  # files per trip to a thread
_THREADS = 2


@dataclass(frozen=True, slots=True)
class _Look:
    """One file, read, hashed and probed off the event loop. Clean files come back without their bytes."""

    file: StoredFile
    clean: bool
    intact: bool = False
    data: bytes | None = None
    error: OSError | None = None


def _examine(files: list[StoredFile], rows: dict[str, ObjectRow]) -> list[_Look]:
    looks = []
    for f in files:
        if f.ref is None:
            looks.append(_Look(f, clean=False))
            continue
        try:
            data = f.path.read_bytes()
        except FileNotFoundError:
            looks.append(_Look(f, clean=False))
            continue
        except OSError as e:
            looks.append(_Look(f, clean=False, error=e))
            continue
        intact = f.ref.matches(data)
        row = rows.get(str(f.ref))
        header = probe_header(data) if intact and row is not None else None
        clean = (
            row is not None
            and intact
            and row.state == "ok"
            and len(data) == row.bytes
            and header is not None
            and (header.media_type, header.width, header.height) == (row.media_type, row.width, row.height)
        )
        looks.append(_Look(f, clean, intact, None if clean else data))
    return looks


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
        self._started = time.time()
        report = AuditReport(sample=self.sample)
        rows = {r.ref: r for r in await self.store.index.rows()}
        files = await asyncio.to_thread(lambda: list(self.store.blobs.walk_objects()))
        files = [f for f in files if self._pick(str(f.ref) if f.ref else str(f.path))]
        bar = self.progress(len(files), sum(f.size for f in files)) if self.progress else None
        started = time.monotonic()
        seen: set[str] = set()
        # Files are read, hashed and probed in batches on a few threads (the hash releases the GIL); only
        # what looks wrong comes back with its bytes for a closer look, confirmed under the index lock.
        batches = [files[i : i + _BATCH] for i in range(0, len(files), _BATCH)]
        with ThreadPoolExecutor(_THREADS, thread_name_prefix="audit") as pool:
            loop = asyncio.get_running_loop()
            pending = [loop.run_in_executor(pool, _examine, b, rows) for b in batches[:_THREADS]]
            for i in range(len(batches)):
                looks = await pending[i]
                if i + _THREADS < len(batches):
                    pending.append(loop.run_in_executor(pool, _examine, batches[i + _THREADS], rows))
                for look in looks:
                    f = look.file
                    if f.ref is not None:
                        seen.add(str(f.ref))
                    if not look.clean:
                        await self._check_file(look, rows.get(str(f.ref)) if f.ref else None, report)
                    report.files += 1
                    report.bytes += f.size
                    if bar:
                        bar.advance(1, f.size)
                await self._throttle(report.bytes, started)
        for ref, row in rows.items():
            if ref in seen or not self._pick(ref):
                continue
            report.rows += 1
            await self._check_row_without_file(row, report)
        report.rows += len(seen & rows.keys())
        if bar:
            bar.finish()
        figures = {"files": report.files, "bytes": report.bytes, "findings": len(report.findings)}
        await self.store.index.record_run("audit" if self.sample >= 1 else "audit_sample", figures)
        return report

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
            if look.error is not None:
                detail = f"cannot be read: {look.error.strerror or look.error}"
                report.findings.append(Finding(Kind.CORRUPT, str(ref), path, detail))
            return  # else removed since the walk (GC): the row pass decides about its row
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
        async with (
            self.store.index.write() as db,
            db.execute("SELECT 1 FROM objects WHERE ref = ?", (str(ref),)) as cur,
        ):
            published = await cur.fetchone() is not None
        if published:
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
        async with self.store.index.write() as db:
            # Confirm under the lock: a GC sweep removes the file, then the row, in one transaction.
            async with db.execute("SELECT state, lease_at FROM objects WHERE ref = ?", (row.ref,)) as cur:
                now = await cur.fetchone()
            if now is None or self.store.blobs.stat(ref) is not None:
                return
            state = now[0]
            if state == "ok":
                done = None
                if self.repair:
                    await db.execute("UPDATE objects SET state = 'missing' WHERE ref = ?", (row.ref,))
                    done = "marked missing"
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
        target = self.store.blobs.quarantine_dir / f"stray-{path.name}.{time.time_ns()}"

        def move() -> None:
            os.rename(path, target)
            self.store.blobs.ops.fsync_dir(path.parent)
            self.store.blobs.ops.fsync_dir(target.parent)

        try:
            await asyncio.to_thread(move)
        except FileNotFoundError:
            return "gone meanwhile"
        return f"moved to {target}"

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
            if await asyncio.to_thread(self.store.blobs.stat, ref) is None:
                raise FileNotFoundError(str(ref))

        try:
            await self.store.index.publish([row], still_there)
        except FileNotFoundError:
            return "gone meanwhile"
        return "re-indexed"
