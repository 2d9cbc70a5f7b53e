"""Repair: a transcript that a provider refuses made one it takes again, every image it would refuse fitted or
turned to text in the host's own shape, the rest byte for byte; the original kept for --undo. Written with
strip's discipline (files.py): a temporary file, fsynced, checked, the host's writer looked for, renamed
last (docs/transcripts.md, "Repairing a session")."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import AttachstoreError, SessionNotFound
from ..index import SessionKey
from ..service import Store
from . import inline, repairplan
from .backup import backup_path, keep
from .candidates import session_for
from .files import Snapshot, Staged, Steps, replace, same_file
from .formats import HEAD_BYTES, Format, detect
from .judge import Judge
from .provider import Limits
from .repairreport import RepairReport
from .reports import TranscriptError, outcome
from .restore import Sink
from .shapes import edits
from .spans import NotJson, apply, parse
from .writers import refuse_writers


@dataclass(frozen=True, slots=True)
class RepairOptions:
    tenant: str = ""
    dry_run: bool = False
    assume_closed: bool = False
    backup_dir: Path | None = None
    steps: Steps = lambda _step: None


class Repairer:
    """Repairs transcripts for one model; `limits` gives its limits for a transcript's host format."""

    def __init__(self, store: Store, limits: Callable[[str], Limits], options: RepairOptions) -> None:
        self.store = store
        self.limits = limits
        self.options = options
        b64 = (store.config.admission.fit_max_bytes + 2) // 3 * 4
        self.cap = b64 + b64 // 16 + inline.PLACEHOLDER_MAX

    async def repair(
        self, source: Path, output: Path | None, *, fmt: Format | None = None, session: str | None = None
    ) -> RepairReport:
        report = RepairReport(str(source), "failed", None if output is None else str(output))
        with outcome(report):
            await self._repair(source, output, fmt, session, report)
        return report

    async def _repair(
        self, source: Path, output: Path | None, fmt: Format | None, session: str | None, report: RepairReport
    ) -> None:
        options = self.options
        with await asyncio.to_thread(open, source, "rb") as f:
            before = Snapshot.of(os.fstat(f.fileno()))
            head = await asyncio.to_thread(f.read, HEAD_BYTES)
            f.seek(0)
            fmt = fmt or detect(source, head)
            limits = self.limits(fmt.name)
            report.format, report.model, report.bytes_before = fmt.name, limits.model, before.size
            if output is not None and not options.dry_run and not options.assume_closed:
                await asyncio.to_thread(refuse_writers, output)  # a live session: refused before any work
            plan = await repairplan.scan(f, fmt, self.cap, report)
            report.sha256 = plan.sha256
            await repairplan.judge(plan, Judge(self.store, limits, options.tenant))
            repairplan.budget(plan, limits, report)
            key: SessionKey | None = None
            if not options.dry_run and output is not None:
                key = (options.tenant, session or session_for(output))
            await repairplan.act(plan, self.store, key, limits, report, lambda: self._session(key))
            if key is not None and (report.fitted or report.text):
                report.session = key[1]
            whole = source.suffix == ".json" or head.lstrip()[:1] == b"["
            if options.dry_run or output is None:
                await self._write(f, Sink(), plan, whole, report)
                report.status = "dry-run"
                return
            if not plan.changes and await asyncio.to_thread(same_file, output, source):
                report.bytes_after, report.sha256_after = before.size, plan.sha256
                report.status = "unchanged"
                return
            await self._finish(f, source, output, before, plan, whole, report)

    async def _finish(
        self,
        f: BinaryIO,
        source: Path,
        output: Path,
        before: Snapshot,
        plan: repairplan.Plan,
        whole: bool,
        report: RepairReport,
    ) -> None:
        options = self.options
        staged = await asyncio.to_thread(Staged, output, options.steps)
        try:
            await self._write(f, Sink(staged.file), plan, whole, report)
            options.steps("written")
            await asyncio.to_thread(staged.sync)
            if same_file(output, source):
                backup = backup_path(source, options.backup_dir)
                await asyncio.to_thread(keep, f.fileno(), before.size, plan.sha256, backup)
                report.backup = str(backup)
                options.steps("backed_up")
            await asyncio.to_thread(
                replace,
                staged,
                source,
                before,
                f.fileno(),
                report,
                check_writers=not options.assume_closed,
                action="repaired",
            )
        except BaseException:
            staged.discard()
            raise
        report.status = "repaired" if plan.changes else "unchanged"

    async def _write(
        self, f: BinaryIO, sink: Sink, plan: repairplan.Plan, whole: bool, report: RepairReport
    ) -> None:
        """The file again, each record that holds a change parsed and edited, every other byte copied."""
        f.seek(0)
        lines = plan.lines()
        if whole and lines:
            sink.write(self._edited(await asyncio.to_thread(f.read), plan, 1))
        else:
            number = 0
            while record := await asyncio.to_thread(f.readline):
                number += 1
                if number not in lines:
                    sink.write(record)
                    continue
                body = record.rstrip(b"\r\n")
                sink.write(self._edited(body, plan, number) + record[len(body) :])
        report.bytes_after, report.sha256_after = sink.size, sink.hexdigest()

    def _edited(self, text: bytes, plan: repairplan.Plan, line: int) -> bytes:
        try:
            root = parse(text)
        except NotJson as e:
            raise TranscriptError(
                f"line {line} holds an image to repair but is not JSON as a whole ({e}); left as it was",
                code="TRANSCRIPT_UNVERIFIED",
            ) from None
        new = apply(text, edits(text, root.strings(), plan.change_of))
        try:
            json.loads(new)
        except ValueError as e:  # the check: each record repaired is JSON still
            raise TranscriptError(
                f"line {line} would not be JSON once repaired ({e}); the file is left as it was",
                code="TRANSCRIPT_UNVERIFIED",
            ) from None
        return new

    def _session(self, key: SessionKey | None) -> asyncio.Task[None]:
        return asyncio.ensure_future(self._create(key))

    async def _create(self, key: SessionKey | None) -> None:
        if key is None:
            return
        try:
            await self.store.sessions.get(key)
        except SessionNotFound:
            await self.store.sessions.create(key, None)


