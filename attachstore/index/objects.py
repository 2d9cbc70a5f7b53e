"""Statements on object rows that the operations on objects and on sessions share: the columns, the reads, the
renewals, and the upsert that publishes a row."""

from __future__ import annotations

from collections.abc import Sequence

from .dialect import Reads, Row, Tx, locked
from .rows import COLUMNS, ObjectRow

OBJECT_COLUMNS = ", ".join(f"objects.{c}" for c in COLUMNS.split(", "))
TENANT_COLUMNS = OBJECT_COLUMNS.replace("objects.name", "grants.name")
UPSERT_OBJECT = f"""INSERT INTO objects ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'ok', $10)
    ON CONFLICT (ref) DO UPDATE SET
        media_type = excluded.media_type, bytes = excluded.bytes, width = excluded.width,
        height = excluded.height, frames = excluded.frames, name = COALESCE(objects.name, excluded.name),
        lease_at = excluded.lease_at, state = 'ok',
        keyed_check = COALESCE(excluded.keyed_check, objects.keyed_check)"""
PUBLISHED = "SELECT 1 FROM objects WHERE ref = $1"


def object_row(r: Row) -> ObjectRow:
    return ObjectRow(*r)


def object_values(r: ObjectRow) -> tuple[object, ...]:
    return (
        r.ref,
        r.media_type,
        r.bytes,
        r.width,
        r.height,
        r.frames,
        r.name,
        r.created_at,
        r.lease_at,
        r.keyed_check,
    )


async def rows_of(db: Reads, refs: Sequence[str], tenant: str | None) -> list[ObjectRow]:
    # tenant None: the operator, who sees everything; a tenant's own display name stands in for the object's
    found: list[ObjectRow] = []
    for where, values in db.refs_in("objects.ref", refs, 1 if tenant is None else 2):
        if tenant is None:
            sql, args = f"SELECT {COLUMNS} FROM objects WHERE {where}", tuple(values)
        else:
            sql = f"""SELECT {TENANT_COLUMNS} FROM objects JOIN grants
            ON grants.ref = objects.ref AND grants.tenant = $1 WHERE {where}"""
            args = (tenant, *values)
        found += map(object_row, await db.fetch(sql, *args))
    return found


async def renew(tx: Tx, refs: Sequence[str], now: float) -> list[ObjectRow]:
    """Where rows lock, every statement that updates several locks them in ref order, so those never
    deadlock."""
    renewed: list[ObjectRow] = []
    for where, values in tx.refs_in("ref", refs, 2):
        sql = f"""UPDATE objects SET lease_at = $1 WHERE ref IN
            (SELECT ref FROM objects WHERE {where} ORDER BY ref{locked(tx, "NO KEY UPDATE")})
            RETURNING {COLUMNS}"""
        renewed += map(object_row, await tx.fetch(sql, now, *values))
    return renewed
