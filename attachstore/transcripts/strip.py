"""Strip: every inline image of a transcript admitted, exactly as it is, and replaced by its placeholder; the
rest untouched byte for byte. The new version is checked to restore to the original's exact bytes before it
takes the original's place (files.py), and the transcript's session holds every ref it names."""

from __future__ import annotations

import asyncio
import functools
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import blake3

from ..errors import Rejected, SessionNotFound
from ..index import SessionKey
from ..refs import Ref
from ..service import Store, Upload
from . import inline
from .candidates import session_for
from .digest import Digest
from .files import Snapshot, Staged, Steps, replace, same_file
from .formats import HOST_KEYS, Format, detect, read_head, taking
from .policy import Event, Found
from .reports import Report, Tally, TranscriptError, outcome
from .restore import CHUNK, Restorer, Sink, restored_hash
from .scanner import Scanner
from .writers import refuse_writers

_WAITING_BYTES = 16 << 20  # what may wait behind an admission still running, before reading stops
_OUTCOMES_KEPT = 100_000  # outcomes of distinct images remembered for the rest of the run
_HOLDS_PER_CALL = 1000
# Why a wanted string was cut short, as the code it is counted under.
_CUT = {"cap": "IMAGE_TOO_LARGE", "torn": "INVALID_IMAGE", "escape": "INVALID_IMAGE_BASE64"}


@dataclass(frozen=True, slots=True)
class Options:
    tenant: str = ""
    dry_run: bool = False
    assume_closed: bool = False  # do not look for processes that have the file open for writing
    concurrency: int = 16  # admissions at once (each mostly waits for its fsyncs)
    steps: Steps = lambda _step: None  # called after each step of the replacement (crash tests)
    on_bytes: Callable[[int], None] | None = None  # progress: bytes read


@dataclass(frozen=True, slots=True)
class _ImageOutcome:
    replacement: bytes | None  # the placeholder; None: the image stays inline
    ref: str | None
    code: str | None  # why it stays inline
    session: SessionKey | None  # the session that holds it since its admission


class _InOrder:
    """The stripped text, written in input order while admissions finish in any order: an image's slot waits
    for its admission, and what follows it waits behind it, up to a bound."""

    def __init__(self, sink: Sink, written_for: Callable[[_ImageOutcome, bytes, bytes], bytes]) -> None:
        self.sink = sink
        self.written_for = written_for
        self.queue: deque[
            tuple[asyncio.Future[_ImageOutcome] | _ImageOutcome | None, bytes | memoryview, bytes]
        ] = deque()
        self.waiting = 0  # bytes queued
        self.running = 0  # admissions queued and not done

    def plain(self, data: bytes | memoryview) -> None:
        if not self.queue:
            self.sink.write(data)
            return
        data = bytes(data)  # a view would keep its whole chunk alive while it waits
        self.queue.append((None, data, b""))
        self.waiting += len(data)

    def image(self, job: asyncio.Future[_ImageOutcome] | _ImageOutcome, raw: bytes, key: bytes) -> None:
        if not self.queue and isinstance(job, _ImageOutcome):
            self.sink.write(self.written_for(job, raw, key))
            return
        self.queue.append((job, raw, key))
        self.waiting += len(raw)
        self.running += isinstance(job, asyncio.Future)

    def drain(self) -> None:
        queue = self.queue
        while queue:
            job, data, key = queue[0]
            if isinstance(job, asyncio.Future):
                if not job.done():
                    return
                self.running -= 1
                job = job.result()
            queue.popleft()
            self.waiting -= len(data)
            self.sink.write(data if job is None else self.written_for(job, bytes(data), key))

    async def relieve(self, depth: int) -> None:
        self.drain()
        while self.queue and (self.running > depth or self.waiting > _WAITING_BYTES):
            await self._oldest()

    async def close(self) -> None:
        self.drain()
        while self.queue:
            await self._oldest()

    async def _oldest(self) -> None:
        oldest = self.queue[0][0]  # after drain(), the queue starts with an admission still running
        assert isinstance(oldest, asyncio.Future)
        await asyncio.wait([oldest])
        self.drain()


