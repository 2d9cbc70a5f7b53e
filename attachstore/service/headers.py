"""Whether verified bytes' header says what their row says: probed on the loop within the gate's bound, or
walked in full off the loop for a JPEG admitted before the gate bounded it (docs/design.md, "Verified
reads")."""

from __future__ import annotations

import asyncio

from ..gate import Header, HeaderTooDeep, probe_header
from ..index import ObjectRow
from ..metrics import Metrics
from ..storage import Mapped

_DEEP_KEPT = 1024


class Headers:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # The headers walked in full off the loop (objects admitted before the gate bounded them), by ref.
        self._deep: dict[str, Header | None] = {}
        self._walks: dict[str, asyncio.Task[Header | None]] = {}
        self._walking = asyncio.Lock()

    async def fit(self, row: ObjectRow, data: bytes | bytearray) -> bool:
        fits = self.fit_now(row, data)
        return _fits(row, await self._deep_header(row.ref, data)) if fits is None else fits

    def fit_now(self, row: ObjectRow, data: bytes | bytearray | Mapped) -> bool | None:
        """None where the full walk is still to make."""
        try:
            return _fits(row, probe_header(data, bounded=True))
        except HeaderTooDeep:
            return _fits(row, self._deep[row.ref]) if row.ref in self._deep else None

    async def _deep_header(self, ref: str, data: bytes | bytearray) -> Header | None:
        """One walk per object, in a thread, shared by its concurrent readers and run to its end when they
        leave, so that leaving and asking again cannot start another; remembered, since bytes that hash to
        `ref` always have the same header."""
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

    async def walked(self, row: ObjectRow, data: bytes | bytearray) -> bool:
        return _fits(row, await self._deep_header(row.ref, data))


def _fits(row: ObjectRow, header: Header | None) -> bool:
    return header is not None and (header.media_type, header.width, header.height) == (
        row.media_type,
        row.width,
        row.height,
    )
