"""The index in one SQLite database (WAL, synchronous=FULL), the embedded default: one writer behind an
asyncio lock and `BEGIN IMMEDIATE`, one reader; the write lock is all the locking the protocol asks for
(docs/design.md, "The index")."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ..errors import AttachstoreError, StorageFull, StorageUnavailable
from ..text import human_bytes
from .dialect import Reads, Row, Tx
from .protocol import Index
from .rows import COLUMNS, ObjectRow
from .schema import migrate

BUSY_TIMEOUT_MS = 30_000
_IN_CHUNK = 4096  # refs per IN (...) list in rows_in, well under SQLite's limit on variables
_REFS_PER_STATEMENT = 500  # refs per IN (...) list of the index's own statements
# The room /readyz asks of the index's file system: the WAL grows up to its checkpoint (SQLite's default,
# 1000 pages of 4 KiB) before it is copied into the database, which may grow by as much.
READY_ROOM = 8 << 20

T = TypeVar("T")


def rows_in(db: sqlite3.Connection, refs: Sequence[str]) -> dict[str, ObjectRow]:
    """From a plain (synchronous) connection, for an audit process that checks a share of the files."""
    found: dict[str, ObjectRow] = {}
    for start in range(0, len(refs), _IN_CHUNK):
        chunk = refs[start : start + _IN_CHUNK]
        marks = ", ".join("?" * len(chunk))
        for r in db.execute(f"SELECT {COLUMNS} FROM objects WHERE ref IN ({marks})", chunk):
            found[r[0]] = ObjectRow(*r)
    return found


@lru_cache(maxsize=1024)
def _dialect(sql: str) -> str:
    return re.sub(r"\$(\d+)", r"?\1", sql)


def _storage_error(e: sqlite3.Error) -> AttachstoreError:
    if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFull(f"the index cannot grow: {e}")
    return StorageUnavailable(f"index error while writing: {e}")


class _Reads:
    """Each statement runs to its end in one trip to the connection's thread: one left open would keep
    SQLite's read snapshot, and the reader would stop seeing new commits."""

    hold_order = "rowid"

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: object) -> list[Row]:
        return list(await self._db.execute_fetchall(_dialect(sql), args))

    def refs_in(self, column: str, refs: Sequence[str], first: int) -> Iterator[tuple[str, Sequence[object]]]:
        for start in range(0, len(refs), _REFS_PER_STATEMENT):
            chunk = refs[start : start + _REFS_PER_STATEMENT]
            yield f"{column} IN ({', '.join(f'${first + i}' for i in range(len(chunk)))})", chunk


class _Tx(_Reads):
    exclusive = True

    async def execute(self, sql: str, *args: object) -> None:
        await self._db.execute(_dialect(sql), args)

    async def executemany(self, sql: str, args: Iterable[Sequence[object]]) -> None:
        await self._db.executemany(_dialect(sql), args)

    async def lock_refs(self, refs: Iterable[str]) -> None: ...  # the write lock covers every ref


async def _connect(path: Path) -> aiosqlite.Connection:
    """Closed again if it fails or is cancelled before it is ready (GET /v1/stats's count opens one, and a
    store closing cancels the count): never left to the garbage collector."""
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await _wal(db)
        await db.execute("PRAGMA synchronous = FULL")
        await db.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        await db.close()
        raise
    return db


async def _wal(db: aiosqlite.Connection) -> None:
    """The switch takes an exclusive lock and answers SQLITE_BUSY at once, not through the busy handler, while
    another process opens the same new store."""
    for _ in range(BUSY_TIMEOUT_MS // 20):
        try:
            await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise
            await asyncio.sleep(0.02)
    await db.execute("PRAGMA journal_mode = WAL")


class SqliteIndex(Index):
    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        super().__init__(_Reads(reader))
        self.path = path
        self._w = writer
        self._r = reader
        self._lock = asyncio.Lock()
        self._waiting: list[tuple[Callable[[Tx], Awaitable[Any]], asyncio.Future[Any]]] = []
        self._committer: asyncio.Task[None] | None = None
        self._background: aiosqlite.Connection | None = None  # a reader of its own, opened when first asked

    @classmethod
    async def open(cls, path: Path) -> SqliteIndex:
        writer = await _connect(path)
        try:
            await migrate(writer)
            reader = await _connect(path)
        except BaseException:
            await writer.close()
            raise
        return cls(path, writer, reader)

    async def close(self) -> None:
        if self._committer is not None:
            await asyncio.gather(self._committer, return_exceptions=True)
        if self._background is not None:
            await self._background.close()
        await self._r.close()
        await self._w.close()

    async def background_reads(self) -> Reads:
        """Its own connection and thread: a long count never holds up the reader the requests share."""
        if self._background is None:
            self._background = await _connect(self.path)
        return _Reads(self._background)

    async def ready(self) -> None:
        # also room to grow: a full file system fails every write transaction (STORAGE_FULL)
        await super().ready()
        fs = await asyncio.to_thread(os.statvfs, self.path.parent)
        free = fs.f_bavail * fs.f_frsize
        if fs.f_flag & os.ST_RDONLY:
            raise StorageUnavailable(f"the file system of {self.path} is read-only")
        if free < READY_ROOM:
            raise StorageUnavailable(
                f"the file system of {self.path} has {human_bytes(free)} free, less than the index may need "
                f"to grow by ({human_bytes(READY_ROOM)})"
            )

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
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

    async def _transaction(self, work: Callable[[Tx], Awaitable[T]]) -> T:
        """Group commit (docs/design.md, "Admission, step by step", step 10): a caller cancelled before its
        turn is left out; once begun, it commits with the others."""
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((work, done))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_groups())
        return await done

    async def _commit_groups(self) -> None:
        while self._waiting:
            group, self._waiting = [(w, f) for w, f in self._waiting if not f.cancelled()], []
            if not group:
                continue
            answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
            try:
                async with self.write() as db:
                    for work, done in group:
                        await db.execute("SAVEPOINT work")
                        try:
                            value = await work(_Tx(db))
                        except Exception as e:
                            await db.execute("ROLLBACK TO work")  # fails when the transaction is gone
                            await db.execute("RELEASE work")
                            answers.append(
                                (done, None, _storage_error(e) if isinstance(e, sqlite3.Error) else e)
                            )
                            continue
                        await db.execute("RELEASE work")
                        answers.append((done, value, None))
            except BaseException as e:  # nothing of the group is committed
                for _, done in group:
                    if not done.done():
                        done.set_exception(e if isinstance(e, Exception) else AttachstoreError("cancelled"))
                if not isinstance(e, Exception):
                    raise
                continue
            for done, value, error in answers:
                if done.done():
                    continue
                if error is None:
                    done.set_result(value)
                else:
                    done.set_exception(error)

    @asynccontextmanager
    async def sweeping(self) -> AsyncIterator[None]:
        # concurrent sweeps are safe under the write lock, each candidate re-checked under it
        yield