class Stripper:
    """Strips transcripts into one store, for one tenant; a run over many files shares what it learnt of
    each distinct image (admitted once, then only held)."""

    def __init__(self, store: Store, options: Options) -> None:
        self.store = store
        self.options = options
        self.restorer = Restorer(store, options.tenant)
        self.total = Tally()
        self._outcomes: OrderedDict[bytes, asyncio.Task[_ImageOutcome] | _ImageOutcome] = OrderedDict()
        self._sessions: dict[SessionKey, asyncio.Future[None]] = {}
        limits = store.config.limits
        b64 = (limits.max_image_bytes + 2) // 3 * 4
        self.cap = b64 + b64 // 16 + inline.PLACEHOLDER_MAX  # a data URL's prefix, '\/' escapes

    async def close(self) -> None:
        running = [t for t in self._outcomes.values() if isinstance(t, asyncio.Task)]
        await asyncio.gather(*running, return_exceptions=True)

    async def strip(
        self,
        source: Path,
        output: Path | None,
        *,
        fmt: Format | None = None,
        session: str | None = None,
    ) -> Report:
        report = Report(str(source), "failed", str(output) if output is not None else None)
        with outcome(report):
            await self._strip(source, output, fmt, session, report)
        self.total.add(report.tally)
        return report

    async def _strip(
        self, source: Path, output: Path | None, fmt: Format | None, session: str | None, report: Report
    ) -> None:
        options = self.options
        with await asyncio.to_thread(open, source, "rb") as f:
            before = Snapshot.of(os.fstat(f.fileno()))
            if fmt is None:
                fmt = detect(source, await asyncio.to_thread(read_head, f))
                f.seek(0)
            report.format, report.bytes_before = fmt.name, before.size
            key = None
            if not options.dry_run:
                if output is None:
                    raise ValueError("strip: an output path, or dry_run")
                key = (options.tenant, session or session_for(output))
            staged = None
            if not options.dry_run and output is not None:
                if (
                    not options.assume_closed
                ):  # a live Codex session: refused before any work, and again at the end
                    await asyncio.to_thread(refuse_writers, output)
                staged = await asyncio.to_thread(Staged, output, options.steps)
            try:
                held: set[str] = set()
                sink = Sink(staged.file if staged else None)
                report.sha256 = await self._pass(f, sink, fmt, key, report, held)
                if staged is None or output is None:
                    report.status = "dry-run"
                    return
                options.steps("written")
                await self._finish(source, f.fileno(), output, staged, before, key, report, held)
            except BaseException:
                if staged is not None:
                    staged.discard()
                raise

    async def _finish(
        self,
        source: Path,
        source_fd: int,
        output: Path,
        staged: Staged,
        before: Snapshot,
        key: SessionKey | None,
        report: Report,
        held: set[str],
    ) -> None:
        tally = report.tally
        if tally.replaced == 0 and await asyncio.to_thread(same_file, output, source):
            staged.discard()
            report.status = "unchanged"
            return
        if held and key is not None:  # refs admitted for other files' sessions, and an earlier strip's
            await self._session(key)
            ordered = sorted(held)
            for i in range(0, len(ordered), _HOLDS_PER_CALL):
                await self.store.sessions.hold(key, ordered[i : i + _HOLDS_PER_CALL])
        self.options.steps("held")
        await asyncio.to_thread(staged.sync)
        if report.sha256_after != report.sha256:  # it differs: restoring it must give the original back
            # With placeholders of an earlier strip, the original is what restoring the input gives.
            expected = report.sha256
            if tally.already:
                expected = (await restored_hash(self.restorer, source, str(source))).sha256
            restored = await restored_hash(
                self.restorer, staged.path, str(staged.path), self.options.on_bytes
            )
            if restored.sha256 != expected:
                raise TranscriptError(
                    f"restoring the stripped {source} does not give the original bytes; it is left as it was",
                    code="TRANSCRIPT_UNVERIFIED",
                    hint="a string of the transcript reads as a placeholder; report this",
                )
        self.options.steps("verified")
        if key is not None and (tally.replaced or held):
            report.session = key[1]
        check_writers = not self.options.assume_closed
        await asyncio.to_thread(
            replace, staged, source, before, source_fd, report, check_writers=check_writers, action="stripped"
        )
        report.status = "stripped" if tally.replaced else "unchanged"

    async def _session(self, key: SessionKey) -> None:
        made = self._sessions.get(key)
        if made is None or (made.done() and (made.cancelled() or made.exception() is not None)):
            made = self._sessions[key] = asyncio.ensure_future(self._create(key))
        await asyncio.shield(made)

    async def _create(self, key: SessionKey) -> None:
        try:
            await self.store.sessions.get(key)
        except SessionNotFound:
            await self.store.sessions.create(key, None)

    async def _pass(
        self,
        source: BinaryIO,
        sink: Sink,
        fmt: Format,
        key: SessionKey | None,
        report: Report,
        held: set[str],
    ) -> str:
        tally = report.tally
        read = Digest()

        def written_for(outcome: _ImageOutcome, raw: bytes, image_key: bytes) -> bytes:
            if outcome.replacement is None:
                tally.refuse(outcome.code or "INVALID_IMAGE", image_key)
                return raw
            tally.replaced += 1
            if outcome.ref is not None:
                tally.stored.add(outcome.ref)
                if outcome.session != key:
                    held.add(outcome.ref)
            return outcome.replacement

        ordered = _InOrder(sink, written_for)
        finder = inline.Finder(fmt.keys, self.cap, HOST_KEYS)
        scanner = Scanner(finder)
        depth = max(1, self.options.concurrency)
        while chunk := await asyncio.to_thread(source.read, CHUNK):
            read.update(chunk)
            for event in scanner.feed(chunk):
                self._event(event, ordered, key, tally, held)
            await ordered.relieve(depth)
            if self.options.on_bytes is not None:
                self.options.on_bytes(len(chunk))
        for event in scanner.end():
            self._event(event, ordered, key, tally, held)
        await ordered.close()
        if finder.unclaimed:
            tally.unclaimed = sum(finder.unclaimed.values())
            report.formats = taking(finder.unclaimed)
        report.bytes_after = sink.size
        report.sha256_after = sink.hexdigest()
        return read.hexdigest()

    def _event(
        self, event: Event, ordered: _InOrder, key: SessionKey | None, tally: Tally, held: set[str]
    ) -> None:
        if not isinstance(event, Found):
            ordered.plain(event)
            return
        raw = event.raw
        if raw.startswith(inline.SCHEME):
            found = inline.placeholder(raw) if event.complete else None
            if found is not None:
                tally.already += 1
                held.add(found.ref)
            ordered.plain(raw)
            return
        image_key = blake3.blake3(raw).digest()  # the same text, the same outcome
        tally.found += 1
        if not event.complete:
            tally.refuse(_CUT[event.reason or "torn"], image_key)
            ordered.plain(raw)
            return
        outcome = self._outcomes.get(image_key)
        if outcome is None:
            image = inline.image(raw)
            if isinstance(image, inline.Unusable):
                outcome = _ImageOutcome(None, None, image.code, None)
            else:
                task = asyncio.create_task(self._admit(image, key))
                task.add_done_callback(functools.partial(self._done, image_key))
                outcome = task
            self._remember(image_key, outcome)
        else:
            self._outcomes.move_to_end(image_key)
        ordered.image(outcome, raw, image_key)

    def _remember(self, image_key: bytes, outcome: asyncio.Task[_ImageOutcome] | _ImageOutcome) -> None:
        self._outcomes[image_key] = outcome
        while len(self._outcomes) > _OUTCOMES_KEPT:
            oldest, value = next(iter(self._outcomes.items()))
            if isinstance(value, asyncio.Task) and not value.done():
                break
            del self._outcomes[oldest]

    def _done(self, image_key: bytes, task: asyncio.Task[_ImageOutcome]) -> None:
        """A finished admission is remembered by its outcome; one that failed is forgotten (and raises in the
        file that waits for it)."""
        if self._outcomes.get(image_key) is not task:
            return
        if task.cancelled() or task.exception() is not None:
            del self._outcomes[image_key]
        else:
            self._outcomes[image_key] = task.result()

    async def _admit(self, image: inline.Inline, key: SessionKey | None) -> _ImageOutcome:
        upload = Upload.of_bytes(image.data, image.declared)
        tenant = self.options.tenant
        if key is None:  # a dry run
            [verdict] = await self.store.check([upload], "user", tenant=tenant, exact=True)
            if verdict is not None:
                return _ImageOutcome(None, None, verdict.code, None)
            ref = str(Ref.of(self.store.config.hash, image.data))
            return _ImageOutcome(image.placeholder(ref), ref, None, None)
        await self._session(key)
        try:
            result = await self.store.admit([upload], "user", session=key[1], tenant=tenant, exact=True)
        except Rejected as e:
            return _ImageOutcome(None, None, e.code, key)
        ref = result.attachments[0].ref
        return _ImageOutcome(image.placeholder(ref), ref, None, key)
