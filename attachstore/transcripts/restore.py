"""Restore: every placeholder replaced by the image it stands for, read back verified from the store and
written exactly as it was, so that the result is the original transcript byte for byte."""

from __future__ import annotations

import asyncio
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import AttachstoreError
from ..service import Store
from . import inline
from .digest import Digest
from .files import Snapshot, Staged, Steps, replace, same_file
from .policy import Found
from .reports import RestoreReport, TranscriptError, outcome
from .scanner import Scanner
from .writers import refuse_writers

CHUNK = 1 << 20
_KEPT_BYTES = 32 << 20  # base64 of recently restored images kept for their next placeholder


class Sink:
    def __init__(self, file: BinaryIO | None = None) -> None:
        self.file = file
        self.hash = Digest()
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        self.hash.update(data)
        self.size += len(data)
        if self.file is not None:
            self.file.write(data)

    def hexdigest(self) -> str:
        return self.hash.hexdigest()


@dataclass
class Restored:
    placeholders: int = 0
    refs: set[str] = field(default_factory=set)
    size: int = 0
    sha256: str = ""


class Restorer:
    """Restores transcripts from one store, for one tenant. Keeps the base64 of the images it restored last,
    since a transcript names the same image many times."""

    def __init__(self, store: Store, tenant: str = "") -> None:
        self.store = store
        self.tenant = tenant
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._kept_bytes = 0

    async def restore(
        self, source: BinaryIO, sink: Sink, name: str, on_bytes: Callable[[int], None] | None = None
    ) -> Restored:
        done = Restored()
        scanner = Scanner(inline.Placeholders())
        while chunk := await asyncio.to_thread(source.read, CHUNK):
            for event in scanner.feed(chunk):
                await self._write(event, sink, done, name)
            if on_bytes is not None:
                on_bytes(len(chunk))
        for event in scanner.end():
            await self._write(event, sink, done, name)
        done.size, done.sha256 = sink.size, sink.hexdigest()
        return done

    async def _write(self, event: bytes | memoryview | Found, sink: Sink, done: Restored, name: str) -> None:
        if not isinstance(event, Found):
            sink.write(event)
            return
        found = inline.placeholder(event.raw) if event.complete else None
        if found is None:
            sink.write(event.raw)
            return
        sink.write(found.prefix)
        sink.write(await self._base64(found, name, event.line))
        done.placeholders += 1
        done.refs.add(found.ref)

    async def _base64(self, found: inline.Placeholder, name: str, line: int) -> bytes:
        key = f"{found.ref};{int(found.escaped)}"
        text = self._kept.get(key)
        if text is not None:
            self._kept.move_to_end(key)
            return text
        try:
            _, data = await self.store.read(found.ref, self.tenant)
        except AttachstoreError as e:
            raise AttachstoreError(f"{name}: line {line}: {e.message}", code=e.code, hint=e.hint) from None
        text = found.base64(data)
        if len(text) <= _KEPT_BYTES // 4:
            self._kept[key] = text
            self._kept_bytes += len(text)
            while self._kept_bytes > _KEPT_BYTES:
                _, old = self._kept.popitem(last=False)
                self._kept_bytes -= len(old)
        return text


async def restored_hash(
    restorer: Restorer, path: Path, name: str, on_bytes: Callable[[int], None] | None = None
) -> Restored:
    with await asyncio.to_thread(open, path, "rb") as source:
        return await restorer.restore(source, Sink(), name, on_bytes)


async def restore_file(
    restorer: Restorer,
    source: Path,
    output: Path | None,
    *,
    expect: str | None = None,
    assume_closed: bool = False,
    steps: Steps = lambda _step: None,
    on_bytes: Callable[[int], None] | None = None,
) -> RestoreReport:
    """Restore `source` into `output` (the same path: in place; None: check only, nothing written). With
    `expect`, the result must have that sha256, else nothing is written. The target is replaced only by a
    complete, fsynced result (files.py)."""
    report = RestoreReport(str(source), "failed", None if output is None else str(output))
    with outcome(report):
        await _restore_file(restorer, source, output, expect, assume_closed, steps, on_bytes, report)
    return report


async def _restore_file(
    restorer: Restorer,
    source: Path,
    output: Path | None,
    expect: str | None,
    assume_closed: bool,
    steps: Steps,
    on_bytes: Callable[[int], None] | None,
    report: RestoreReport,
) -> None:
    with await asyncio.to_thread(open, source, "rb") as f:
        before = Snapshot.of(os.fstat(f.fileno()))
        report.bytes_before = before.size
        if output is not None and not assume_closed:
            await asyncio.to_thread(refuse_writers, output)
        staged = None if output is None else await asyncio.to_thread(Staged, output, steps)
        try:
            done = await restorer.restore(
                f, Sink(None if staged is None else staged.file), str(source), on_bytes
            )
            report.placeholders, report.refs = done.placeholders, len(done.refs)
            report.bytes_after, report.sha256 = done.size, done.sha256
            if expect is not None and done.sha256 != expect.lower():
                raise TranscriptError(
                    f"restoring {source} gives sha256 {done.sha256}, not {expect}; nothing was written",
                    code="TRANSCRIPT_UNVERIFIED",
                )
            if staged is None or output is None:
                report.status = "checked"
                return
            if done.placeholders == 0 and await asyncio.to_thread(same_file, output, source):
                staged.discard()
                report.status = "unchanged"
                return
            await asyncio.to_thread(staged.sync)
            check_writers = not assume_closed
            await asyncio.to_thread(
                replace,
                staged,
                source,
                before,
                f.fileno(),
                report,
                check_writers=check_writers,
                action="restored",
            )
            report.status = "restored" if done.placeholders else "unchanged"
        except BaseException:
            if staged is not None:
                staged.discard()
            raise


async def placeholders_in(path: Path) -> int:
    count = 0
    scanner = Scanner(inline.Placeholders())
    with await asyncio.to_thread(open, path, "rb") as f:
        while chunk := await asyncio.to_thread(f.read, CHUNK):
            count += sum(1 for e in scanner.feed(chunk) if _is_placeholder(e))
    return count + sum(1 for e in scanner.end() if _is_placeholder(e))


def _is_placeholder(event: bytes | memoryview | Found) -> bool:
    return isinstance(event, Found) and event.complete and inline.placeholder(event.raw) is not None
