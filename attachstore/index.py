"""The index: one SQLite database (WAL, synchronous=FULL) holding a row per published object.

A row is the publication of an object: the service commits it only after the object's bytes are durable, and
checks, inside the same write transaction, that the file is still there. Anything that removes an object file
does so while holding the same write lock, and only when no row publishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from .errors import AttachstoreError, StorageFull, StorageUnavailable

# One list of statements per schema version; never edit a released entry, append a new one.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE objects (
        ref         TEXT PRIMARY KEY,
        media_type  TEXT NOT NULL,
        bytes       INTEGER NOT NULL,
        width       INTEGER NOT NULL,
        height      INTEGER NOT NULL,
        frames      INTEGER NOT NULL,
        name        TEXT,
        created_at  REAL NOT NULL,
        lease_at    REAL NOT NULL,
        state       TEXT NOT NULL DEFAULT 'ok' CHECK (state IN ('ok', 'quarantined', 'missing'))
        ) STRICT""",
        "CREATE INDEX objects_lease ON objects (lease_at)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
BUSY_TIMEOUT_MS = 30_000


class IndexUnusable(Exception):
    """The index cannot be used (for example: written by a newer attachstore)."""


@dataclass(frozen=True, slots=True)
class ObjectRow:
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None
    created_at: float
    lease_at: float
    state: str = "ok"


_COLUMNS = "ref, media_type, bytes, width, height, frames, name, created_at, lease_at, state"


def _storage_error(e: sqlite3.Error) -> AttachstoreError:
    if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFull(f"the index cannot grow: {e}")
    return StorageUnavailable(f"index error while writing: {e}")


def _row(r: sqlite3.Row | tuple[object, ...]) -> ObjectRow:
    return ObjectRow(*r)


async def _connect(path: Path) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = FULL")
    await db.execute("PRAGMA foreign_keys = ON")
    return db


class Index:
    """Two connections: one writer behind an asyncio lock (a transaction at a time), one reader (WAL)."""

    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        self.path = path
        self._w = writer
        self._r = reader
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> Index:
        writer = await _connect(path)
        try:
            await _migrate(writer)
            reader = await _connect(path)
        except BaseException:
            await writer.close()
            raise
        return cls(path, writer, reader)

    async def close(self) -> None:
        await self._r.close()
        await self._w.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction, holding SQLite's write lock (BEGIN IMMEDIATE) from start to commit.
        SQLite's own failures leave as STORAGE_FULL or STORAGE_UNAVAILABLE, with nothing committed."""
        async with self._lock:
            try:
                await self._w.execute("BEGIN IMMEDIATE")
                try:
                    yield self._w
                    await self._w.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await self._w.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise _storage_error(e) from e

    async def ping(self) -> None:
        async with self._r.execute("SELECT 1") as cur:
            await cur.fetchone()

    async def get(self, ref: str) -> ObjectRow | None:
        async with self._r.execute(f"SELECT {_COLUMNS} FROM objects WHERE ref = ?", (ref,)) as cur:
            r = await cur.fetchone()
        return None if r is None else _row(r)

    async def renew(self, refs: Iterable[str], now: float | None = None) -> dict[str, ObjectRow]:
        """Renew the lease of every listed object that has a row; return those rows.

        Renewing before touching the file is what keeps a concurrent GC from collecting an object that an
        admission is about to dedup onto.
        """
        now = time.time() if now is None else now
        found: dict[str, ObjectRow] = {}
        async with self.write() as db:
            for ref in refs:
                async with db.execute(
                    f"UPDATE objects SET lease_at = ? WHERE ref = ? RETURNING {_COLUMNS}", (now, ref)
                ) as cur:
                    r = await cur.fetchone()
                if r is not None:
                    found[ref] = _row(r)
        return found

    async def publish(self, rows: Sequence[ObjectRow], check: Callable[[], object]) -> None:
        """Insert or refresh `rows` in one transaction. `check` runs under the write lock first and raises if
        any object file has gone; then nothing is committed."""
        async with self.write() as db:
            await asyncio.to_thread(check)
            await db.executemany(
                f"""INSERT INTO objects ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'ok')
                ON CONFLICT (ref) DO UPDATE SET
                    media_type = excluded.media_type, bytes = excluded.bytes, width = excluded.width,
                    height = excluded.height, frames = excluded.frames,
                    name = COALESCE(objects.name, excluded.name),
                    lease_at = excluded.lease_at, state = 'ok'""",
                [
                    (
                        r.ref,
                        r.media_type,
                        r.bytes,
                        r.width,
                        r.height,
                        r.frames,
                        r.name,
                        r.created_at,
                        r.lease_at,
                    )
                    for r in rows
                ],
            )

    async def discard_unpublished(self, refs: Iterable[str], remove: Callable[[str], object]) -> None:
        """Under the write lock, call `remove(ref)` for each ref that no row publishes."""
        async with self.write() as db:
            for ref in refs:
                async with db.execute("SELECT 1 FROM objects WHERE ref = ?", (ref,)) as cur:
                    if await cur.fetchone() is None:
                        await asyncio.to_thread(remove, ref)

    async def set_state(self, row: ObjectRow, state: str) -> None:
        """Record what a read found, unless the row changed since it was read (a concurrent admission renewed
        it, perhaps healing the object): then the finding is stale and the admission's row stands."""
        async with self.write() as db:
            await db.execute(
                "UPDATE objects SET state = ? WHERE ref = ? AND lease_at = ?", (state, row.ref, row.lease_at)
            )


async def _migrate(db: aiosqlite.Connection) -> None:
    await db.execute("BEGIN IMMEDIATE")
    try:
        async with db.execute("PRAGMA user_version") as cur:
            row = await cur.fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise IndexUnusable(
                f"the index has schema version {version}, newer than this attachstore knows "
                f"({SCHEMA_VERSION}); upgrade attachstore"
            )
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number]:
                await db.execute(statement)
            await db.execute(f"PRAGMA user_version = {number + 1}")
    except BaseException:
        await db.execute("ROLLBACK")
        raise
    await db.execute("COMMIT")
