"""What the stages of a migration (the copy, the verification) share: the report both write to, its
findings, the stage's view of source and target, and running work concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ..errors import Corrupt, Missing
from ..index import ObjectRow
from ..progress import Progress
from ..refs import Ref
from ..service import Store
from ..storage import LocalBlobStore
from .source import Snapshot

MakeProgress = Callable[[str, int, int], Progress]


@dataclass(frozen=True, slots=True)
class Finding:
    # failed: corrupt, missing; not_copied: quarantined, missing, hold, variant;
    # differences: object, bytes, grant, session, holds, variant
    kind: str
    what: str  # a ref, a session as tenant/id, a variant link as "source spec"
    detail: str


def read_failure(ref: str, e: Corrupt | Missing) -> Finding:
    if isinstance(e, Corrupt):
        return Finding("corrupt", ref, "the source's bytes do not match the ref (see `attachstore audit`)")
    return Finding("missing", ref, "the source has no object file (see `attachstore audit`)")


async def source_failure(source: LocalBlobStore, row: ObjectRow) -> Finding | None:
    try:
        await source.read(Ref.parse(row.ref), row.bytes)
    except (Corrupt, Missing) as e:
        return read_failure(row.ref, e)
    return None


class Stage:
    def __init__(
        self, snapshot: Snapshot, source: LocalBlobStore, store: Store, report: Report, progress: MakeProgress
    ) -> None:
        self.snapshot = snapshot
        self.source = source
        self.store = store
        self.report = report
        self.progress = progress


@dataclass
class Report:
    objects: int = 0  # copied by this run
    bytes: int = 0
    skipped: int = 0  # already in the target: row, grants and object in place
    grants: int = 0  # grants published for objects already in the target
    sessions: int = 0  # created by this run
    holds: int = 0  # added by this run
    variants: int = 0  # links made by this run
    runs: int = 0  # gc and audit runs recorded by this run
    failed: list[Finding] = field(default_factory=list)  # source objects that failed verification
    # rows the source itself marks unreadable, and the holds and variant links that need them
    not_copied: list[Finding] = field(default_factory=list)
    verified: int = 0  # objects read back from the target, verified
    verified_bytes: int = 0
    healed: int = 0  # target objects found damaged or missing by the verification and written again
    target_only: int = 0  # target rows the source does not have (left alone)
    differences: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.failed and not self.differences


async def run_all(work: Iterable[Awaitable[None]]) -> None:
    """Run concurrently; on the first failure cancel the others, wait for them, and raise it."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
