"""Local blob store: bytes under names derived from their reference, written with a complete fsync discipline.

It keeps the contract written in backend.py, and never leaves a partially written file at an object path
(docs/design.md, "The write order for one object, and why each step is there").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import time
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path

from ..errors import Corrupt, Missing, StorageUnavailable
from ..refs import Buffer, Ref, hasher
from ..text import human_bytes
from .fileops import OBJECT_MODE, FileOps, NotRegular, open_regular, read_sized, storage_error
from .layout import object_name
from .listing import Listing, StoredFile, listings, sorted_entries, stored

_READ_CHUNK = 1 << 20
# A staging file, or an object file without a row, younger than this may belong to an admission in flight
# (between its write and its commit). The GC and the audit leave such files alone whatever the grace.
IN_FLIGHT = 60.0
_PLACE_ATTEMPTS = 3
_PROBE_BLOCK = 4096  # what the readiness probe writes: one block of the file system
_INODES_PER_OBJECT = 4  # a new object's file, and up to three new bucket directories


# What a read's bytes must pass in place of their address (the keyed check of the index row).
Verify = Callable[[Buffer], bool]


class Put(Enum):
    EXISTED = "existed"  # an intact copy was already there
    CREATED = "created"
    HEALED = "healed"  # a damaged or missing copy was replaced


class LocalBlobStore:
    def __init__(self, root: Path, ops: FileOps | None = None) -> None:
        self.root = root
        self.objects = root / "objects"
        self._objects = str(self.objects)
        self.staging = root / "tmp"
        self.quarantine_dir = root / "quarantine"
        self.ops = ops or FileOps()

    def create_layout(self) -> None:
        for d in (self.root, self.objects, self.staging, self.quarantine_dir):
            d.mkdir(mode=0o755, parents=True, exist_ok=True)
        for d in (self.root.parent, self.root):
            self.ops.fsync_dir(d)

    def path(self, ref: Ref) -> Path:
        """Pure function of an already validated `Ref`."""
        return Path(self.filename(ref))

    def filename(self, ref: Ref) -> str:
        return f"{self._objects}/{object_name(ref)}"

    # -- async surface: every file-system call runs off the event loop ---------------------------------

    async def put(self, ref: Ref, data: bytes | memoryview) -> Put:
        return await asyncio.to_thread(self.put_sync, ref, data)

    async def read(self, ref: Ref, size: int, verify: Verify | None = None) -> bytes:
        return await asyncio.to_thread(self.read_sync, ref, size, verify)

    async def quarantine(self, ref: Ref) -> str:
        return await asyncio.to_thread(self.quarantine_sync, ref)

    def stat(self, ref: Ref) -> StoredFile | None:
        path = self.path(ref)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return StoredFile(path, ref, st.st_size, st.st_mtime)

    # -- write path ------------------------------------------------------------------------------------

    def put_sync(self, ref: Ref, data: bytes | memoryview) -> Put:
        final = self.path(ref)
        state = self._check(ref, final, len(data))
        if state == "intact":
            # Another writer may have linked it without having made the name durable yet.
            try:
                self._sync_chain(final)
            except OSError as e:
                raise storage_error(e, "syncing an existing object") from e
            return Put.EXISTED
        try:
            staging = self._stage(data)
        except OSError as e:
            raise storage_error(e, "writing a staging file") from e
        try:
            attempts = 1
            while True:
                try:
                    return self._place(ref, staging, final, len(data), state)
                except FileNotFoundError:
                    # The GC removed an empty bucket directory between our mkdir and our link, or (an
                    # operator with a tiny grace) our staging file: again, from the start if need be.
                    if attempts == _PLACE_ATTEMPTS:
                        raise
                    attempts += 1
                    if not os.path.exists(staging):
                        staging = self._stage(data)
        except OSError as e:
            raise storage_error(e, "publishing an object") from e
        finally:
            self._remove_quietly(staging)

    def _place(self, ref: Ref, staging: Path, final: Path, size: int, state: str) -> Put:
        self._make_parents(final.parent)
        outcome = Put.CREATED if state == "missing" else Put.HEALED
        if state == "missing":
            try:
                self.ops.link(staging, final)
            except FileExistsError:
                # A concurrent writer published first: keep its copy if it is intact.
                if self._check(ref, final, size) == "intact":
                    outcome = Put.EXISTED
                else:
                    self._replace(staging, final)
                    outcome = Put.HEALED
        else:
            self._replace(staging, final)
        self._sync_chain(final)
        return outcome

    def _replace(self, staging: Path, final: Path) -> None:
        target = self._quarantine_name(final)
        try:
            self.ops.link(final, target)
            self.ops.fsync_dir(self.quarantine_dir)
        except FileNotFoundError:
            pass
        self.ops.rename(staging, final)

    def _sync_chain(self, final: Path) -> None:
        """Each directory up to objects/ is fsynced: its entries for the levels below may be new (ours or a
        concurrent writer's)."""
        directory = final.parent
        while True:
            self.ops.fsync_dir(directory)
            if directory == self.objects:
                return
            directory = directory.parent

    def _stage(self, data: bytes | memoryview) -> Path:
        path = self.staging / f"{secrets.token_hex(16)}.tmp"
        fd = self.ops.open_exclusive(path)
        try:
            view = memoryview(data)
            while view:
                written = self.ops.write(fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, "short write")
                view = view[written:]
            self.ops.fsync(fd)
            self.ops.fchmod(fd, OBJECT_MODE)
        except BaseException:
            self.ops.close(fd)
            self._remove_quietly(path)
            raise
        self.ops.close(fd)
        return path

    def _make_parents(self, directory: Path) -> None:
        missing: list[Path] = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                self.ops.mkdir(d)

    def _check(self, ref: Ref, path: Path, size: int) -> str:
        try:
            return "intact" if self._hash_file(ref, path, size) else "damaged"
        except FileNotFoundError:
            return "missing"
        except OSError as e:
            raise storage_error(e, "verifying an existing object") from e

    @staticmethod
    def _hash_file(ref: Ref, path: Path, size: int | None) -> bool:
        try:
            f = open_regular(path)
        except NotRegular:
            return False
        with f:
            if size is not None and os.fstat(f.fileno()).st_size != size:
                return False
            h = hasher(ref.algorithm)
            while chunk := f.read(_READ_CHUNK):
                h.update(chunk)
        return h.hexdigest() == ref.digest

    def _quarantine_name(self, path: Path) -> Path:
        algorithm = path.parent.parent.parent.name
        return self.quarantine_dir / f"{algorithm}-{path.name}.{time.time_ns()}"

    def _remove_quietly(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            self.ops.unlink(path)

    # -- read path -------------------------------------------------------------------------------------

    def read_sync(self, ref: Ref, size: int, verify: Verify | None = None) -> bytes:
        path = self.path(ref)
        try:
            data = read_sized(path, size)
        except FileNotFoundError:
            raise Missing(f"the bytes of {ref} are missing from the store") from None
        except NotRegular:
            raise Corrupt(f"what is stored under {ref} is not a regular file") from None
        except OSError as e:
            raise storage_error(e, "reading an object") from e
        if data is None or len(data) != size or not (ref.matches(data) if verify is None else verify(data)):
            raise Corrupt(f"the stored bytes of {ref} do not match their reference")
        return data

    def quarantine_sync(self, ref: Ref) -> str:
        """'quarantined', 'missing', or 'intact' (a concurrent heal got there first; its bytes are put
        back)."""
        path = self.path(ref)
        target = self._quarantine_name(path)
        try:
            self.ops.rename(path, target)
            intact = self._hash_file(ref, target, None)  # its size is the row's, not known here
            if intact:
                with contextlib.suppress(FileExistsError):
                    self.ops.link(target, path)
                self.ops.unlink(target)
            self._sync_after_removal(path.parent)
            self.ops.fsync_dir(self.quarantine_dir)
        except FileNotFoundError:
            return "missing"
        except OSError as e:
            raise storage_error(e, "quarantining an object") from e
        return "intact" if intact else "quarantined"

    def discard_sync(self, ref: Ref) -> None:
        """The caller holds the index write lock: no row publishes the object."""
        path = self.path(ref)
        try:
            self.ops.unlink(path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise storage_error(e, "removing an unpublished object") from e
        self._sync_after_removal(path.parent)

    def probe_writable(self, room: int = 0, objects: int = 0) -> None:
        """An empty file proves little (it is created on a full disk): a block of random bytes is written and
        fsynced, where a full disk, a quota or a read-only remount says no, often only at the fsync."""
        fs = self.ops.statvfs(self.staging)
        free = fs.f_bavail * fs.f_frsize
        if free < room:
            raise StorageUnavailable(
                f"the data dir has {human_bytes(free)} free, less than one admission may need "
                f"({human_bytes(room)})"
            )
        inodes = objects * _INODES_PER_OBJECT
        if fs.f_files and fs.f_favail < inodes:  # f_files is 0 where a file system has no fixed number
            raise StorageUnavailable(
                f"the data dir has {fs.f_favail} inodes free, fewer than one admission may need ({inodes})"
            )
        # random bytes: a compressing file system still has to store them
        self._remove_quietly(self._stage(os.urandom(_PROBE_BLOCK)))

    # -- walking, for the GC and the audit -----------------------------------------------------------------

    def walk_objects(self) -> Iterator[StoredFile]:
        for listing in self.list_objects():
            for name in listing.names:
                yield stored(listing.path(name), listing.ref(name))

    def list_objects(self) -> Iterator[Listing]:
        return listings(str(self.objects))

    def walk_staging(self) -> Iterator[StoredFile]:
        for entry in sorted_entries(self.staging):
            yield stored(entry, None)

    def remove_file(self, path: Path) -> None:
        try:
            self.ops.unlink(path)
        except FileNotFoundError:
            return
        self._sync_after_removal(path.parent)

    def _sync_after_removal(self, directory: Path) -> None:
        """If a concurrent gc removed the directory itself, that removal is the one to make durable, and it
        made it so."""
        with contextlib.suppress(FileNotFoundError):
            self.ops.fsync_dir(directory)

    def remove_empty_buckets(self) -> int:
        """A writer that loses its directory to this between mkdir and link tries again (`put_sync`)."""
        removed = 0
        for algorithm in sorted_entries(self.objects):
            for first in sorted_entries(algorithm):
                for second in sorted_entries(first):
                    removed += self._rmdir(second)
                removed += self._rmdir(first)
        return removed

    def _rmdir(self, path: Path) -> int:
        try:
            self.ops.rmdir(path)
        except OSError:  # not empty, not a directory, or gone already: leave it
            return 0
        self._sync_after_removal(path.parent)
        return 1
