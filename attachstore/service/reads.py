"""Verified reads (docs/design.md, "Verified reads"): every read re-hashes the whole object and checks its
header against the row; a ref outside the caller's scope answers exactly like a missing one, before any file
is touched."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, NamedTuple, overload

from ..config import Config
from ..errors import AttachstoreError, Corrupt, Missing, NotFound, StorageUnavailable
from ..index import Index, ObjectRow
from ..metrics import Metrics
from ..refs import Buffer, Checker, Ref
from ..storage import BlobStore, LocalBlobStore, Mapped, Resident, Verify
from .headers import Headers
from .model import ImageRef, image_ref

log = logging.getLogger("attachstore.reads")

# Reads of one object by one request when its file changes under them (healed, or collected and admitted
# again between the read and the look under the lock).
_ATTEMPTS = 3


class Reads:
    def __init__(
        self,
        config: Config,
        blobs: BlobStore,
        index: Index,
        local: LocalBlobStore | None,
        metrics: Metrics,
        checker: Checker,
    ) -> None:
        self.config = config
        self.checker = checker
        self.blobs = blobs
        self.index = index
        self.metrics = metrics
        self.resident: Resident[_Known] | None = Resident(local) if local is not None else None
        self.headers = Headers(metrics)

    def scope(self, tenant: str | None) -> str | None:
        return None if self.config.is_open else tenant

    async def row(self, text: str, tenant: str | None) -> tuple[Ref, ObjectRow]:
        return await self.row_of(Ref.parse(text), self.scope(tenant))

    async def row_of(self, ref: Ref, scope: str | None) -> tuple[Ref, ObjectRow]:
        row = await self.index.get(str(ref), scope)
        if row is None:
            raise NotFound(f"no attachment {ref}")
        if row.state == "quarantined":
            raise Corrupt(_QUARANTINED.format(ref))
        return ref, row

    async def meta(self, text: str, tenant: str | None = None) -> ImageRef:
        _, row = await self.row(text, tenant)
        return image_ref(row)

    def read_remembered(
        self, text: str, tenant: str | None = None, mapped: bool = False
    ) -> tuple[ImageRef, bytearray | Mapped] | None:
        """The same file served to the same scope a moment ago, hashed in full without the index; None on any
        doubt, and `read` decides."""
        resident = self.resident
        if resident is None:
            return None
        hit = resident.recall(text, self.scope(tenant), _verify_known, mapped)
        if hit is None:
            return None
        known, data = hit
        # None: a header not walked in full yet, which `read` walks off the loop.
        if not self.headers.fit_now(known.row, data):
            _let_go(data)
            resident.forget(text)
            return None
        self.metrics.reads_ok.inc()
        return known.answer, data

    @overload
    async def read(
        self,
        text: str,
        tenant: str | None = None,
        claim: Callable[[int], None] | None = None,
        mapped: Literal[False] = False,
    ) -> tuple[ImageRef, bytes | bytearray]: ...

    @overload
    async def read(
        self, text: str, tenant: str | None, claim: Callable[[int], None] | None, mapped: bool
    ) -> tuple[ImageRef, bytes | bytearray | Mapped]: ...

    async def read(
        self,
        text: str,
        tenant: str | None = None,
        claim: Callable[[int], None] | None = None,
        mapped: bool = False,
    ) -> tuple[ImageRef, bytes | bytearray | Mapped]:
        """`claim` takes the object's size from the caller's budget before its bytes are read. With `mapped`,
        the caller must release a `Mapped`."""
        ref = Ref.parse(text)
        remembered = self.read_remembered(text, tenant, mapped)
        if remembered is not None:
            return remembered
        scope = self.scope(tenant)
        resident = self.resident
        try:
            ref, row = await self.row_of(ref, scope)
        except NotFound:
            self.metrics.reads.labels("not_found").inc()
            raise
        if claim is not None:
            claim(row.bytes)
        if resident is not None and row.state == "ok":
            verify = self._verify(ref, row)
            found = resident.read(ref, row.bytes, verify, mapped)
            if found is not None:
                data: bytes | bytearray | Mapped = found[0]
                fits = self.headers.fit_now(row, data)
                if isinstance(data, Mapped) and (fits is None or self._unchecked(ref, row)):
                    # What follows waits (a header walked off the loop, a check written to the index): no
                    # mapping is held across a wait, where its lease would keep a writer waiting out of the
                    # sweep's reach and another read of the same kept mapping could let it go.
                    data = _copied(data)
                if fits is None:
                    assert not isinstance(data, Mapped)
                    fits = await self.headers.walked(row, data)
                if fits:
                    await self._record_check(ref, row, data)
                    resident.remember(_Known(row, image_ref(row), verify), scope, found[1])
                    self.metrics.reads_ok.inc()
                    return image_ref(row), data
                _let_go(data)
        return await self.verified(ref, row, scope)

    def _verify(self, ref: Ref, row: ObjectRow) -> Verify:
        """A keyed check that fails over bytes that still hash to their address is the row's fault: they are
        served, and the mismatch counted (docs/security.md, "The keyed check of reads")."""
        check = row.keyed_check
        if ref.algorithm != "sha256" or check is None or not self.checker.mine(check):
            return ref.matches
        checker, name, size, media_type = self.checker, row.ref, row.bytes, row.media_type

        def verify(data: Buffer) -> bool:
            if checker.holds(check, name, size, media_type, data):
                return True
            if not ref.matches(data):
                return False
            self.metrics.check_mismatches.inc()
            log.warning("the keyed check of %s does not fit its verified bytes", ref)
            return True

        return verify

    def _unchecked(self, ref: Ref, row: ObjectRow) -> bool:
        return ref.algorithm == "sha256" and not self.checker.mine(row.keyed_check)

    async def _record_check(self, ref: Ref, row: ObjectRow, data: Buffer) -> None:
        if not self._unchecked(ref, row):
            return
        try:
            await self.index.record_check(row.ref, self.checker.of(row.ref, row.bytes, row.media_type, data))
        except AttachstoreError as e:  # the read is verified all the same; the next one records it
            log.warning("could not record the keyed check of %s: %s", ref, e.message)

    async def verified(self, ref: Ref, row: ObjectRow, scope: str | None) -> tuple[ImageRef, bytes]:
        """For a row the caller has already looked up under `scope`: the scope is not checked again."""
        try:
            found = await self._verified(ref, row, scope)
        except NotFound:  # collected since the row was looked up
            self.metrics.reads.labels("not_found").inc()
            raise
        except (Corrupt, Missing) as e:
            kind = "corrupt" if isinstance(e, Corrupt) else "missing"
            self.metrics.reads.labels(kind).inc()
            self.metrics.integrity_failures.labels(kind).inc()
            raise
        self.metrics.reads_ok.inc()
        return found

    async def verified_many(
        self, wanted: Sequence[tuple[Ref, ObjectRow]], scope: str | None
    ) -> list[bytes | bytearray | None]:
        found: list[bytes | bytearray | None] = [None] * len(wanted)
        warm = [i for i, (_, row) in enumerate(wanted) if row.state == "ok"]
        if self.resident is not None and warm:
            checks = [(ref, row.bytes, self._verify(ref, row)) for ref, row in (wanted[i] for i in warm)]
            for i, data in zip(warm, await self.resident.read_all(checks), strict=True):
                ref, row = wanted[i]
                if data is not None and await self.headers.fit(row, data):
                    await self._record_check(ref, row, data)
                    found[i] = data
            # Counted at once: one increment per image was a measurable share of a render's loop time
            # (docs/performance.md, "The render's reads, this round").
            self.metrics.reads_ok.inc(sum(found[i] is not None for i in warm))
        cold = [i for i, data in enumerate(found) if data is None]

        async def one(ref: Ref, row: ObjectRow) -> bytes | None:
            try:
                return (await self.verified(ref, row, scope))[1]
            except AttachstoreError:
                return None

        for i, verified in zip(cold, await asyncio.gather(*(one(*wanted[i]) for i in cold)), strict=True):
            found[i] = verified
        return found

    async def _verified(self, ref: Ref, row: ObjectRow, scope: str | None) -> tuple[ImageRef, bytes]:
        for _ in range(_ATTEMPTS):
            error: Missing | Corrupt
            try:
                # A row marked missing is only set right by the store's own copy, not a cached one.
                data = await self.blobs.read(
                    ref, row.bytes, fresh=row.state != "ok", verify=self._verify(ref, row)
                )
            except Missing as e:
                error, settled = e, await self._settle(ref, scope, self._absent(ref))
            except Corrupt as e:
                error, settled = e, await self._settle(ref, scope, self._damaged(ref))
            else:
                if row.state != "ok":  # the file is back (restored, or healed by another process)
                    await self._settle(ref, scope, self._back(ref))
                if not await self.headers.fit(row, data):
                    # The bytes are the admitted ones (the hash matched), so the row is what is wrong: do not
                    # serve, do not quarantine good bytes; admitting them again rewrites the row.
                    raise Corrupt(f"the index entry of {ref} does not match its bytes")
                await self._record_check(ref, row, data)
                return image_ref(row), data
            if settled is None:
                raise NotFound(f"no attachment {ref}") from None  # gc collected it meanwhile
            found, row = settled
            if found == "quarantined":
                raise error if isinstance(error, Corrupt) else Corrupt(_QUARANTINED.format(ref)) from None
            if found == "missing":
                raise error if isinstance(error, Missing) else Missing(_MISSING.format(ref)) from None
            # "intact": a file is in place again (healed, or collected and admitted again): read it again.
        raise StorageUnavailable(f"the file of {ref} kept changing while it was read")

    async def quarantine(self, ref: Ref) -> str | None:
        settled = await self._settle(ref, None, self._damaged(ref))
        return None if settled is None else settled[0]

    # What a read found wrong is settled under the lock of the ref (Index.settle), where no admission
    # publishes and no gc collects: each decision looks at the file again there, and says the row's state
    # and what was found.

    async def _settle(self, ref: Ref, scope: str | None, decide: _Decide) -> tuple[str, ObjectRow] | None:
        if self.resident is not None:
            self.resident.forget(str(ref))
        return await self.index.settle(str(ref), scope, decide)

    def _absent(self, ref: Ref) -> _Decide:

        async def decide(row: ObjectRow) -> tuple[str, tuple[str, ObjectRow]]:
            return _finding(row, "missing" if await self.blobs.stat(ref) is None else "intact")

        return decide

    def _damaged(self, ref: Ref) -> _Decide:
        # Bytes that do not verify are moved aside, unless a heal has replaced them meanwhile.
        # PostgreSQL may run a transaction twice (after a deadlock): what the first run moved aside stands.
        moved = False

        async def decide(row: ObjectRow) -> tuple[str, tuple[str, ObjectRow]]:
            nonlocal moved
            found = await self.blobs.quarantine(ref)
            moved = moved or found == "quarantined"
            return _finding(row, "quarantined" if moved else found)

        return decide

    def _back(self, ref: Ref) -> _Decide:

        async def decide(row: ObjectRow) -> tuple[str, tuple[str, ObjectRow]]:
            back = row.state == "missing" and await self.blobs.stat(ref) is not None
            return ("ok" if back else row.state), ("intact", row)

        return decide


class _Known(NamedTuple):
    row: ObjectRow
    answer: ImageRef
    verify: Verify

    @property
    def ref(self) -> str:
        return self.row.ref

    @property
    def bytes(self) -> int:
        return self.row.bytes


def _verify_known(known: _Known) -> Verify:
    return known.verify


def _copied(data: Mapped) -> bytes:
    try:
        return bytes(data)
    finally:
        data.release()


def _let_go(data: Buffer) -> None:
    if isinstance(data, Mapped):
        data.release()


_QUARANTINED = "the stored bytes of {} failed verification and were quarantined"
_MISSING = "the bytes of {} are missing from the store"
# What a decision gives Index.settle: the row's new state, and what was found with the row as it now is.
_Decide = Callable[[ObjectRow], Awaitable[tuple[str, tuple[str, ObjectRow]]]]


def _finding(row: ObjectRow, found: str) -> tuple[str, tuple[str, ObjectRow]]:
    """A quarantined row whose file is gone stays quarantined: the read that moved its bytes said so."""
    if found == "missing" and row.state == "quarantined":
        found = "quarantined"
    state = row.state if found == "intact" else found
    return state, (found, row._replace(state=state))
