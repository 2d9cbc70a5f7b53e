"""The index in PostgreSQL, for many stateless daemons sharing one database: `PgIndex` runs the operations of
protocol.py at READ COMMITTED on many connections, taking the locks it names for real (docs/design.md, "The
locks")."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar, cast

import asyncpg  # type: ignore[import-untyped,unused-ignore]

from ..errors import StorageUnavailable
from . import sessions
from .dialect import Tx
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
from .protocol import Index
from .rows import SessionKey, SessionRow

CONNECT_TIMEOUT = 10.0
_ATTEMPTS = 5  # of a transaction that failed on a deadlock or a serialization failure

T = TypeVar("T")


def ref_key(ref: str) -> int:
    return int.from_bytes(hashlib.blake2b(ref.encode(), digest_size=8).digest(), "big", signed=True)


def _refs_in(column: str, refs: Sequence[str], first: int) -> Iterator[tuple[str, Sequence[object]]]:
    if refs:
        yield f"{column} = ANY(${first}::text[])", (list(refs),)


class _Reads:
    """Tried twice if the first connection was lost."""

    hold_order = "seq"
    refs_in = staticmethod(_refs_in)

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def fetch(self, sql: str, *args: object) -> list[Record]:
        for attempt in (1, 2):
            try:
                return await self._pool.fetch(sql, *args)
            except DRIVER_ERRORS as e:
                lost = isinstance(e, CONNECTION_ERRORS) and not self._pool.is_closing()
                if lost and attempt == 1:
                    continue
                raise storage_error(e, self._pool.is_closing()) from e
        raise AssertionError("unreachable")  # pragma: no cover


class _Tx:
    exclusive = False
    hold_order = "seq"
    refs_in = staticmethod(_refs_in)

    def __init__(self, db: Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: object) -> list[Record]:
        return await self._db.fetch(sql, *args)

    async def execute(self, sql: str, *args: object) -> None:
        await self._db.execute(sql, *args)

    async def executemany(self, sql: str, args: Iterable[Sequence[object]]) -> None:
        await self._db.executemany(sql, args)

    async def lock_refs(self, refs: Iterable[str]) -> None:
        keys = sorted({ref_key(r) for r in refs})  # in key order: no two lockers wait on each other
        if keys:
            await self._db.execute("SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS u(k)", keys)


async def _keep_session_state(db: object) -> None:
    """The pool's reset, only asyncpg's rollback: the default (RESET ALL, advisory unlock, ...) costs a round
    trip per use, and nothing here changes session state except `sweeping()`, which restores it."""


class PgIndex(Index):
    def __init__(self, pool: Pool) -> None:
        super().__init__(_Reads(pool))
        self._pool = pool

    @classmethod
    async def open(cls, dsn: str, *, min_size: int = 1, max_size: int = 10) -> PgIndex:
        # `sweeping()` keeps one connection for a whole gc run
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
        await self._pool.close()

    async def _transaction(self, work: Callable[[Tx], Awaitable[T]]) -> T:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                db = await self._pool.acquire()
                try:
                    async with db.transaction():
                        return await work(_Tx(db))
                finally:
                    await self._pool.release(db)
            except DRIVER_ERRORS as e:
                if getattr(e, "sqlstate", None) in RETRY_SQLSTATES and attempt < _ATTEMPTS:
                    await asyncio.sleep(0.005 * attempt)
                    continue
                raise storage_error(e, self._pool.is_closing()) from e
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def sweeping(self) -> AsyncIterator[None]:
        """One gc sweeps at a time across every node. A lost connection takes the lock with it: only the
        exclusion of a redundant second run is lost, the sweep stays safe."""
        try:
            db = await self._pool.acquire()
        except DRIVER_ERRORS as e:
            raise storage_error(e, self._pool.is_closing()) from e
        try:
            try:
                await db.execute("SET lock_timeout = 0")  # a gc run may take long; the next one waits
                await db.execute("SELECT pg_advisory_lock($1, $2)", LOCK_SPACE, SWEEP_LOCK)
                await db.execute("RESET lock_timeout")
            except BaseException as e:
                # Cancelled or failed half-way: the session may hold the lock or the setting; end it.
                db.terminate()
                if isinstance(e, DRIVER_ERRORS):
                    raise storage_error(e, self._pool.is_closing()) from e
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

    async def get_session(self, key: SessionKey) -> SessionRow | None:
        # the session and its holds in one statement: as of one moment
        found = await self._reads.fetch(
            """SELECT route, created_at, ttl, used_at, expires_at, ARRAY(SELECT ref FROM holds
                WHERE holds.tenant = sessions.tenant AND holds.session = sessions.id ORDER BY created_at, seq)
            FROM sessions WHERE tenant = $1 AND id = $2""",
            *key,
        )
        if not found:
            return None
        *columns, holds = found[0]
        return sessions.session_row(key, columns, holds)
