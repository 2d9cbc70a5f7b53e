"""Reference-aware garbage collection (SPEC section 7): plan, then execute. What is garbage, and why a sweep
never loses a ref that was answered: docs/operations.md, "Garbage collection" and "Why gc is safe beside a
live daemon". The order that keeps it so: re-check under the index's write lock, remove the file and make
that durable, and only then delete the row."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..index import ObjectRow, SessionRow
from ..progress import Progress
from ..refs import MAX_REF_LENGTH
from ..service import Store
from ..storage import IN_FLIGHT, StoredFile, StoredObject

REF_BYTES = re.compile(rb"(?:sha256|blake3):[0-9a-f]{64}")
_CHUNK = 1 << 20
_BATCH = 16  # objects per sweep transaction: a crash mid-batch leaves at most this many rows without files


def scan_roots(paths: Iterable[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        files = [path] if not path.is_dir() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            with open(file, "rb") as f:
                tail = b""
                while chunk := f.read(_CHUNK):
                    window = tail + chunk
                    found.update(m.decode() for m in REF_BYTES.findall(window))
                    tail = window[-MAX_REF_LENGTH:]
    return found


@dataclass(frozen=True)
class GcPlan:
    cutoff: float
    grace: float
    garbage: list[ObjectRow]
    rooted: int  # unheld objects past their grace that a root names
    held: int  # by a session, or as a variant a source links to
    young: int  # unheld, but within the grace period
    staging: list[StoredFile]  # the local backend's only: S3 has no staging area
    unindexed: list[StoredObject]
    now: float
    # Sessions whose lifetime ran out before `now`: released first; the counts above already see them gone.
    expired: list[SessionRow]

    @property
    def garbage_bytes(self) -> int:
        return sum(r.bytes for r in self.garbage)


@dataclass
class GcResult:
    collected: list[str] = field(default_factory=list)
    collected_bytes: int = 0
    skipped: int = 0  # renewed, held, or collected by another gc, between the plan and the sweep
    sessions_released: int = 0  # expired sessions released (one renewed since the plan stays)
    staging_removed: int = 0
    unindexed_removed: int = 0
    empty_dirs_removed: int = 0


async def plan(
    store: Store,
    grace: float,
    roots: Sequence[Path] = (),
    now: float | None = None,
    progress: Callable[[int, int], Progress] | None = None,
) -> GcPlan:
    now = time.time() if now is None else now
    cutoff = now - grace
    named = await asyncio.to_thread(scan_roots, roots) if roots else set()
    expired = await store.sessions.expired(now)
    candidates = await store.index.collectible(cutoff)
    garbage = [r for r in candidates if r.ref not in named]
    held, young = await store.index.held_and_recent(cutoff, now)
    indexed = await store.index.refs()
    bar = progress(*await store.index.stats()) if progress else None

    # Files without a row have no lease; their age is all there is, and a young one may be in flight.
    file_cutoff = min(cutoff, now - IN_FLIGHT)

    unindexed = []
    async for f in store.blobs.walk():
        if bar:
            bar.advance(1, f.size)
        if (
            f.ref is not None
            and str(f.ref) not in indexed
            and f.mtime < file_cutoff
            and str(f.ref) not in named
        ):
            unindexed.append(f)
    if bar:
        bar.finish()
    staging: list[StoredFile] = []
    if store.local is not None:
        local = store.local
        staging = await asyncio.to_thread(lambda: [f for f in local.walk_staging() if f.mtime < file_cutoff])
    rooted = len(candidates) - len(garbage)
    return GcPlan(cutoff, grace, garbage, rooted, held, young, staging, unindexed, now, expired)


async def execute(store: Store, gc_plan: GcPlan, progress: Progress | None = None) -> GcResult:
    """Sweep what the plan found. Runs inside the index's `sweeping()` (on PostgreSQL: one gc at a time
    across every node); each removal is re-checked under the index's locks, whatever the plan said."""
    async with store.index.sweeping():
        return await _sweep(store, gc_plan, progress)


async def _sweep(store: Store, gc_plan: GcPlan, progress: Progress | None) -> GcResult:
    result = GcResult()
    sizes = {r.ref: r.bytes for r in gc_plan.garbage}
    # Expired sessions first, each under its row's lock: their holds go, their objects' leases are renewed to
    # when they expired, and only then are the plan's candidates re-checked and swept.
    if gc_plan.expired:
        result.sessions_released = len(await store.sessions.release_expired(gc_plan.now))

    refs = [r.ref for r in gc_plan.garbage]
    for start in range(0, len(refs), _BATCH):
        batch = refs[start : start + _BATCH]
        # Variants go with their source: they are in `collected`, not in the plan.
        collected = await store.index.collect(batch, gc_plan.cutoff, store.discard_object)
        result.collected += [ref for ref, _ in collected]
        result.collected_bytes += sum(size for _, size in collected)
        result.skipped += len(set(batch) - {ref for ref, _ in collected})
        if progress:
            progress.advance(len(batch), sum(sizes[r] for r in batch))

    # Unindexed objects: removed under the index's locks, and only while still no row publishes them.
    strays = list(dict.fromkeys(str(f.ref) for f in gc_plan.unindexed if f.ref is not None))
    removed: list[str] = []

    async def remove_stray(ref: str) -> None:
        await store.discard_object(ref)
        removed.append(ref)

    for start in range(0, len(strays), _BATCH):
        await store.index.discard_unpublished(strays[start : start + _BATCH], remove_stray)
    result.unindexed_removed = len(removed)

    if store.local is not None:
        local = store.local

        def sweep_files() -> tuple[int, int]:
            staging = 0
            for f in gc_plan.staging:
                if os.path.exists(f.path):
                    local.remove_file(f.path)
                    staging += 1
            return staging, local.remove_empty_buckets()

        result.staging_removed, result.empty_dirs_removed = await asyncio.to_thread(sweep_files)
    if progress:
        progress.finish()
    figures = {"collected": len(result.collected), "collected_bytes": result.collected_bytes}
    figures |= {"skipped": result.skipped, "sessions_released": result.sessions_released}
    await store.index.record_run("gc", figures)
    return result
