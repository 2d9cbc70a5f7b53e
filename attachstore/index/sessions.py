"""Sessions and their holds: the statements, and the transactions that change them (`Index` runs each one);
docs/design.md, "The locks", says what each locks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import NotFound, SessionConflict, SessionNotFound
from .dialect import Reads, Tx, guard, locked
from .objects import renew, rows_of
from .rows import Hold, SessionKey, SessionRow


async def read(db: Reads, key: SessionKey, locking: str = "") -> SessionRow | None:
    """With `locking`, the holds are read by a second statement, after the lock is granted, so they include
    whatever the previous holder committed."""
    found = await db.fetch(
        f"SELECT route, created_at FROM sessions WHERE tenant = $1 AND id = $2{locking}", *key
    )
    if not found:
        return None
    holds = await db.fetch(
        f"SELECT ref FROM holds WHERE tenant = $1 AND session = $2 ORDER BY created_at, {db.hold_order}", *key
    )
    return SessionRow(key[0], key[1], found[0][0], found[0][1], tuple(r[0] for r in holds))


async def require(tx: Tx, key: SessionKey, *, lock: bool = True) -> SessionRow:
    session = await read(tx, key, locked(tx, "UPDATE") if lock else "")
    if session is None:
        raise SessionNotFound(f"no session {key[1]!r}", hint="create it with PUT /v1/sessions/{id}")
    return session


async def insert_holds(tx: Tx, key: SessionKey, refs: Sequence[str], now: float) -> None:
    """Every hold change renews the held objects' leases."""
    if not refs:
        return
    await tx.executemany(
        """INSERT INTO holds (tenant, session, ref, created_at) VALUES ($1, $2, $3, $4)
        ON CONFLICT (tenant, session, ref) DO NOTHING""",
        [(*key, ref, now) for ref in refs],
    )
    await renew(tx, refs, now)


async def _insert(tx: Tx, key: SessionKey, route: str | None, now: float) -> bool:
    made = await tx.fetch(
        """INSERT INTO sessions (tenant, id, route, created_at, used_at) VALUES ($1, $2, $3, $4, $4)
        ON CONFLICT (tenant, id) DO NOTHING RETURNING 1""",
        *key,
        route,
        now,
    )
    return bool(made)


async def create(tx: Tx, key: SessionKey, route: str | None, now: float) -> tuple[SessionRow, bool]:
    while True:  # until the session is found or made: a concurrent delete may come in between
        existing = await read(tx, key, locked(tx, "UPDATE"))
        if existing is not None:
            if existing.route != route:
                raise SessionConflict(
                    f"session {key[1]!r} already exists with route {existing.route!r}",
                    hint="switch its route with POST /v1/sessions/{id}/route, or use another session id",
                )
            return existing, False
        if await _insert(tx, key, route, now):
            return SessionRow(key[0], key[1], route, now, ()), True


async def set_route(
    tx: Tx, key: SessionKey, route: str | None, check: Callable[[SessionRow], object]
) -> SessionRow:
    current = await require(tx, key)
    guard(check, current)
    await tx.execute("UPDATE sessions SET route = $1 WHERE tenant = $2 AND id = $3", route, *key)
    return SessionRow(current.tenant, current.id, route, current.created_at, current.holds)


async def fork(tx: Tx, source: SessionKey, target: SessionKey, now: float) -> SessionRow:
    original = await require(tx, source)
    if not await _insert(tx, target, original.route, now):
        raise SessionConflict(f"session {target[1]!r} already exists", hint="fork into a new session id")
    await insert_holds(tx, target, original.holds, now)
    return SessionRow(target[0], target[1], original.route, now, original.holds)


async def add_holds(tx: Tx, hold: Hold, refs: Sequence[str], now: float) -> SessionRow:
    key = hold.key
    guard(hold.guard, await require(tx, key))
    await tx.lock_refs(refs)
    # A tenant holds only what it may see; anything else answers like a ref that does not exist.
    visible = {r.ref for r in await rows_of(tx, refs, None if hold.everything else key[0])}
    for ref in refs:
        if ref not in visible:
            raise NotFound(f"no attachment {ref}")
    await insert_holds(tx, key, refs, now)
    return await require(tx, key, lock=False)


async def delete(tx: Tx, key: SessionKey, now: float) -> int:
    session = await require(tx, key)
    await renew(tx, session.holds, now)  # the grace period starts at the release
    await tx.execute("DELETE FROM sessions WHERE tenant = $1 AND id = $2", *key)  # holds cascade
    return len(session.holds)
