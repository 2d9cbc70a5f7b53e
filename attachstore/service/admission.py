"""Admission (SPEC sections 4 and 5): validate every member of a batch, then store every member, then publish
all rows and the session's holds in one transaction. A rejection raises for `user`/`command` and degrades
into a diagnostic per image and a text for the model for `tool`/`mcp`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import gate
from ..config import Config
from ..errors import AttachstoreError, InvalidRequest, Rejected
from ..gate import DecodePool, Passed, SharedBuffer
from ..index import Hold, Index, ObjectRow
from ..metrics import Metrics
from ..refs import Checker, Ref
from ..storage import Put
from . import policy
from .model import ImageRef, Normalization
from .names import display_name, renamed
from .policy import Diagnostic
from .publish import Check, Publisher
from .sessions import Sessions
from .slots import Slot, Slots

SOURCES = ("user", "tool", "mcp", "command")


@dataclass(frozen=True, slots=True)
class Upload:
    """One image handed to admission: base64 text (JSON), raw bytes (CLI), or raw bytes the edge wrote into
    shared memory as they arrived (multipart), which reach the decode worker without a copy.

    `size` is the decoded size; an edge that stopped buffering an oversized part passes its full size here."""

    payload: str | bytes | SharedBuffer
    size: int
    media_type: str | None = None
    name: str | None = None

    @classmethod
    def of_bytes(cls, data: bytes, media_type: str | None = None, name: str | None = None) -> Upload:
        return cls(data, len(data), media_type, name)

    @classmethod
    def of_base64(cls, text: str, media_type: str | None = None, name: str | None = None) -> Upload:
        return cls(text, gate.base64_decoded_size(text), media_type, name)


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to an admission: refs in input order, or (soft rejection) a diagnostic per image."""

    attachments: list[ImageRef]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    text: str | None = None

    @property
    def degraded(self) -> bool:
        return bool(self.diagnostics)


@dataclass(frozen=True, slots=True)
class _Admitted:
    ref: Ref
    data: bytes | memoryview  # what is stored: the upload (perhaps in shared memory), or its normalization
    inspection: Passed

    @property
    def normalized(self) -> Normalization | None:
        original = self.inspection.original
        return None if original is None else Normalization(original, tuple(self.inspection.steps))


def _degraded(
    uploads: Sequence[Upload],
    names: Sequence[str | None],
    batch_error: Rejected | None,
    verdicts: Sequence[_Admitted | Rejected],
) -> Admission:
    diagnostics = []
    for i, (u, name) in enumerate(zip(uploads, names, strict=True)):
        verdict: _Admitted | Rejected | None = batch_error or (verdicts[i] if i < len(verdicts) else None)
        if isinstance(verdict, _Admitted):
            diagnostics.append(Diagnostic(i, verdict.inspection.media_type, name, None, "valid"))
        elif isinstance(verdict, Rejected):
            declared = None if u.media_type is None else gate.canonical_type(u.media_type)
            diagnostics.append(Diagnostic(i, declared, name, verdict.code, verdict.message, verdict.hint))
    return Admission([], diagnostics, policy.model_text(diagnostics))


