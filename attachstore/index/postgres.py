"""The index in PostgreSQL, for many stateless daemons sharing one database.

`PgIndex` has the interface and the semantics of `index.Index` (SQLite); one suite checks both
(tests/index/test_conformance.py). The schema is the same, version for version (`pgschema.MIGRATIONS`, twin of
`schema.MIGRATIONS`), tracked in the one-row table `attachstore_schema` instead of PRAGMA user_version.

The protocol. SQLite runs every write transaction behind one lock, and the admission/GC protocol
(docs/operations.md) leans on that: whatever runs under the lock sees a store that nobody else changes.
Here transactions run at READ COMMITTED on many connections at once, and the same guarantees come from
narrower locks, each held until its transaction ends:

- Every transaction that publishes, renews, collects, discards, confirms (`published_now`,
  `confirm_missing`) or links variants of a ref first takes a transaction-level advisory lock on that ref
  (`pg_advisory_xact_lock` on a 64-bit hash of the ref), all of them in sorted order, in a statement of its
  own: the statements after it see every transaction that held the lock before as committed. The lock covers
  refs that have no row yet, which row locks cannot. So, as with SQLite's lock:
  1. an admission's renewal and a GC sweep of the same ref happen one after the other; a sweep that comes
     second sees the fresh lease and skips the object, an admission that comes second finds no row and
     writes the bytes again;
  2. a sweep re-checks each candidate (no hold, not a linked variant, lease older than the cutoff), removes
     the file and deletes the row without anyone publishing, holding or linking that ref in between;
  3. `publish` runs its check that the files are still there, and `discard_unpublished` removes a file only
     where no row publishes it, each under the locks of its refs: one of them sees the other's outcome.
- Every transaction that changes a session or its holds (create, route, fork, holds, delete, and a publish
  that holds) locks the session row (`SELECT ... FOR UPDATE`) before it reads the holds and runs the guard;
  the holds are read in a later statement, so they include whatever the previous lock holder committed.
- Adding holds (`add_holds`, `publish` with a hold) also takes the locks of the refs held, so a hold never
  slips in between a sweep's re-check and its delete. Fork and delete_session need no ref locks: the refs they
  touch are held by a session they have locked, and a sweep leaves held refs alone.
- Lock order: session row, then ref advisory locks (sorted by key), then object rows (sorted by ref).
  `collect` may add the locks of variants linked between its first look and its locks, out of order, but
  before it removes anything. A deadlock or serialization failure that happens anyway is retried (the whole
  method, callbacks included: they re-check under the locks, and removing a removed file is a no-op).
- `sweeping()` holds a session-level advisory lock for a whole GC run, so that only one GC sweeps at a time
  across every node (with SQLite two runs are safe, only redundant; here the second waits for the first).

A lock not granted within `LOCK_TIMEOUT` (like SQLite's busy timeout) fails with STORAGE_UNAVAILABLE. Driver
failures never leave as asyncpg exceptions: a full disk is StorageFull, anything else StorageUnavailable
(`pgdriver.storage_error`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import ParamSpec, TypeVar, cast

import asyncpg  # type: ignore[import-untyped,unused-ignore]

from ..errors import NotFound, SessionConflict, SessionNotFound, StorageUnavailable
from .pgdriver import (
    CONNECTION_ERRORS,
    DRIVER_ERRORS,
    LOCK_TIMEOUT,
    RETRY_SQLSTATES,
    Connection,
    Pool,
    Record,
    storage_error,
)
from .pgschema import LOCK_SPACE, SWEEP_LOCK, migrate
from .pgschema import MIGRATIONS as MIGRATIONS  # re-exported: pgindex.MIGRATIONS is read by the tests
from .rows import COLUMNS, Hold, ObjectRow, SessionKey, SessionRow

CONNECT_TIMEOUT = 10.0
_ATTEMPTS = 5  # of a transaction that failed on a deadlock or a serialization failure

_OBJECT_COLUMNS = ", ".join(f"objects.{c.strip()}" for c in COLUMNS.split(","))
_TENANT_COLUMNS = _OBJECT_COLUMNS.replace("objects.name", "grants.name")
_UNHELD = """NOT EXISTS (SELECT 1 FROM holds WHERE holds.ref = objects.ref)
    AND NOT EXISTS (SELECT 1 FROM variants WHERE variants.variant = objects.ref)"""
_UPSERT_OBJECT = f"""INSERT INTO objects ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'ok')
    ON CONFLICT (ref) DO UPDATE SET
        media_type = excluded.media_type, bytes = excluded.bytes, width = excluded.width,
        height = excluded.height, frames = excluded.frames, name = COALESCE(objects.name, excluded.name),
        lease_at = excluded.lease_at, state = 'ok'"""
# Object rows are locked in ref order by every statement that updates several, so those never deadlock.
_RENEW = f"""UPDATE objects SET lease_at = $1 WHERE ref IN
    (SELECT ref FROM objects WHERE ref = ANY($2::text[]) ORDER BY ref FOR NO KEY UPDATE)
    RETURNING {COLUMNS}"""

P = ParamSpec("P")
T = TypeVar("T")


class _CallbackFailed(Exception):
    """Carries an exception raised by a caller's callback past the driver-error handling, unchanged."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


