"""The gate of an admission (SPEC section 4): the policy and batch checks, the cheap checks of each image on
the loop, then the deep checks in the decode pool, concurrently, with the first failure in input order
deciding where one failure refuses the batch."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import gate
from ..config import Config
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
            policy.check_modality(self.routes, route, source)
            if session[0] is not None:
                policy.check_session(self.routes, session[0], session[1])
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
            verdicts: list[Admitted | Rejected] = []
            for i, c in enumerate(cheap):
                found = c if isinstance(c, Rejected) else deep[i]
                if isinstance(found, Passed) and not isinstance(c, Rejected):
                    if (
                        exact and found.data is not None
                    ):  # pragma: no cover - nothing asked the worker to change it
                        raise AttachstoreError("an exact admission came back with other bytes")
                    kept = c.seal() if isinstance(c, SharedBuffer) else c
                    stored = kept if found.data is None else found.data
                    verdicts.append(Admitted(Ref(self.config.hash, found.digest), stored, found))
                    continue
                if isinstance(found, Rejected):
                    verdicts.append(found)
                if not every_image:
                    break  # the first failure decides; the checks after it were cancelled
            return None, verdicts
        finally:
            for buf in decoded:
                buf.close()
