"""Admission (SPEC sections 4 and 5): validate every member, store every member, publish all rows in one
transaction; a rejection raises for `user`/`command` and degrades into diagnostics for `tool`/`mcp`
(docs/design.md, "Admission, step by step")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import gate
from ..config import Config
from ..errors import AttachstoreError, InvalidRequest, Rejected
from ..gate import DecodePool
from ..index import Hold, Index, ObjectRow
from ..metrics import Metrics
from ..refs import Checker, Ref
from ..storage import Put
from ..vocabulary import SOURCES
from . import policy
from .model import ImageRef, Upload
from .names import display_name, renamed
from .policy import Diagnostic
from .publish import Check, Publisher
from .sessions import Sessions
from .slots import Slot, Slots
from .validation import Admitted, Validator


@dataclass(frozen=True, slots=True)
class Admission:
    attachments: list[ImageRef]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    text: str | None = None

    @property
    def degraded(self) -> bool:
        return bool(self.diagnostics)


def _degraded(
    uploads: Sequence[Upload],
    names: Sequence[str | None],
    batch_error: Rejected | None,
    verdicts: Sequence[Admitted | Rejected],
) -> Admission:
    diagnostics = []
    for i, (u, name) in enumerate(zip(uploads, names, strict=True)):
        verdict: Admitted | Rejected | None = batch_error or (verdicts[i] if i < len(verdicts) else None)
        if isinstance(verdict, Admitted):
            diagnostics.append(Diagnostic(i, verdict.inspection.media_type, name, None, "valid"))
        elif isinstance(verdict, Rejected):
            declared = None if u.media_type is None else gate.canonical_type(u.media_type)
            diagnostics.append(Diagnostic(i, declared, name, verdict.code, verdict.message, verdict.hint))
    return Admission([], diagnostics, policy.model_text(diagnostics))


def _refused(
    uploads: Sequence[Upload],
    names: Sequence[str | None],
    batch_error: Rejected | None,
    verdicts: Sequence[Admitted | Rejected],
    soft: bool,
) -> Admission:
    if soft:
        return _degraded(uploads, names, batch_error, verdicts)
    if batch_error is not None:
        raise batch_error
    i, first = next((i, v) for i, v in enumerate(verdicts) if isinstance(v, Rejected))
    raise first.at(i)


def _answer(a: Admitted, name: str | None) -> ImageRef:
    i = a.inspection
    return ImageRef(str(a.ref), i.media_type, len(a.data), i.width, i.height, i.frames, name, a.normalized)


class Admissions:
    def __init__(
        self,
        config: Config,
        index: Index,
        pool: DecodePool,
        sessions: Sessions,
        publisher: Publisher,
        metrics: Metrics,
        checker: Checker,
    ) -> None:
        self.config = config
        self.checker = checker
        self.index = index
        self.pool = pool
        self.sessions = sessions
        self.publisher = publisher
        self.metrics = metrics
        self.slots = Slots(config, metrics)
        self.validator = Validator(config, sessions.routes, pool, checker)
        self._storing: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Wait for the admissions whose callers were cancelled while they stored (see
        `_store_to_the_end`)."""
        await asyncio.gather(*self._storing, return_exceptions=True)

    async def admit(
        self,
        uploads: Sequence[Upload],
        source: str | None,
        *,
        route: str | None = None,
        session: str | None = None,
        tenant: str = "",
        slot: Slot | None = None,
        exact: bool = False,
    ) -> Admission:
        """`slot`: the place an edge took before it read the uploads. `exact`: every image stored byte for
        byte, whatever `oversize` and `strip_metadata` say (a transcript restore must give back the very
        bytes)."""
        if not source:  # the same words whether JSON or a form left it out
            raise InvalidRequest(
                f"source: missing; say where the images come from: one of {', '.join(SOURCES)}"
            )
        if source not in SOURCES:
            raise InvalidRequest(f"source: must be one of {', '.join(SOURCES)}, not {source[:40]!r}")
        if not uploads:
            raise InvalidRequest("images: at least one image is required")
        if slot is None:
            with self.slots.take(tenant, source) as taken:
                return await self.admit(
                    uploads, source, route=route, session=session, tenant=tenant, slot=taken, exact=exact
                )
        result = "admitted"
        try:
            admission = await self._admit(uploads, source, route, session, tenant, exact)
            if admission.degraded:
                result = next((d.code for d in admission.diagnostics if d.code), "degraded")
            return admission
        except AttachstoreError as e:
            result = e.code
            raise
        except asyncio.CancelledError:  # its client left, or shutdown cut it off
            result = "cancelled"
            raise
        finally:
            self.metrics.admissions.labels(source, result).inc()

    async def check(
        self,
        uploads: Sequence[Upload],
        source: str,
        *,
        route: str | None = None,
        tenant: str = "",
        exact: bool = False,
    ) -> list[Rejected | None]:
        """The verdict `admit` would reach, with nothing stored (dry runs); None for an image that would be
        admitted."""
        if source not in SOURCES:
            raise InvalidRequest(f"source: must be one of {', '.join(SOURCES)}, not {source!r}")
        if not uploads:
            raise InvalidRequest("images: at least one image is required")
        with self.slots.take(tenant, source):
            batch_error, verdicts = await self.validator.validate(
                uploads, source, route, every_image=True, tenant=tenant, exact=exact
            )
        if batch_error is not None:
            return [batch_error] * len(uploads)
        return [v if isinstance(v, Rejected) else None for v in verdicts]

    async def _admit(
        self,
        uploads: Sequence[Upload],
        source: str,
        route: str | None,
        session: str | None,
        tenant: str,
        exact: bool,
    ) -> Admission:
        hold = session_route = None
        if session is not None:
            found = await self.sessions.get((tenant, session))
            route = route if route is not None else found.route
            session_route = found.route
            hold = Hold((tenant, session), self.sessions.guard_images, everything=self.config.is_open)
        names = [display_name(u.name) for u in uploads]
        soft = source in policy.SOFT_SOURCES
        batch_error, verdicts = await self.validator.validate(
            uploads,
            source,
            route,
            every_image=soft,
            session=(session, session_route),
            tenant=tenant,
            exact=exact,
        )
        if batch_error is not None or any(isinstance(v, Rejected) for v in verdicts):
            return _refused(uploads, names, batch_error, verdicts, soft)
        admitted = [v for v in verdicts if isinstance(v, Admitted)]
        # A normalized image's name takes the extension of its new type: 'photo.png' stored as a JPEG is
        # 'photo.jpg'.
        names = [
            renamed(n, a.inspection.media_type) if a.normalized else n
            for n, a in zip(names, admitted, strict=True)
        ]
        try:
            await self._store_to_the_end(admitted, names, hold, tenant, source)
        except Rejected as e:  # the session's route turned text-only meanwhile (checked under the lock)
            return _refused(uploads, names, e, [], soft)
        return Admission([_answer(a, name) for a, name in zip(admitted, names, strict=True)])

    async def _store_to_the_end(
        self,
        admitted: Sequence[Admitted],
        names: Sequence[str | None],
        hold: Hold | None,
        tenant: str,
        source: str,
    ) -> None:
        """Finished even when cancelled (keeping its place): its files are written in threads that cannot be
        stopped, and cut off it would leave unindexed objects behind (docs/design.md, "Failure cleanup");
        cancelled again (shutdown), it leaves and Store.close waits."""
        storing = asyncio.create_task(self._store(admitted, names, hold, tenant, source))
        self._storing.add(storing)
        storing.add_done_callback(self._stored)
        try:
            await asyncio.shield(storing)
        except asyncio.CancelledError:
            await asyncio.wait([storing])
            raise

    async def _store(
        self,
        admitted: Sequence[Admitted],
        names: Sequence[str | None],
        hold: Hold | None,
        tenant: str,
        source: str,
    ) -> None:
        unique: dict[Ref, Admitted] = {}
        first_name: dict[Ref, str | None] = {}
        for a, name in zip(admitted, names, strict=True):
            unique.setdefault(a.ref, a)
            if first_name.get(a.ref) is None:
                first_name[a.ref] = name
        members = list(unique.values())

        async def publish(existing: dict[str, ObjectRow], now: float, puts: list[Put], check: Check) -> None:
            self.metrics.dedup_hits.inc(sum(1 for p in puts if p is Put.EXISTED))
            # A heal: damaged bytes replaced, or a file written again for an object the index already had.
            healed = [
                p is Put.HEALED or (p is Put.CREATED and str(a.ref) in existing)
                for a, p in zip(members, puts, strict=True)
            ]
            self.metrics.heals.inc(sum(healed))
            rows = [
                ObjectRow(
                    ref=str(a.ref),
                    media_type=a.inspection.media_type,
                    bytes=len(a.data),
                    width=a.inspection.width,
                    height=a.inspection.height,
                    frames=a.inspection.frames,
                    name=first_name.get(a.ref),
                    created_at=existing[str(a.ref)].created_at if str(a.ref) in existing else now,
                    lease_at=now,
                    # Made by the decode worker over the very bytes it hashed to their address.
                    keyed_check=a.inspection.check,
                )
                for a in members
            ]
            await self.index.publish(rows, check, hold, tenant, source)

        await self.publisher.store(
            [(a.ref, a.data) for a in members],
            publish,
            lambda: AttachstoreError("an object kept disappearing while it was being published"),
        )
        self.metrics.images_admitted.inc(len(admitted))
        self.metrics.normalized.inc(sum(1 for a in admitted if a.normalized is not None))
        self.metrics.bytes_admitted.inc(sum(len(a.data) for a in admitted))

    def _stored(self, task: asyncio.Task[None]) -> None:
        self._storing.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here: a caller cancelled meanwhile no longer awaits it