async def _call(fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return await fn(*args, **kwargs)
    except Exception as e:
        raise _CallbackFailed(e) from e


def _guard(guard: Callable[[SessionRow], object], session: SessionRow) -> None:
    try:
        guard(session)
    except Exception as e:
        raise _CallbackFailed(e) from e


def ref_key(ref: str) -> int:
    """The advisory lock key of a ref: 64 bits of its hash, as PostgreSQL's signed bigint."""
    return int.from_bytes(hashlib.blake2b(ref.encode(), digest_size=8).digest(), "big", signed=True)


async def _lock_refs(db: Connection, refs: Iterable[str]) -> None:
    """The refs' advisory locks, in key order (no two lockers wait on each other), in a statement of its own:
    what the statements after it read includes everything the previous holders committed."""
    keys = sorted({ref_key(r) for r in refs})
    if keys:
        await db.execute("SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS u(k)", keys)


def _row(r: Record) -> ObjectRow:
    return ObjectRow(*r)


def _object_values(r: ObjectRow) -> tuple[object, ...]:
    return (r.ref, r.media_type, r.bytes, r.width, r.height, r.frames, r.name, r.created_at, r.lease_at)


async def _keep_session_state(db: object) -> None:
    """The pool's reset: nothing but the rollback asyncpg does anyway. The default reset (RESET ALL, advisory
    unlock, ...) costs a round trip per use; nothing here changes session state except `sweeping()`, which
    restores it."""


class PgIndex:
    """A pool of connections; every method is one transaction (or one statement for reads)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._closed = False

    @classmethod
    async def open(cls, dsn: str, *, min_size: int = 1, max_size: int = 10) -> PgIndex:
        """Connect and migrate. `max_size` is at least 2: `sweeping()` keeps one connection for a gc run."""
        if max_size < 2 or not 0 <= min_size <= max_size:
            raise ValueError(
                f"pool sizes: need 0 <= min_size <= max_size and max_size >= 2, got {min_size}, {max_size}"
            )
        try:
            pool = cast(
                Pool,
                await asyncpg.create_pool(
                    dsn,
                    min_size=min_size,
                    max_size=max_size,
                    timeout=CONNECT_TIMEOUT,
                    reset=_keep_session_state,
                    server_settings={"application_name": "attachstore", "lock_timeout": LOCK_TIMEOUT},
                ),
            )
        except DRIVER_ERRORS as e:
            raise StorageUnavailable(f"cannot connect to the PostgreSQL index: {e}") from e
        try:
            db = await pool.acquire()
            try:
                await migrate(db)
            finally:
                await pool.release(db)
        except BaseException as e:
            await pool.close()
            if isinstance(e, DRIVER_ERRORS):
                raise storage_error(e, False) from e
            raise
        return cls(pool)

    async def close(self) -> None:
        self._closed = True
        await self._pool.close()

    # -- running statements ----------------------------------------------------------------------------------

    async def _transaction(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """`work` in one transaction, run again from the start after a deadlock or serialization failure.
        Exceptions from callbacks leave unchanged; the driver's as StorageFull / StorageUnavailable."""
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                db = await self._pool.acquire()
                try:
                    async with db.transaction():
                        return await work(db)
                finally:
                    await self._pool.release(db)
            except _CallbackFailed as e:
                raise e.error from None
            except DRIVER_ERRORS as e:
                if getattr(e, "sqlstate", None) in RETRY_SQLSTATES and attempt < _ATTEMPTS:
                    await asyncio.sleep(0.005 * attempt)
                    continue
                raise storage_error(e, self._closed) from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fetch(self, sql: str, *args: object) -> list[Record]:
        """One statement on any connection of the pool; tried twice if the first connection was lost."""
        for attempt in (1, 2):
            try:
                return await self._pool.fetch(sql, *args)
            except DRIVER_ERRORS as e:
                lost = isinstance(e, CONNECTION_ERRORS) and not self._closed
                if lost and attempt == 1:
                    continue
                raise storage_error(e, self._closed) from e
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def sweeping(self) -> AsyncIterator[None]:
        """Held for a whole gc run: one gc sweeps at a time across every node on this database; a second
        waits for the first. If the connection is lost meanwhile, the lock goes with it (the sweep itself
        stays safe: only the exclusion of a redundant second run is lost)."""
        try:
            db = await self._pool.acquire()
        except DRIVER_ERRORS as e:
            raise storage_error(e, self._closed) from e
        try:
            try:
                await db.execute("SET lock_timeout = 0")  # a gc run may take long; the next one waits
                await db.execute("SELECT pg_advisory_lock($1, $2)", LOCK_SPACE, SWEEP_LOCK)
                await db.execute("RESET lock_timeout")
            except BaseException as e:
                # Cancelled or failed half-way: the session may hold the lock or the setting; end it.
                db.terminate()
                if isinstance(e, DRIVER_ERRORS):
                    raise storage_error(e, self._closed) from e
                raise
            try:
                yield
            finally:
                try:
                    await db.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_SPACE, SWEEP_LOCK)
                except BaseException as e:
                    db.terminate()  # the server releases a closed session's locks
                    if not isinstance(e, DRIVER_ERRORS):
                        raise
        finally:
            await self._pool.release(db)

    # -- objects ---------------------------------------------------------------------------------------------

    async def ping(self) -> None:
        await self._fetch("SELECT 1")

    async def get(self, ref: str, tenant: str | None = None) -> ObjectRow | None:
        """The row, if `tenant` may see it (None: the operator, who sees everything)."""
        if tenant is None:
            found = await self._fetch(f"SELECT {COLUMNS} FROM objects WHERE ref = $1", ref)
        else:
            found = await self._fetch(
                f"""SELECT {_TENANT_COLUMNS} FROM objects
                JOIN grants ON grants.ref = objects.ref AND grants.tenant = $1 WHERE objects.ref = $2""",
                tenant,
                ref,
            )
        return _row(found[0]) if found else None

    async def get_many(self, refs: Sequence[str], tenant: str | None = None) -> dict[str, ObjectRow]:
        """The rows of those of `refs` that `tenant` may see, in one statement."""
        if not refs:
            return {}
        if tenant is None:
            found = await self._fetch(
                f"SELECT {COLUMNS} FROM objects WHERE ref = ANY($1::text[])", list(refs)
            )
        else:
            found = await self._fetch(
                f"""SELECT {_TENANT_COLUMNS} FROM objects JOIN grants
                ON grants.ref = objects.ref AND grants.tenant = $1 WHERE objects.ref = ANY($2::text[])""",
                tenant,
                list(refs),
            )
        return {r.ref: r for r in map(_row, found)}

    async def renew(self, refs: Iterable[str], now: float | None = None) -> dict[str, ObjectRow]:
        """Renew the lease of every listed object that has a row; return those rows (in the order of
        `refs`). Renewing before touching the file keeps a concurrent GC from collecting an object that an
        admission is about to dedup onto."""
        at = time.time() if now is None else now
        wanted = list(dict.fromkeys(refs))
        if not wanted:
            return {}

        async def work(db: Connection) -> dict[str, ObjectRow]:
            await _lock_refs(db, wanted)
            found = {r.ref: r for r in map(_row, await db.fetch(_RENEW, at, wanted))}
            return {ref: found[ref] for ref in wanted if ref in found}

        return await self._transaction(work)

    async def publish(
        self,
        rows: Sequence[ObjectRow],
        check: Callable[[], Awaitable[object]],
        hold: Hold | None = None,
        tenant: str | None = None,
    ) -> None:
        """Insert or refresh `rows` in one transaction, and add them to the session of `hold` if given.
        `check` and the hold's guard run under the locks first; if one raises, nothing is committed."""
        ordered = sorted(rows, key=lambda r: r.ref)  # row locks in ref order; equal refs keep their order

        async def work(db: Connection) -> None:
            if hold is not None:
                _guard(hold.guard, await _require_session(db, hold.key))
            await _lock_refs(db, (r.ref for r in rows))
            await _call(check)
            if ordered:
                await db.executemany(_UPSERT_OBJECT, [_object_values(r) for r in ordered])
            if tenant is not None and ordered:
                await db.executemany(
                    """INSERT INTO grants (tenant, ref, name) VALUES ($1, $2, $3)
                    ON CONFLICT (tenant, ref) DO UPDATE SET name = coalesce(grants.name, excluded.name)""",
                    [(tenant, r.ref, r.name) for r in ordered],
                )
            if hold is not None:
                await _add_holds(
                    db, hold.key, [r.ref for r in rows], rows[0].lease_at if rows else time.time()
                )

        await self._transaction(work)

    async def discard_unpublished(
        self, refs: Iterable[str], remove: Callable[[str], Awaitable[object]]
    ) -> None:
        """Under the refs' locks, call `remove(ref)` for each ref that no row publishes."""
        wanted = list(refs)
        if not wanted:
            return

        async def work(db: Connection) -> None:
            await _lock_refs(db, wanted)
            published = {
                r[0] for r in await db.fetch("SELECT ref FROM objects WHERE ref = ANY($1::text[])", wanted)
            }
            for ref in wanted:
                if ref not in published:
                    await _call(remove, ref)

        await self._transaction(work)

    async def published_now(self, ref: str) -> bool:
        """Whether a row publishes `ref`, asked under its lock: a publishing transaction has either committed
        or not begun (the audit's confirmation that a file is stray)."""

        async def work(db: Connection) -> bool:
            await _lock_refs(db, [ref])
            return await db.fetchrow("SELECT 1 FROM objects WHERE ref = $1", ref) is not None

        return await self._transaction(work)

    async def confirm_missing(self, ref: str, gone: Callable[[], Awaitable[bool]], mark: bool) -> str | None:
        """Under the ref's lock: the row's state if the row is still there and `gone()` confirms its object
        is absent, else None. With `mark`, a row in state 'ok' becomes 'missing' (and 'ok' is returned)."""

        async def work(db: Connection) -> str | None:
            await _lock_refs(db, [ref])
            # The row lock keeps set_state (which takes no ref lock) out until this transaction ends.
            state = await db.fetchval("SELECT state FROM objects WHERE ref = $1 FOR NO KEY UPDATE", ref)
            if state is None or not await _call(gone):
                return None
            if mark and state == "ok":
                await db.execute("UPDATE objects SET state = 'missing' WHERE ref = $1", ref)
            return str(state)

        return await self._transaction(work)

    async def set_state(self, row: ObjectRow, state: str) -> None:
        """Record what a read found, unless the row changed since it was read (a concurrent admission renewed
        it, perhaps healing the object): then the finding is stale and the admission's row stands."""

        async def work(db: Connection) -> None:
            await db.execute(
                "UPDATE objects SET state = $1 WHERE ref = $2 AND lease_at = $3", state, row.ref, row.lease_at
            )

        await self._transaction(work)

    # -- garbage collection ----------------------------------------------------------------------------------

    async def collectible(self, cutoff: float) -> list[ObjectRow]:
        """Rows with no hold whose lease is older than `cutoff`: the GC's candidates, to be re-checked."""
        found = await self._fetch(
            f"SELECT {COLUMNS} FROM objects WHERE lease_at < $1 AND {_UNHELD} ORDER BY ref", cutoff
        )
        return [_row(r) for r in found]

    async def refs(self) -> set[str]:
        return {r[0] for r in await self._fetch("SELECT ref FROM objects")}

    async def rows(self) -> list[ObjectRow]:
        return [_row(r) for r in await self._fetch(f"SELECT {COLUMNS} FROM objects ORDER BY ref")]

    async def collect(
        self, refs: Sequence[str], cutoff: float, remove: Callable[[str], Awaitable[object]]
    ) -> list[tuple[str, int]]:
        """Under the locks of the candidates and of their variants, re-check each candidate (still no hold,
        not a live variant, lease still older than `cutoff`), call `remove(ref)` (which removes the file and
        makes that durable), then delete its row. The variants derived from it go with it, unless something
        else keeps them (a hold, a grant from an admission of the same bytes, another source). Returns
        (ref, bytes) of every object collected, variants included."""
        if not refs:
            return []
        candidates = list(refs)
        links = "SELECT variant FROM variants WHERE source = ANY($1::text[])"

        async def work(db: Connection) -> list[tuple[str, int]]:
            # Every lock before any removal: the variants as seen before locking, then any linked since
            # (a link needs its source's lock, so once the sources are locked the set stands still).
            locked = set(candidates) | {r[0] for r in await db.fetch(links, candidates)}
            await _lock_refs(db, locked)
            late = {r[0] for r in await db.fetch(links, candidates)} - locked
            await _lock_refs(db, late)
            collected: list[tuple[str, int]] = []
            for ref in candidates:
                size = await db.fetchval(
                    f"SELECT bytes FROM objects WHERE ref = $1 AND lease_at < $2 AND {_UNHELD}", ref, cutoff
                )
                if size is None:
                    continue
                variants = [
                    r[0] for r in await db.fetch("SELECT variant FROM variants WHERE source = $1", ref)
                ]
                await _call(remove, ref)
                await db.execute("DELETE FROM objects WHERE ref = $1", ref)  # its variant links cascade
                collected.append((ref, int(size)))
                for v in variants:
                    # As in Index.collect: a variant renewed since the cutoff stays.
                    orphan = await db.fetchval(
                        f"""SELECT bytes FROM objects WHERE ref = $1 AND lease_at < $2 AND {_UNHELD}
                        AND NOT EXISTS (SELECT 1 FROM grants WHERE grants.ref = objects.ref)""",
                        v,
                        cutoff,
                    )
                    if orphan is not None:
                        await _call(remove, v)
                        await db.execute("DELETE FROM objects WHERE ref = $1", v)
                        collected.append((v, int(orphan)))
            return collected

        return await self._transaction(work)

    # -- variants --------------------------------------------------------------------------------------------

    async def variant(self, source: str, spec: str) -> ObjectRow | None:
        """The row of the variant of `source` derived with `spec`, if there is one."""
        found = await self._fetch(
            f"""SELECT {_OBJECT_COLUMNS} FROM variants JOIN objects ON objects.ref = variants.variant
            WHERE variants.source = $1 AND variants.spec = $2""",
            source,
            spec,
        )
        return _row(found[0]) if found else None

    async def publish_variant(
        self, row: ObjectRow, source: str, spec: str, check: Callable[[], Awaitable[object]]
    ) -> bool:
        """Publish a derived object and link it to its source, in one transaction; False (nothing committed)
        when the source is gone, collected meanwhile. `check` runs under the locks first."""

        async def work(db: Connection) -> bool:
            await _lock_refs(db, [source, row.ref])
            if await db.fetchrow("SELECT 1 FROM objects WHERE ref = $1", source) is None:
                return False
            await _call(check)
            await db.execute(_UPSERT_OBJECT, *_object_values(row))
            await db.execute(
                """INSERT INTO variants (source, spec, variant, created_at) VALUES ($1, $2, $3, $4)
                ON CONFLICT (source, spec) DO UPDATE SET variant = excluded.variant""",
                source,
                spec,
                row.ref,
                row.lease_at,
            )
            return True

        return await self._transaction(work)

    # -- figures for /metrics --------------------------------------------------------------------------------

    async def stats(self) -> tuple[int, int]:
        """How many objects the index holds, and their bytes."""
        [found] = await self._fetch("SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM objects")
        return int(found[0]), int(found[1])

    async def record_run(self, command: str, figures: Mapping[str, float], now: float | None = None) -> None:
        at = time.time() if now is None else now

        async def work(db: Connection) -> None:
            await db.execute(
                """INSERT INTO runs (command, finished_at, figures) VALUES ($1, $2, $3)
                ON CONFLICT (command) DO UPDATE SET finished_at = excluded.finished_at,
                figures = excluded.figures""",
                command,
                at,
                json.dumps(figures),
            )

        await self._transaction(work)

    async def runs(self) -> dict[str, tuple[float, dict[str, float]]]:
        found = await self._fetch("SELECT command, finished_at, figures FROM runs")
        return {str(r[0]): (float(r[1]), json.loads(r[2])) for r in found}

    # -- sessions and holds ----------------------------------------------------------------------------------

    async def get_session(self, key: SessionKey) -> SessionRow | None:
        found = await self._fetch(
            """SELECT route, created_at, ARRAY(SELECT ref FROM holds
                WHERE holds.tenant = sessions.tenant AND holds.session = sessions.id ORDER BY created_at, seq)
            FROM sessions WHERE tenant = $1 AND id = $2""",
            *key,
        )
        if not found:
            return None
        route, created_at, holds = found[0]
        return SessionRow(key[0], key[1], route, created_at, tuple(holds))

    async def create_session(self, key: SessionKey, route: str | None, now: float) -> tuple[SessionRow, bool]:
        """Create, or find the same session again. False when it already existed with this route."""

        async def work(db: Connection) -> tuple[SessionRow, bool]:
            while True:  # until the session is found or made: a concurrent delete may come in between
                existing = await _session(db, key)
                if existing is not None:
                    if existing.route != route:
                        raise SessionConflict(
                            f"session {key[1]!r} already exists with route {existing.route!r}",
                            hint="switch its route with POST /v1/sessions/{id}/route, "
                            "or use another session id",
                        )
                    return existing, False
                if await _insert_session(db, key, route, now):
                    return SessionRow(key[0], key[1], route, now, ()), True

        return await self._transaction(work)

    async def set_route(
        self, key: SessionKey, route: str | None, guard: Callable[[SessionRow], object]
    ) -> SessionRow:
        """Switch the route after `guard(session)` (run with the session locked) has not raised."""

        async def work(db: Connection) -> SessionRow:
            current = await _require_session(db, key)
            _guard(guard, current)
            await db.execute("UPDATE sessions SET route = $1 WHERE tenant = $2 AND id = $3", route, *key)
            return SessionRow(current.tenant, current.id, route, current.created_at, current.holds)

        return await self._transaction(work)

    async def fork(self, source: SessionKey, target: SessionKey, now: float) -> SessionRow:
        """A new session with the source's route and a copy of all its holds, in one transaction."""

        async def work(db: Connection) -> SessionRow:
            original = await _require_session(db, source)
            if not await _insert_session(db, target, original.route, now):
                raise SessionConflict(
                    f"session {target[1]!r} already exists", hint="fork into a new session id"
                )
            await _add_holds(db, target, original.holds, now)
            return SessionRow(target[0], target[1], original.route, now, original.holds)

        return await self._transaction(work)

    async def add_holds(self, hold: Hold, refs: Sequence[str], now: float) -> SessionRow:
        """Hold existing objects: all of them or, if one has no row, none (ATTACHMENT_NOT_FOUND)."""
        key = hold.key

        async def work(db: Connection) -> SessionRow:
            _guard(hold.guard, await _require_session(db, key))
            await _lock_refs(db, refs)
            # A tenant holds only what it may see; anything else answers like a ref that does not exist.
            invisible = await db.fetchval(
                """SELECT r FROM unnest($1::text[]) WITH ORDINALITY AS u(r, i)
                WHERE NOT EXISTS (SELECT 1 FROM objects WHERE objects.ref = r AND ($2 OR EXISTS
                    (SELECT 1 FROM grants WHERE grants.ref = objects.ref AND grants.tenant = $3)))
                ORDER BY i LIMIT 1""",
                list(refs),
                hold.everything,
                key[0],
            )
            if invisible is not None:
                raise NotFound(f"no attachment {invisible}")
            await _add_holds(db, key, refs, now)
            return await _require_session(db, key, lock=False)

        return await self._transaction(work)

    async def delete_session(self, key: SessionKey, now: float) -> int:
        """Release every hold of the session, then forget it. Returns how many holds were released."""

        async def work(db: Connection) -> int:
            session = await _require_session(db, key)
            await _renew(db, session.holds, now)  # the grace period starts at the release
            await db.execute("DELETE FROM sessions WHERE tenant = $1 AND id = $2", *key)  # holds cascade
            return len(session.holds)

        return await self._transaction(work)


