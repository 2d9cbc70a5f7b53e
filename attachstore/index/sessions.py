"""Sessions and their holds: the statements, and the transactions that change them (`Index` runs each one);
docs/design.md, "The locks", says what each locks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..errors import NotFound, SessionConflict, SessionNotFound
from .dialect import Reads, Tx, guard, locked
from .objects import renew, rows_of
from .rows import Hold, SessionKey, SessionRow

_SESSION = "route, created_at, ttl, used_at, expires_at"


def session_row(key: SessionKey, found: Sequence[object], holds: Sequence[str]) -> SessionRow:
    """From the `_SESSION` columns."""
    route, created_at, ttl, used_at, expires_at = found
    return SessionRow(
        key[0],
        key[1],
        route,  # type: ignore[arg-type]
        created_at,  # type: ignore[arg-type]
        tuple(holds),
        None if ttl is None else int(ttl),  # type: ignore[call-overload]
        used_at,  # type: ignore[arg-type]
        expires_at,  # type: ignore[arg-type]
    )


async def read(db: Reads, key: SessionKey, locking: str = "") -> SessionRow | None:
    """With `locking`, the holds are read by a second statement, after the lock is granted, so they include
    whatever the previous holder committed."""
    found = await db.fetch(f"SELECT {_SESSION} FROM sessions WHERE tenant = $1 AND id = $2{locking}", *key)
    if not found:
        return None
    holds = await db.fetch(
        f"SELECT ref FROM holds WHERE tenant = $1 AND session = $2 ORDER BY created_at, {db.hold_order}", *key
    )
    return session_row(key, tuple(found[0]), [r[0] for r in holds])


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


async def renew_session(tx: Tx, key: SessionKey, now: float) -> None:
    """A use of the session: it was last used `now`, and with a lifetime expires `ttl` seconds later. Runs in
    the transaction that already locked the session row (an admission's publish, a hold, a fork)."""
    await tx.execute(
        "UPDATE sessions SET used_at = $3, expires_at = $3 + ttl WHERE tenant = $1 AND id = $2", *key, now
    )


async def keep_lifetime(tx: Tx, key: SessionKey, ttl: int | None, used_at: float) -> None:
    """Set the session's lifetime, and its last use to `used_at` unless it was used later (a copy's)."""
    await tx.execute(
        """UPDATE sessions SET ttl = $3,
            used_at = CASE WHEN used_at < $4 THEN $4 ELSE used_at END,
            expires_at = (CASE WHEN used_at < $4 THEN $4 ELSE used_at END) + CAST($3 AS double precision)
        WHERE tenant = $1 AND id = $2""",
        *key,
        ttl,
        used_at,
    )


async def touch(tx: Tx, key: SessionKey, now: float, since: float) -> bool:
    """A render's renewal: only if the session was last used before `since` (False otherwise, or when it is
    gone)."""
    found = await tx.fetch(
        """UPDATE sessions SET used_at = $3, expires_at = $3 + ttl
        WHERE tenant = $1 AND id = $2 AND used_at < $4 RETURNING 1""",
        *key,
        now,
        since,
    )
    return bool(found)


async def _insert(tx: Tx, key: SessionKey, route: str | None, now: float, ttl: int | None) -> bool:
    made = await tx.fetch(
        """INSERT INTO sessions (tenant, id, route, created_at, used_at, ttl, expires_at)
        VALUES ($1, $2, $3, $4, $4, $5, CAST($4 AS double precision) + CAST($5 AS double precision))
        ON CONFLICT (tenant, id) DO NOTHING RETURNING 1""",
        *key,
        route,
        now,
        ttl,
    )
    return bool(made)


async def create(
    tx: Tx, key: SessionKey, route: str | None, now: float, ttl: int | None = None
) -> tuple[SessionRow, bool]:
    """An existing session given a `ttl` takes it, renewed from `now`; without one it stays as it is."""
    while True:  # until the session is found or made: a concurrent delete may come in between
        existing = await read(tx, key, locked(tx, "UPDATE"))
        if existing is not None:
            if existing.route != route:
                raise SessionConflict(
                    f"session {key[1]!r} already exists with route {existing.route!r}",
                    hint="switch its route with POST /v1/sessions/{id}/route, or use another session id",
                )
            if ttl is None:
                return existing, False
            await tx.execute(
                """UPDATE sessions SET ttl = $3, used_at = $4,
                expires_at = CAST($4 AS double precision) + CAST($3 AS double precision)
                WHERE tenant = $1 AND id = $2""",
                *key,
                ttl,
                now,
            )
            return replace(existing, ttl=ttl, used_at=now, expires_at=now + ttl), False
        if await _insert(tx, key, route, now, ttl):
            expires = None if ttl is None else now + ttl
            return SessionRow(key[0], key[1], route, now, (), ttl, now, expires), True


async def set_route(
    tx: Tx, key: SessionKey, route: str | None, check: Callable[[SessionRow], object]
) -> SessionRow:
    current = await require(tx, key)
    guard(check, current)
    await tx.execute("UPDATE sessions SET route = $1 WHERE tenant = $2 AND id = $3", route, *key)
    return replace(current, route=route)


async def fork(tx: Tx, source: SessionKey, target: SessionKey, now: float) -> SessionRow:
    """The fork takes the source's lifetime; both are used now."""
    original = await require(tx, source)
    if not await _insert(tx, target, original.route, now, original.ttl):
        raise SessionConflict(f"session {target[1]!r} already exists", hint="fork into a new session id")
    await renew_session(tx, source, now)
    await insert_holds(tx, target, original.holds, now)
    expires = None if original.ttl is None else now + original.ttl
    return SessionRow(target[0], target[1], original.route, now, original.holds, original.ttl, now, expires)


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
    await renew_session(tx, key, now)
    return await require(tx, key, lock=False)


async def delete(tx: Tx, key: SessionKey, now: float) -> int:
    session = await require(tx, key)
    await renew(tx, session.holds, now)  # the grace period starts at the release
    await tx.execute("DELETE FROM sessions WHERE tenant = $1 AND id = $2", *key)  # holds cascade
    return len(session.holds)


async def expired(db: Reads, now: float) -> list[SessionRow]:
    """Sessions whose lifetime ran out before `now` (without their holds), soonest expired first."""
    found = await db.fetch(
        f"SELECT tenant, id, {_SESSION} FROM sessions WHERE expires_at < $1 ORDER BY expires_at, tenant, id",
        now,
    )
    return [session_row((r[0], r[1]), tuple(r)[2:], ()) for r in found]


async def release_expired(tx: Tx, key: SessionKey, now: float) -> int | None:
    """Forget the session if it is still expired under its lock (an admission may have renewed it meanwhile:
    then None). Its objects' leases are renewed to when it expired, not to now: gc's grace counts from the
    expiry, as from a DELETE."""
    found = await tx.fetch(
        f"SELECT expires_at FROM sessions WHERE tenant = $1 AND id = $2{locked(tx, 'UPDATE')}", *key
    )
    if not found or found[0][0] is None or found[0][0] >= now:
        return None
    expiry = float(found[0][0])
    holds = [r[0] for r in await tx.fetch("SELECT ref FROM holds WHERE tenant = $1 AND session = $2", *key)]
    for where, values in tx.refs_in("ref", sorted(holds), 2):
        await tx.execute(
            f"""UPDATE objects SET lease_at = $1 WHERE lease_at < $1 AND ref IN
            (SELECT ref FROM objects WHERE {where} ORDER BY ref{locked(tx, "NO KEY UPDATE")})""",
            expiry,
            *values,
        )
    await tx.execute("DELETE FROM sessions WHERE tenant = $1 AND id = $2", *key)  # holds cascade
    return len(holds)
