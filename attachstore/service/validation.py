"""The gate of an admission (SPEC section 4; docs/design.md, "First failure in input order, with concurrent
decoding"): policy and batch checks, cheap checks on the loop, deep checks in the decode pool concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import gate
from ..config import Config, Limits
from ..errors import AttachstoreError, Rejected
from ..gate import DecodePool, Passed, SharedBuffer
from ..refs import Checker, Ref
from . import policy
from .model import Normalization, Upload
from .policy import RouteTable


@dataclass(frozen=True, slots=True)
class Admitted:
    ref: Ref
    data: bytes | memoryview  # what is stored: the upload (perhaps in shared memory), or its normalization
    inspection: Passed

    @property
    def normalized(self) -> Normalization | None:
        original = self.inspection.original
        return None if original is None else Normalization(original, tuple(self.inspection.steps))


class Validator:
    def __init__(self, config: Config, routes: RouteTable, pool: DecodePool, checker: Checker) -> None:
        self.config = config
        self.routes = routes
        self.pool = pool
        self.checker = checker

    async def validate(
        self,
        uploads: Sequence[Upload],
        source: str,
        route: str | None,
        *,
        every_image: bool,
        session: tuple[str | None, str | None] = (None, None),
        tenant: str = "",
        exact: bool = False,
    ) -> tuple[Rejected | None, list[Admitted | Rejected]]:
        """Without `every_image` the first failure in input order decides, exactly as if checked one after
        another, while the deep checks before it run concurrently."""
        try:
            self._check_batch(uploads, source, route, session)
        except Rejected as e:
            return e, []
        admission = self.config.admission
        terms = _Terms(
            fit_limits=admission.fit_limits(self.config.limits)
            if admission.oversize == "fit" and not exact
            else None,
            # A tool can read its file again; a person attaches the image again.
            again=gate.READ_AGAIN if source in policy.SOFT_SOURCES else gate.ATTACH_AGAIN,
            every_image=every_image,
            exact=exact,
            tenant=tenant,
        )
        # The decoded uploads' descriptors are closed when the checks are done; what is stored keeps a view
        # of their memory, freed with the admission.
        decoded: list[SharedBuffer] = []
        try:
            cheap = self._cheap_checks(uploads, terms, decoded)
            jobs = self._deep_checks(uploads, cheap, terms)
            # Without every_image, a cheap failure ended the list: it decides, unless one before it fails.
            cheap_failure = len(cheap) - 1 if isinstance(cheap[-1], Rejected) and not every_image else None
            deep = await _outcomes(jobs, every_image, cheap_failure)
            return None, self._verdicts(cheap, deep, terms)
        finally:
            for buf in decoded:
                buf.close()

    def _check_batch(
        self,
        uploads: Sequence[Upload],
        source: str,
        route: str | None,
        session: tuple[str | None, str | None],
    ) -> None:
        policy.check_modality(self.routes, route, source)
        if session[0] is not None:
            policy.check_session(self.routes, session[0], session[1])
        gate.check_batch([u.size for u in uploads], self.config.limits)

    def _cheap_checks(
        self, uploads: Sequence[Upload], terms: _Terms, decoded: list[SharedBuffer]
    ) -> list[bytes | SharedBuffer | Rejected]:
        cheap: list[bytes | SharedBuffer | Rejected] = []
        limits = terms.fit_limits or self.config.limits
        for u in uploads:
            try:
                if isinstance(u.payload, str):
                    decoded.append(gate.decode_base64_shared(u.payload))
                data = decoded[-1] if isinstance(u.payload, str) else u.payload
                head = data.head(64) if isinstance(data, SharedBuffer) else data[:64]
                gate.precheck(u.size, head, u.media_type, limits, again=terms.again, convert=not terms.exact)
                cheap.append(data)
            except Rejected as e:
                cheap.append(e)
                if not terms.every_image:
                    break
        return cheap

    def _deep_checks(
        self, uploads: Sequence[Upload], cheap: Sequence[bytes | SharedBuffer | Rejected], terms: _Terms
    ) -> dict[int, asyncio.Task[Passed]]:
        admission = self.config.admission
        batch = gate.Batch(
            admission.request_decode_timeout_seconds, first_failure_decides=not terms.every_image
        )
        return {
            i: asyncio.create_task(
                self.pool.inspect(
                    c,
                    u.media_type,
                    self.config.limits,
                    self.config.hash,
                    trailing_data=admission.trailing_data,
                    fit_limits=terms.fit_limits,
                    strip_metadata=admission.strip_metadata and not terms.exact,
                    again=terms.again,
                    check_key=self.checker.key,
                    # A source is stored only converted: never by an exact admission.
                    convert=not terms.exact,
                    tenant=terms.tenant,
                    batch=batch,
                    position=i,
                )
            )
            for i, (c, u) in enumerate(zip(cheap, uploads, strict=False))
            if not isinstance(c, Rejected)
        }

    def _verdicts(
        self,
        cheap: Sequence[bytes | SharedBuffer | Rejected],
        deep: Mapping[int, Passed | Rejected],
        terms: _Terms,
    ) -> list[Admitted | Rejected]:
        verdicts: list[Admitted | Rejected] = []
        for i, c in enumerate(cheap):
            found = c if isinstance(c, Rejected) else deep[i]
            if isinstance(found, Passed) and not isinstance(c, Rejected):
                if terms.exact and found.data is not None:  # pragma: no cover - nothing asked for other bytes
                    raise AttachstoreError("an exact admission came back with other bytes")
                kept = c.seal() if isinstance(c, SharedBuffer) else c
                stored = kept if found.data is None else found.data
                verdicts.append(Admitted(Ref(self.config.hash, found.digest), stored, found))
                continue
            if isinstance(found, Rejected):
                verdicts.append(found)
            if not terms.every_image:
                break  # the first failure decides; the checks after it were cancelled
        return verdicts


@dataclass(frozen=True, slots=True)
class _Terms:
    fit_limits: Limits | None  # the gate's limits where oversize images are fitted; None: none are
    again: str  # what the refusals tell the caller to do again
    every_image: bool
    exact: bool
    tenant: str


async def _outcomes(
    jobs: Mapping[int, asyncio.Future[Passed]], every_image: bool, decided: int | None
) -> dict[int, Passed | Rejected]:
    """Every job has ended when this returns, also when the caller is cancelled. Anything but a rejection is
    raised at once."""
    outcomes: dict[int, Passed | Rejected] = {}
    try:
        while waiting := _waiting(jobs, decided):
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for i, job in jobs.items():
                if job not in done or job.cancelled():
                    continue
                found = _outcome(job)
                if found is None:
                    continue
                outcomes[i] = found
                if isinstance(found, Rejected) and not every_image and (decided is None or i < decided):
                    decided = i
        return outcomes
    finally:
        for job in jobs.values():
            job.cancel()
        await asyncio.gather(*jobs.values(), return_exceptions=True)


def _waiting(jobs: Mapping[int, asyncio.Future[Passed]], decided: int | None) -> list[asyncio.Future[Passed]]:
    if decided is not None:
        for i, job in jobs.items():
            if i > decided:
                job.cancel()
    return [j for i, j in jobs.items() if not j.done() and (decided is None or i < decided)]


def _outcome(job: asyncio.Future[Passed]) -> Passed | Rejected | None:
    e = job.exception()
    if e is None:
        return job.result()
    if isinstance(e, gate.AlreadyDecided):
        return None
    if isinstance(e, Rejected):
        return e
    raise e