async def _session(db: Connection, key: SessionKey, *, lock: bool = True) -> SessionRow | None:
    """The session, locked: the holds are read by a second statement, after the lock is granted, so they
    include whatever the previous holder of the lock committed."""
    found = await db.fetchrow(
        "SELECT route, created_at FROM sessions WHERE tenant = $1 AND id = $2"
        + (" FOR UPDATE" if lock else ""),
        *key,
    )
    if found is None:
        return None
    holds = await db.fetch(
        "SELECT ref FROM holds WHERE tenant = $1 AND session = $2 ORDER BY created_at, seq", *key
    )
    return SessionRow(key[0], key[1], found[0], found[1], tuple(r[0] for r in holds))


async def _require_session(db: Connection, key: SessionKey, *, lock: bool = True) -> SessionRow:
    session = await _session(db, key, lock=lock)
    if session is None:
        raise SessionNotFound(f"no session {key[1]!r}", hint="create it with PUT /v1/sessions/{id}")
    return session


async def _insert_session(db: Connection, key: SessionKey, route: str | None, now: float) -> bool:
    """Whether the session was made; False when it exists (and then it is left alone)."""
    made = await db.fetchrow(
        """INSERT INTO sessions (tenant, id, route, created_at) VALUES ($1, $2, $3, $4)
        ON CONFLICT (tenant, id) DO NOTHING RETURNING 1""",
        *key,
        route,
        now,
    )
    return made is not None


async def _renew(db: Connection, refs: Iterable[str], now: float) -> None:
    wanted = list(refs)
    if wanted:
        await db.execute(_RENEW, now, wanted)


async def _add_holds(db: Connection, key: SessionKey, refs: Iterable[str], now: float) -> None:
    """Every hold change renews the held objects' leases. Holds are numbered in the order of `refs`."""
    wanted = list(refs)
    if not wanted:
        return
    await db.execute(
        """INSERT INTO holds (tenant, session, ref, created_at)
        SELECT $1, $2, r, $4 FROM unnest($3::text[]) WITH ORDINALITY AS u(r, i) ORDER BY i
        ON CONFLICT (tenant, session, ref) DO NOTHING""",
        *key,
        wanted,
        now,
    )
    await _renew(db, wanted, now)
