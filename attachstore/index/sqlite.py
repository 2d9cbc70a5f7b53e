"""The index: one SQLite database (WAL, synchronous=FULL) holding a row per published object.

A row is the publication of an object: the service commits it only after the object's bytes are durable, and
checks, inside the same write transaction, that the file is still there. Anything that removes an object file
does so while holding the same write lock, and only when no row publishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

from ..errors import (
    AttachstoreError,
    NotFound,
    SessionConflict,
    SessionNotFound,
    StorageFull,
    StorageUnavailable,
)
from .rows import COLUMNS, Hold, ObjectRow, SessionKey, SessionRow
from .schema import migrate

BUSY_TIMEOUT_MS = 30_000
_IN_CHUNK = 4096  # refs per IN (...) list, well under SQLite's limit on variables
_OBJECT_COLUMNS = ", ".join(f"objects.{c}" for c in COLUMNS.split(", "))
_TENANT_COLUMNS = (
    "objects.ref, media_type, bytes, width, height, frames, grants.name, created_at, lease_at, state"
)


# Not held by a session and not a variant some source still links to: what GC may consider.
_UNHELD = """NOT EXISTS (SELECT 1 FROM holds WHERE holds.ref = objects.ref)
    AND NOT EXISTS (SELECT 1 FROM variants WHERE variants.variant = objects.ref)"""
_UPSERT_OBJECT = f"""INSERT INTO objects ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'ok')
    ON CONFLICT (ref) DO UPDATE SET
        media_type = excluded.media_type, bytes = excluded.bytes, width = excluded.width,
        height = excluded.height, frames = excluded.frames, name = COALESCE(objects.name, excluded.name),
        lease_at = excluded.lease_at, state = 'ok'"""


def _object_values(r: ObjectRow) -> tuple[object, ...]:
    return (r.ref, r.media_type, r.bytes, r.width, r.height, r.frames, r.name, r.created_at, r.lease_at)


def _storage_error(e: sqlite3.Error) -> AttachstoreError:
    if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFull(f"the index cannot grow: {e}")
    return StorageUnavailable(f"index error while writing: {e}")


def _row(r: sqlite3.Row | tuple[object, ...]) -> ObjectRow:
    return ObjectRow(*r)


def rows_in(db: sqlite3.Connection, refs: Sequence[str]) -> dict[str, ObjectRow]:
    """The rows of `refs` that exist, by ref, from a plain (synchronous) connection: for a process of the
    audit's that checks a share of the files against the index itself."""
    found: dict[str, ObjectRow] = {}
    for start in range(0, len(refs), _IN_CHUNK):
        chunk = refs[start : start + _IN_CHUNK]
        marks = ", ".join("?" * len(chunk))
        for r in db.execute(f"SELECT {COLUMNS} FROM objects WHERE ref IN ({marks})", chunk):
            found[r[0]] = _row(r)
    return found


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
            await migrate(writer)
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

    async def _read(self, sql: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        """One statement, run to its end in one trip to the connection's thread. A statement left open
        between trips would keep SQLite's read snapshot, and the reader would stop seeing new commits."""
        return list(await self._r.execute_fetchall(sql, params))

    async def ping(self) -> None:
        await self._read("SELECT 1")

    async def get(self, ref: str, tenant: str | None = None) -> ObjectRow | None:
        """The row, if `tenant` may see it (None: the operator, who sees everything)."""
        if tenant is None:
            found = await self._read(f"SELECT {COLUMNS} FROM objects WHERE ref = ?", (ref,))
        else:
            # The tenant's own display name stands in for the object's.
            found = await self._read(
                f"""SELECT {_TENANT_COLUMNS} FROM objects
                JOIN grants ON grants.ref = objects.ref AND grants.tenant = ? WHERE objects.ref = ?""",
                (tenant, ref),
            )
        return _row(found[0]) if found else None

    async def get_many(self, refs: Sequence[str], tenant: str | None = None) -> dict[str, ObjectRow]:
        """The rows of those of `refs` that `tenant` may see, a few hundred per statement."""
        rows: dict[str, ObjectRow] = {}
        for start in range(0, len(refs), 500):
            chunk = refs[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            if tenant is None:
                sql, params = f"SELECT {COLUMNS} FROM objects WHERE ref IN ({marks})", tuple(chunk)
            else:
                sql = f"""SELECT {_TENANT_COLUMNS} FROM objects JOIN grants
                ON grants.ref = objects.ref AND grants.tenant = ? WHERE objects.ref IN ({marks})"""
                params = (tenant, *chunk)
            rows |= {r.ref: r for r in map(_row, await self._read(sql, params))}
        return rows

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
                    f"UPDATE objects SET lease_at = ? WHERE ref = ? RETURNING {COLUMNS}", (now, ref)
                ) as cur:
                    r = await cur.fetchone()
                if r is not None:
                    found[ref] = _row(r)
        return found

    async def publish(
        self,
        rows: Sequence[ObjectRow],
        check: Callable[[], Awaitable[object]],
        hold: Hold | None = None,
        tenant: str | None = None,
    ) -> None:
        """Insert or refresh `rows` in one transaction, and add them to the session of `hold` if given.
        `check` and the hold's guard run under the write lock first; if one raises, nothing is committed."""
        async with self.write() as db:
            if hold is not None:
                hold.guard(await _require_session(db, hold.key))
            await check()
            await db.executemany(_UPSERT_OBJECT, [_object_values(r) for r in rows])
            if tenant is not None:
                await db.executemany(
                    """INSERT INTO grants (tenant, ref, name) VALUES (?, ?, ?)
                    ON CONFLICT (tenant, ref) DO UPDATE SET name = coalesce(grants.name, excluded.name)""",
                    [(tenant, r.ref, r.name) for r in rows],
                )
            if hold is not None:
                await _add_holds(
                    db, hold.key, [r.ref for r in rows], rows[0].lease_at if rows else time.time()
                )

    async def discard_unpublished(
        self, refs: Iterable[str], remove: Callable[[str], Awaitable[object]]
    ) -> None:
        """Under the write lock, call `remove(ref)` for each ref that no row publishes."""
        async with self.write() as db:
            for ref in refs:
                async with db.execute("SELECT 1 FROM objects WHERE ref = ?", (ref,)) as cur:
                    if await cur.fetchone() is None:
                        await remove(ref)

    async def published_now(self, ref: str) -> bool:
        """Whether a row publishes `ref`, asked under the write lock: a publishing transaction has either
        committed or not begun (the audit's confirmation that a file is stray)."""
        async with self.write() as db:
            return bool(await db.execute_fetchall("SELECT 1 FROM objects WHERE ref = ?", (ref,)))

    async def confirm_missing(self, ref: str, gone: Callable[[], Awaitable[bool]], mark: bool) -> str | None:
        """Under the write lock: the row's state if the row is still there and `gone()` confirms its object
        is absent, else None. With `mark`, a row in state 'ok' becomes 'missing' (and 'ok' is returned)."""
        async with self.write() as db:
            found = await db.execute_fetchall("SELECT state FROM objects WHERE ref = ?", (ref,))
            if not found or not await gone():
                return None
            state = str(next(iter(found))[0])
            if mark and state == "ok":
                await db.execute("UPDATE objects SET state = 'missing' WHERE ref = ?", (ref,))
            return state

    async def set_state(self, row: ObjectRow, state: str) -> None:
        """Record what a read found, unless the row changed since it was read (a concurrent admission renewed
        it, perhaps healing the object): then the finding is stale and the admission's row stands."""
        async with self.write() as db:
            await db.execute(
                "UPDATE objects SET state = ? WHERE ref = ? AND lease_at = ?", (state, row.ref, row.lease_at)
            )

    # -- garbage collection ----------------------------------------------------------------------------

    async def collectible(self, cutoff: float) -> list[ObjectRow]:
        """Rows with no hold whose lease is older than `cutoff`: the GC's candidates, to be re-checked."""
        found = await self._read(
            f"""SELECT {COLUMNS} FROM objects
            WHERE lease_at < ? AND {_UNHELD} ORDER BY ref""",
            (cutoff,),
        )
        return [_row(r) for r in found]

    async def refs(self) -> set[str]:
        return {r[0] for r in await self._read("SELECT ref FROM objects")}

    async def rows(self) -> list[ObjectRow]:
        return [_row(r) for r in await self._read(f"SELECT {COLUMNS} FROM objects ORDER BY ref")]

    async def collect(
        self, refs: Sequence[str], cutoff: float, remove: Callable[[str], Awaitable[object]]
    ) -> list[tuple[str, int]]:
        """Under the write lock, re-check each candidate (still no hold, not a live variant, lease still older
        than `cutoff`), call `remove(ref)` (which removes the file and makes that durable), then delete its
        row. The variants derived from it go with it, unless something else keeps them (a hold, a grant from
        an admission of the same bytes, another source). An admission that renewed the lease first keeps its
        object; one that comes after finds no row and writes the bytes again. Returns (ref, bytes) of every
        object collected, variants included."""
        collected: list[tuple[str, int]] = []
        async with self.write() as db:
            for ref in refs:
                found = await db.execute_fetchall(
                    f"SELECT bytes FROM objects WHERE ref = ? AND lease_at < ? AND {_UNHELD}", (ref, cutoff)
                )
                if not found:
                    continue
                variants = [
                    v
                    for (v,) in await db.execute_fetchall(
                        "SELECT variant FROM variants WHERE source = ?", (ref,)
                    )
                ]
                await remove(ref)
                await db.execute("DELETE FROM objects WHERE ref = ?", (ref,))  # its variant links cascade
                collected.append((ref, int(next(iter(found))[0])))
                for v in variants:
                    # A variant renewed since the cutoff is being derived again for another source that
                    # yields the same bytes: it stays, and goes later as an unheld object if nothing links it.
                    orphan = await db.execute_fetchall(
                        f"""SELECT bytes FROM objects WHERE ref = ? AND lease_at < ? AND {_UNHELD}
                        AND NOT EXISTS (SELECT 1 FROM grants WHERE grants.ref = objects.ref)""",
                        (v, cutoff),
                    )
                    if orphan:
                        await remove(v)
                        await db.execute("DELETE FROM objects WHERE ref = ?", (v,))
                        collected.append((v, int(next(iter(orphan))[0])))
        return collected

    @asynccontextmanager
    async def sweeping(self) -> AsyncIterator[None]:
        """Held for a whole gc run. SQLite needs nothing more than its write lock: concurrent sweeps are
        safe, each candidate being re-checked under it (PgIndex makes sweeps take turns across nodes)."""
        yield

    # -- variants --------------------------------------------------------------------------------------

    async def variant(self, source: str, spec: str) -> ObjectRow | None:
        """The row of the variant of `source` derived with `spec`, if there is one."""
        found = await self._read(
            f"""SELECT {_OBJECT_COLUMNS} FROM variants JOIN objects ON objects.ref = variants.variant
            WHERE variants.source = ? AND variants.spec = ?""",
            (source, spec),
        )
        return _row(found[0]) if found else None

    async def publish_variant(
        self, row: ObjectRow, source: str, spec: str, check: Callable[[], Awaitable[object]]
    ) -> bool:
        """Publish a derived object and link it to its source, in one transaction; False (nothing committed)
        when the source is gone, collected meanwhile. `check` runs under the write lock first."""
        async with self.write() as db:
            if not await db.execute_fetchall("SELECT 1 FROM objects WHERE ref = ?", (source,)):
                return False
            await check()
            await db.execute(f"{_UPSERT_OBJECT}", _object_values(row))
            await db.execute(
                """INSERT INTO variants (source, spec, variant, created_at) VALUES (?, ?, ?, ?)
                ON CONFLICT (source, spec) DO UPDATE SET variant = excluded.variant""",
                (source, spec, row.ref, row.lease_at),
            )
        return True

    # -- figures for /metrics ----------------------------------------------------------------------------

    async def stats(self) -> tuple[int, int]:
        """How many objects the index holds, and their bytes."""
        [(count, size)] = await self._read("SELECT count(*), coalesce(sum(bytes), 0) FROM objects")
        return int(count), int(size)

    async def record_run(self, command: str, figures: Mapping[str, float], now: float | None = None) -> None:
        async with self.write() as db:
            await db.execute(
                "INSERT OR REPLACE INTO runs (command, finished_at, figures) VALUES (?, ?, ?)",
                (command, time.time() if now is None else now, json.dumps(figures)),
            )

    async def runs(self) -> dict[str, tuple[float, dict[str, float]]]:
        found = await self._read("SELECT command, finished_at, figures FROM runs")
        return {command: (at, json.loads(figures)) for command, at, figures in found}

    # -- sessions and holds --------------------------------------------------------------------------------

    async def get_session(self, key: SessionKey) -> SessionRow | None:
        return await _session(self._r, key)

    async def create_session(self, key: SessionKey, route: str | None, now: float) -> tuple[SessionRow, bool]:
        """Create, or find the same session again. False when it already existed with this route."""
        async with self.write() as db:
            existing = await _session(db, key)
            if existing is not None:
                if existing.route != route:
                    raise SessionConflict(
                        f"session {key[1]!r} already exists with route {existing.route!r}",
                        hint="switch its route with POST /v1/sessions/{id}/route, or use another session id",
                    )
                return existing, False
            await db.execute(
                "INSERT INTO sessions (tenant, id, route, created_at) VALUES (?, ?, ?, ?)", (*key, route, now)
            )
        return SessionRow(key[0], key[1], route, now, ()), True

    async def set_route(
        self, key: SessionKey, route: str | None, guard: Callable[[SessionRow], object]
    ) -> SessionRow:
        """Switch the route after `guard(session)` (run under the write lock) has not raised."""
        async with self.write() as db:
            current = await _require_session(db, key)
            guard(current)
            await db.execute("UPDATE sessions SET route = ? WHERE tenant = ? AND id = ?", (route, *key))
        return SessionRow(current.tenant, current.id, route, current.created_at, current.holds)

    async def fork(self, source: SessionKey, target: SessionKey, now: float) -> SessionRow:
        """A new session with the source's route and a copy of all its holds, in one transaction."""
        async with self.write() as db:
            original = await _require_session(db, source)
            if await _session(db, target, with_holds=False) is not None:
                raise SessionConflict(
                    f"session {target[1]!r} already exists", hint="fork into a new session id"
                )
            await db.execute(
                "INSERT INTO sessions (tenant, id, route, created_at) VALUES (?, ?, ?, ?)",
                (*target, original.route, now),
            )
            await _add_holds(db, target, original.holds, now)
        return SessionRow(target[0], target[1], original.route, now, original.holds)

    async def add_holds(self, hold: Hold, refs: Sequence[str], now: float) -> SessionRow:
        """Hold existing objects: all of them or, if one has no row, none (ATTACHMENT_NOT_FOUND)."""
        key = hold.key
        async with self.write() as db:
            hold.guard(await _require_session(db, key))
            for ref in refs:
                # A tenant holds only what it may see; anything else answers like a ref that does not exist.
                async with db.execute(
                    """SELECT 1 FROM objects WHERE ref = ? AND (? OR EXISTS
                    (SELECT 1 FROM grants WHERE grants.ref = objects.ref AND tenant = ?))""",
                    (ref, hold.everything, key[0]),
                ) as cur:
                    if await cur.fetchone() is None:
                        raise NotFound(f"no attachment {ref}")
            await _add_holds(db, key, refs, now)
            session = await _require_session(db, key)
        return session

    async def delete_session(self, key: SessionKey, now: float) -> int:
        """Release every hold of the session, then forget it. Returns how many holds were released."""
        async with self.write() as db:
            session = await _require_session(db, key)
            await _renew(db, session.holds, now)  # the grace period starts at the release
            await db.execute("DELETE FROM sessions WHERE tenant = ? AND id = ?", key)  # holds cascade
        return len(session.holds)


async def _session(db: aiosqlite.Connection, key: SessionKey, with_holds: bool = True) -> SessionRow | None:
    """Each statement runs to its end in one trip (see Index._read)."""
    sql = "SELECT route, created_at FROM sessions WHERE tenant = ? AND id = ?"
    found = list(await db.execute_fetchall(sql, key))
    if not found:
        return None
    holds: tuple[str, ...] = ()
    if with_holds:
        sql = "SELECT ref FROM holds WHERE tenant = ? AND session = ? ORDER BY created_at, rowid"
        holds = tuple(r[0] for r in await db.execute_fetchall(sql, key))
    return SessionRow(key[0], key[1], found[0][0], found[0][1], holds)


async def _require_session(db: aiosqlite.Connection, key: SessionKey) -> SessionRow:
    session = await _session(db, key)
    if session is None:
        raise SessionNotFound(f"no session {key[1]!r}", hint="create it with PUT /v1/sessions/{id}")
    return session


async def _renew(db: aiosqlite.Connection, refs: Iterable[str], now: float) -> None:
    await db.executemany("UPDATE objects SET lease_at = ? WHERE ref = ?", [(now, ref) for ref in refs])


async def _add_holds(db: aiosqlite.Connection, key: SessionKey, refs: Iterable[str], now: float) -> None:
    """Every hold change renews the held objects' leases."""
    refs = list(refs)
    await db.executemany(
        "INSERT OR IGNORE INTO holds (tenant, session, ref, created_at) VALUES (?, ?, ?, ?)",
        [(*key, ref, now) for ref in refs],
    )
    await _renew(db, refs, now)
