"""Verified reads (SPEC section 1, promise 3): every read re-hashes the whole object and checks its header
against the index row; damaged bytes are quarantined and never served. A caller sees a ref only within its
scope (SPEC section 11); any other ref answers exactly like a missing one, before any file is touched."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..config import Config
from ..errors import Corrupt, Missing, NotFound
from ..gate import Header, HeaderTooDeep, probe_header
from ..index import Index, ObjectRow
from ..metrics import Metrics
from ..refs import Ref
from ..storage import BlobStore, LocalBlobStore, Resident
from .model import ImageRef, image_ref

if TYPE_CHECKING:
    from ..index.postgres import PgIndex


class Reads:
    def __init__(
        self,
        config: Config,
        blobs: BlobStore,
        index: Index | PgIndex,
        local: LocalBlobStore | None,
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.blobs = blobs
        self.index = index
        self.metrics = metrics
        self.resident: Resident[ObjectRow] | None = Resident(local) if local is not None else None
        # The headers walked in full off the loop (objects admitted before the gate bounded them), by ref.
        self._deep: dict[str, Header | None] = {}
        self._walks: dict[str, asyncio.Task[Header | None]] = {}
        self._walking = asyncio.Lock()

    def scope(self, tenant: str | None) -> str | None:
        """Whose grants bound what a caller sees: None (everything) for the operator, and for everyone
        while no tokens are configured."""
        return None if self.config.is_open else tenant

    async def row(self, text: str, tenant: str | None) -> tuple[Ref, ObjectRow]:
        """The row of a ref the caller may see; one it may not see answers exactly like a missing one,
        before any file is touched."""
        return await self.row_of(Ref.parse(text), self.scope(tenant))

    async def row_of(self, ref: Ref, scope: str | None) -> tuple[Ref, ObjectRow]:
        row = await self.index.get(str(ref), scope)
        if row is None:
            raise NotFound(f"no attachment {ref}")
        if row.state == "quarantined":
            raise Corrupt(f"the stored bytes of {ref} failed verification and were quarantined")
        return ref, row

    async def meta(self, text: str, tenant: str | None = None) -> ImageRef:
        _, row = await self.row(text, tenant)
        return image_ref(row)

    async def read(self, text: str, tenant: str | None = None) -> tuple[ImageRef, bytes | bytearray]:
        """Verified bytes: the whole object re-hashed, its header checked against the index."""
        ref = Ref.parse(text)
        scope = self.scope(tenant)
        resident = self.resident
        if resident is not None:
            # Without the index when this process served the same file to the same scope a moment ago.
            hit = resident.recall(ref, scope)
            if hit is not None:
                if await self._header_fits(hit[0], hit[1]):
                    self.metrics.reads_ok.inc()
                    return image_ref(hit[0]), hit[1]
                resident.forget(str(ref))
        try:
            ref, row = await self.row_of(ref, scope)
        except NotFound:
            self.metrics.reads.labels("not_found").inc()
            raise
        if resident is not None and row.state == "ok":
            found = resident.read(ref, row.bytes)
            if found is not None and await self._header_fits(row, found[0]):
                resident.remember(row, scope, found[1])
                self.metrics.reads_ok.inc()
                return image_ref(row), found[0]
        return await self.verified(ref, row)

    async def verified(self, ref: Ref, row: ObjectRow) -> tuple[ImageRef, bytes]:
        """The bytes of an object whose row the caller has already looked up (and may see): re-hashed in
        full and their header checked against the row, like every read."""
        try:
            found = await self._verified(ref, row)
        except (Corrupt, Missing) as e:
            kind = "corrupt" if isinstance(e, Corrupt) else "missing"
            self.metrics.reads.labels(kind).inc()
            self.metrics.integrity_failures.labels(kind).inc()
            raise
        self.metrics.reads_ok.inc()
        return found

    async def _verified(self, ref: Ref, row: ObjectRow) -> tuple[ImageRef, bytes]:
        try:
            # A row marked missing or quarantined is only set right by the store's own copy, not a cached one.
            data = await self.blobs.read(ref, row.bytes, fresh=row.state != "ok")
        except Missing:
            await self._set_state(row, "missing")
            raise
        except Corrupt:
            found = await self.blobs.quarantine(ref)
            if found != "intact":
                await self._set_state(row, found)
                if found == "missing":
                    raise Missing(f"the bytes of {ref} are missing from the store") from None
                raise
            data = await self.blobs.read(ref, row.bytes)  # healed meanwhile
        if row.state != "ok":
            await self._set_state(row, "ok")  # the file is back (restored, or healed by another process)
        if not await self._header_fits(row, data):
            # The bytes are the admitted ones (the hash matched), so the row is what is wrong: do not serve,
            # do not quarantine good bytes; admitting them again rewrites the row.
            raise Corrupt(f"the index entry of {ref} does not match its bytes")
        return image_ref(row), data

    async def _set_state(self, row: ObjectRow, state: str) -> None:
        if self.resident is not None:
            self.resident.forget(row.ref)
        await self.index.set_state(row, state)

    async def _header_fits(self, row: ObjectRow, data: bytes | bytearray) -> bool:
        """The verified bytes' header says what the row says: type and dimensions. Probed on the loop, at
        most JPEG_HEADER_STEPS steps; a JPEG that needs more was admitted before the gate refused those."""
        try:
            return _fits(row, probe_header(data, bounded=True))
        except HeaderTooDeep:
            return _fits(row, await self._deep_header(row.ref, data))

    async def _deep_header(self, ref: str, data: bytes | bytearray) -> Header | None:
        """The header walked in full, in a thread and one object at a time, so that the loop keeps serving.
        Remembered: the bytes hashed to `ref`, so their header is the same on every read of it. One walk
        an object, shared by its concurrent readers and run to its end when they leave (a reader that
        disconnects is cancelled): leaving and asking again cannot start another."""
        if ref in self._deep:
            return self._deep[ref]
        walk = self._walks.get(ref)
        if walk is None:
            walk = self._walks[ref] = asyncio.create_task(self._walk(ref, data))
        return await asyncio.shield(walk)

    async def _walk(self, ref: str, data: bytes | bytearray) -> Header | None:
        try:
            async with self._walking:
                self.metrics.header_probes_deferred.inc()
                header = await asyncio.to_thread(probe_header, data)
            if len(self._deep) >= _DEEP_KEPT:
                del self._deep[next(iter(self._deep))]
            self._deep[ref] = header
            return header
        finally:
            del self._walks[ref]


_DEEP_KEPT = 1024


def _fits(row: ObjectRow, header: Header | None) -> bool:
    return header is not None and (header.media_type, header.width, header.height) == (
        row.media_type,
        row.width,
        row.height,
    )