async def undo(
    path: Path, *, backup_dir: Path | None = None, assume_closed: bool = False, steps: Steps = lambda _s: None
) -> RepairReport:
    """The original a repair kept put back in place of `path`, with the same discipline; the backup is
    removed once it is."""
    report = RepairReport(str(path), "failed")
    with outcome(report):
        backup = backup_path(path, backup_dir)
        report.backup = str(backup)
        if not backup.exists():
            raise AttachstoreError(
                f"no original of {path} is kept at {backup}",
                code="TRANSCRIPT_NO_BACKUP",
                hint="--backup-dir?",
            )
        await asyncio.to_thread(_put_back, path, backup, assume_closed, steps, report)
        report.status = "undone"
    return report


def _put_back(path: Path, backup: Path, assume_closed: bool, steps: Steps, report: RepairReport) -> None:
    if not assume_closed:
        refuse_writers(path)
    with open(path, "rb") as current, open(backup, "rb") as original:
        before = Snapshot.of(os.fstat(current.fileno()))
        report.bytes_before = before.size
        staged = Staged(path, steps)
        try:
            sink = Sink(staged.file)
            while chunk := original.read(1 << 20):
                sink.write(chunk)
            report.bytes_after, report.sha256_after = sink.size, sink.hexdigest()
            staged.sync()
            replace(
                staged,
                path,
                before,
                current.fileno(),
                report,
                check_writers=not assume_closed,
                action="undone",
            )
        except BaseException:
            staged.discard()
            raise
    os.unlink(backup)