async def _settle(
    jobs: Mapping[int, asyncio.Future[Passed]], every_image: bool, decided: int | None
) -> dict[int, Passed | Rejected]:
    """The outcome of each deep check, by input position; every job has ended when this returns, also when
    the caller is cancelled. Without `every_image`, the first failure in input order decides (`decided`:
    the position of one already known): a check after a failure is cancelled as soon as the failure is
    known, since it cannot change the verdict, and the wait ends when every check before it has ended.
    Anything but a rejection is raised at once, and the other checks are cancelled."""
    outcomes: dict[int, Passed | Rejected] = {}
    try:
        while True:
            if decided is not None:
                for i, job in jobs.items():
                    if i > decided:
                        job.cancel()
            waiting = [j for i, j in jobs.items() if not j.done() and (decided is None or i < decided)]
            if not waiting:
                return outcomes
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for i, job in jobs.items():
                if job not in done or job.cancelled():
                    continue
                e = job.exception()
                if e is None:
                    outcomes[i] = job.result()
                elif isinstance(e, gate.Unwanted):  # never started: a failure before it decided
                    continue
                elif isinstance(e, Rejected):
                    outcomes[i] = e
                    if not every_image and (decided is None or i < decided):
                        decided = i
                else:
                    raise e
    finally:
        for job in jobs.values():
            job.cancel()
        await asyncio.gather(*jobs.values(), return_exceptions=True)


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
        self._storing: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Wait for the admissions whose callers were cancelled while they stored (see _admit)."""
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
        """Validate every member, then store every member, then publish all rows (and the session's holds)
        in one transaction. A rejection raises for `user`/`command` and degrades for `tool`/`mcp`.

        `slot` is the place an edge took before it read the uploads; without one, the admission takes its
        own. `exact` stores every image byte for byte as it came, whatever `[admission] oversize` and
        `strip_metadata` say: what the stored limits refuse is refused (`attachstore transcript`, whose
        restore must give back the very bytes)."""
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
        """The gate's verdict on each upload, the one `admit` would reach, with nothing stored (dry runs):
        None for an image that would be admitted."""
        if source not in SOURCES:
            raise InvalidRequest(f"source: must be one of {', '.join(SOURCES)}, not {source!r}")
        if not uploads:
            raise InvalidRequest("images: at least one image is required")
        with self.slots.take(tenant, source):
            batch_error, verdicts = await self._validate(
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
        batch_error, verdicts = await self._validate(
            uploads,
            source,
            route,
            every_image=soft,
            session=(session, session_route),
            tenant=tenant,
            exact=exact,
        )
        if batch_error is not None or any(isinstance(v, Rejected) for v in verdicts):
            if soft:
                return _degraded(uploads, names, batch_error, verdicts)
            if batch_error is not None:
                raise batch_error
            i, first = next((i, v) for i, v in enumerate(verdicts) if isinstance(v, Rejected))
            raise first.at(i)
        admitted = [v for v in verdicts if isinstance(v, _Admitted)]
        # A normalized image's name takes the extension of its new type: 'photo.png' stored as a JPEG is
        # 'photo.jpg'.
        names = [
            renamed(n, a.inspection.media_type) if a.normalized else n
            for n, a in zip(names, admitted, strict=True)
        ]
        # From here the admission finishes even when it is cancelled (its client left): its files are
        # written in threads that cannot be stopped, and cut off there it would leave unindexed objects
        # behind for gc and the audit. Cancelled, it waits for the store (keeping its place among
        # max_concurrent) and leaves published, like one whose answer was lost; cancelled again (shutdown),
        # it leaves at once and Store.close waits for the store.
        storing = asyncio.create_task(self._store(admitted, names, hold, tenant))
        self._storing.add(storing)
        storing.add_done_callback(self._stored)
        try:
            await asyncio.shield(storing)
        except asyncio.CancelledError:
            await asyncio.wait([storing])
            raise
        except Rejected as e:  # the session's route turned text-only meanwhile (checked under the lock)
            if soft:
                return _degraded(uploads, names, e, [])
            raise
        return Admission(
            [
                ImageRef(
                    str(a.ref),
                    a.inspection.media_type,
                    len(a.data),
                    a.inspection.width,
                    a.inspection.height,
                    a.inspection.frames,
                    name,
                    a.normalized,
                )
                for a, name in zip(admitted, names, strict=True)
            ]
        )

    async def _validate(
        self,
        uploads: Sequence[Upload],
        source: str,
        route: str | None,
        *,
        every_image: bool,
        session: tuple[str | None, str | None] = (None, None),
        tenant: str = "",
        exact: bool = False,
    ) -> tuple[Rejected | None, list[_Admitted | Rejected]]:
        """The gate of SPEC section 4: a batch-level failure, or a verdict per image.

        Without `every_image`, the first failure in input order decides, exactly as if the images were
        checked one after another, while the expensive checks of the images before it run concurrently:
        images after a failure are not looked at, and their checks are cancelled as soon as it is known.
        The deep checks wait for a decode worker in `tenant`'s turn and share one budget of decoder time
        (`[admission] request_decode_timeout`); cancelling the admission (its client left) stops them."""
        limits = self.config.limits
        admission = self.config.admission
        fit_limits = admission.fit_limits(limits) if admission.oversize == "fit" and not exact else None
        # A tool can read its file again; a person attaches the image again.
        again = gate.READ_AGAIN if source in policy.SOFT_SOURCES else gate.ATTACH_AGAIN
        try:
            policy.check_modality(self.sessions.routes, route, source)
            if session[0] is not None:
                policy.check_session(self.sessions.routes, session[0], session[1])
            gate.check_batch([u.size for u in uploads], limits)
        except Rejected as e:
            return e, []
        # The decoded uploads' descriptors are closed when the checks are done; what is stored keeps a view
        # of their memory, freed with the admission.
        decoded: list[SharedBuffer] = []
        try:
            cheap: list[bytes | SharedBuffer | Rejected] = []
            for u in uploads:
                try:
                    if isinstance(u.payload, str):
                        decoded.append(gate.decode_base64_shared(u.payload))
                    data = decoded[-1] if isinstance(u.payload, str) else u.payload
                    head = data.head(64) if isinstance(data, SharedBuffer) else data[:64]
                    gate.precheck(u.size, head, u.media_type, fit_limits or limits, again=again)
                    cheap.append(data)
                except Rejected as e:
                    cheap.append(e)
                    if not every_image:
                        break
            batch = gate.Batch(
                admission.request_decode_timeout_seconds, first_failure_decides=not every_image
            )
            jobs = {
                i: asyncio.create_task(
                    self.pool.inspect(
                        c,
                        u.media_type,
                        limits,
                        self.config.hash,
                        trailing_data=admission.trailing_data,
                        fit_limits=fit_limits,
                        strip_metadata=admission.strip_metadata and not exact,
                        again=again,
                        check_key=self.checker.key,
                        tenant=tenant,
                        batch=batch,
                        position=i,
                    )
                )
                for i, (c, u) in enumerate(zip(cheap, uploads, strict=False))
                if not isinstance(c, Rejected)
            }
            # Without every_image, a cheap failure ended the list: it decides, unless one before it fails.
            cheap_failure = len(cheap) - 1 if isinstance(cheap[-1], Rejected) and not every_image else None
            deep = await _settle(jobs, every_image, cheap_failure)
            verdicts: list[_Admitted | Rejected] = []
            for i, c in enumerate(cheap):
                found = c if isinstance(c, Rejected) else deep[i]
                if isinstance(found, Passed) and not isinstance(c, Rejected):
                    if (
                        exact and found.data is not None
                    ):  # pragma: no cover - nothing asked the worker to change it
                        raise AttachstoreError("an exact admission came back with other bytes")
                    kept = c.seal() if isinstance(c, SharedBuffer) else c
                    stored = kept if found.data is None else found.data
                    verdicts.append(_Admitted(Ref(self.config.hash, found.digest), stored, found))
                    continue
                if isinstance(found, Rejected):
                    verdicts.append(found)
                if not every_image:
                    break  # the first failure decides; the checks after it were cancelled
            return None, verdicts
        finally:
            for buf in decoded:
                buf.close()

    async def _store(
        self, admitted: Sequence[_Admitted], names: Sequence[str | None], hold: Hold | None, tenant: str
    ) -> None:
        unique: dict[Ref, _Admitted] = {}
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
            await self.index.publish(rows, check, hold, tenant)

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
