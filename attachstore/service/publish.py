"""The steps of SPEC section 3 that an admission and a request variant share: renew the lease, write or verify
every file, then publish in one transaction after checking every file is still there (docs/design.md, "The
write order for one object, and why each step is there")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from ..errors import AttachstoreError
from ..index import Index, ObjectRow
from ..refs import Ref
from ..storage import BlobStore, Put

_PUBLISH_ATTEMPTS = 3

Check = Callable[[], Awaitable[None]]
# publish(the rows that existed, by ref; the time of their renewal; what each put found; the check to run
# under the index's lock just before the commit)
T = TypeVar("T")
Publish = Callable[[dict[str, ObjectRow], float, list[Put], Check], Awaitable[T]]


class FileGone(Exception): ...


class Publisher:
    def __init__(self, blobs: BlobStore, index: Index) -> None:
        self.blobs = blobs
        self.index = index

    async def store(
        self,
        objects: Sequence[tuple[Ref, bytes | memoryview]],
        publish: Publish[T],
        exhausted: Callable[[], AttachstoreError],
    ) -> T:
        """All of it again when gc collected a file before the commit, a few times at most."""
        refs = [str(ref) for ref, _ in objects]
        try:
            for _ in range(_PUBLISH_ATTEMPTS):
                now = time.time()
                existing = await self.index.renew(refs, now)
                # Wait for every write, even after one failed, so that the cleanup sees all of them.
                puts = await asyncio.gather(
                    *(self.blobs.put(ref, data) for ref, data in objects), return_exceptions=True
                )
                found: list[Put] = []
                for outcome in puts:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    found.append(outcome)

                async def files_still_there() -> None:
                    await self.still_there([(ref, len(data)) for ref, data in objects])

                try:
                    return await publish(existing, now, found, files_still_there)
                except FileGone:
                    continue
            raise exhausted()
        except BaseException:
            # Publish nothing: remove the files put in place here that no row publishes.
            await self.index.discard_unpublished(refs, self.discard)
            raise

    async def still_there(self, objects: Sequence[tuple[Ref, int]]) -> None:
        """Run under the write lock, just before the transaction that publishes."""
        found = await self.blobs.stat_many([ref for ref, _ in objects])
        for (ref, size), f in zip(objects, found, strict=True):
            if f is None or f.size != size:
                raise FileGone(str(ref))

    async def discard(self, ref: str) -> None:
        await self.blobs.discard(Ref.parse(ref))
