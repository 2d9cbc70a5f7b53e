"""The blob store interface the service uses, and the local backend behind it.

A backend stores bytes under names derived from their reference and knows nothing of images or of the index.
Every implementation keeps the same contract, checked by one suite (tests/storage/test_conformance.py):

- `put(ref, data)` returns only once `data` is durable under the name of `ref`. An intact existing object is
  kept (EXISTED); a damaged one is replaced from `data` (HEALED), its damaged bytes kept in quarantine; a
  missing one is written (CREATED). Concurrent puts of one ref all succeed and leave one intact object.
- `read(ref, size, verify=)` returns the object's bytes only if their length is `size` and their hash is
  `ref` (or, given `verify`, `verify(bytes)` is true: the keyed check of the index row): it raises `Missing`
  when there is no object and `Corrupt` when there is one that does not match. Damaged bytes are never
  returned.
- `quarantine(ref)` re-checks the object and moves it aside only if it is damaged; it answers what it found:
  "intact" (a concurrent heal got there first; left in place), "quarantined" or "missing".
- `discard(ref)` removes the object; removing a missing one is not an error. Durable when it returns.
- `walk()` yields every object under the store's objects area (never quarantine or staging), in any order;
  `StoredObject.ref` is None for a name that is not an object's.
- I/O failures are `StorageUnavailable` (or `StorageFull`), never a raw OS or client exception.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import stat
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import StorageUnavailable
from ..refs import Ref
from .fileops import storage_error
from .listing import StoredFile
from .local import LocalBlobStore, Put, Verify

_WALK_BATCH = 1000


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str  # where the backend keeps it: a path for local, an S3 key for s3
    ref: Ref | None  # None when the name is not a ref's
    size: int
    mtime: float  # last modified, seconds since the epoch


class BlobStore(Protocol):
    kind: str  # "local" | "s3"

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def put(self, ref: Ref, data: bytes | memoryview) -> Put: ...

    async def read(self, ref: Ref, size: int, *, fresh: bool = False, verify: Verify | None = None) -> bytes:
        """`fresh`: past any cache. `verify`: what the bytes must pass in place of their address."""

    async def quarantine(self, ref: Ref) -> str: ...

    async def stat(self, ref: Ref) -> StoredObject | None: ...

    async def stat_many(self, refs: Sequence[Ref]) -> list[StoredObject | None]: ...

    async def discard(self, ref: Ref) -> None: ...

    async def probe_writable(self, room: int = 0, objects: int = 0) -> None:
        """For /readyz: an object can be written now, with room (where the backend can tell) for `objects`
        objects of `room` bytes."""

    async def fetch(self, key: str) -> bytes | None:
        """The bytes at `key` as they are, unverified, for the audit; None if gone."""

    async def set_aside(self, key: str) -> str: ...

    def walk(self) -> AsyncIterator[StoredObject]: ...


class LocalBackend:
    """`LocalBlobStore` off the event loop; `blobs` stays reachable for what only a file system has."""

    kind = "local"

    def __init__(self, blobs: LocalBlobStore) -> None:
        self.blobs = blobs

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.blobs.create_layout)
        except OSError as e:
            raise storage_error(e, "creating the data dir") from e

    async def close(self) -> None:
        return None

    async def put(self, ref: Ref, data: bytes | memoryview) -> Put:
        return await self.blobs.put(ref, data)

    async def read(self, ref: Ref, size: int, *, fresh: bool = False, verify: Verify | None = None) -> bytes:
        return await self.blobs.read(ref, size, verify)  # no cache: always fresh

    async def quarantine(self, ref: Ref) -> str:
        return await self.blobs.quarantine(ref)

    async def stat(self, ref: Ref) -> StoredObject | None:
        try:
            found = await asyncio.to_thread(self.blobs.stat, ref)
        except OSError as e:
            raise storage_error(e, "looking up an object") from e
        return None if found is None else _object(found)

    async def stat_many(self, refs: Sequence[Ref]) -> list[StoredObject | None]:
        def stat_all() -> list[StoredFile | None]:
            return [self.blobs.stat(ref) for ref in refs]

        try:
            found = await asyncio.to_thread(stat_all)  # one thread hop for the batch, not one per object
        except OSError as e:
            raise storage_error(e, "looking up an object") from e
        return [None if f is None else _object(f) for f in found]

    async def discard(self, ref: Ref) -> None:
        await asyncio.to_thread(self.blobs.discard_sync, ref)

    async def probe_writable(self, room: int = 0, objects: int = 0) -> None:
        try:
            await asyncio.to_thread(self.blobs.probe_writable, room, objects)
        except OSError as e:
            raise StorageUnavailable(f"the data dir is not writable: {e.strerror or e}") from e

    async def fetch(self, key: str) -> bytes | None:
        try:
            return await asyncio.to_thread(Path(key).read_bytes)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error(e, "reading an object") from e

    async def set_aside(self, key: str) -> str:
        path = Path(key)
        target = self.blobs.quarantine_dir / f"stray-{path.name}.{time.time_ns()}"

        def move() -> None:
            self.blobs.ops.rename(path, target)
            self.blobs.ops.fsync_dir(path.parent)
            self.blobs.ops.fsync_dir(target.parent)

        try:
            await asyncio.to_thread(move)
        except FileNotFoundError:
            return "gone meanwhile"
        except OSError as e:
            raise storage_error(e, "setting a stray file aside") from e
        return f"moved to {target}"

    async def walk(self) -> AsyncIterator[StoredObject]:
        found = self._objects()
        while batch := await asyncio.to_thread(lambda: list(itertools.islice(found, _WALK_BATCH))):
            for item in batch:
                yield item

    def _objects(self) -> Iterator[StoredObject]:
        # No Path per file: gc's plan walks every object of the store.
        for listing in self.blobs.list_objects():
            for name in listing.names:
                path = listing.path(name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue  # removed since the listing
                regular = stat.S_ISREG(st.st_mode) and name not in listing.irregular
                yield StoredObject(path, listing.ref(name) if regular else None, st.st_size, st.st_mtime)


def _object(found: StoredFile) -> StoredObject:
    return StoredObject(str(found.path), found.ref, found.size, found.mtime)
