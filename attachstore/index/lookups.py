"""What the operator page looks up beside the listings: the sessions that hold one object, and the quarantined
objects. Each is one page of rows after a cursor."""

from __future__ import annotations

from .dialect import Reads
from .objects import OBJECT_COLUMNS, TENANT_COLUMNS, object_row
from .rows import ObjectRow


async def holders(db: Reads, ref: str, tenant: str, after: str, limit: int) -> list[str]:
    """The ids of `tenant`'s sessions that hold `ref`, in id order, after the id `after`."""
    found = await db.fetch(
        """SELECT session FROM holds WHERE ref = $1 AND tenant = $2 AND session > $3
        ORDER BY session LIMIT $4""",
        ref,
        tenant,
        after,
        limit,
    )
    return [str(r[0]) for r in found]


async def quarantined(db: Reads, tenant: str | None, after: str, limit: int) -> list[ObjectRow]:
    """The quarantined objects that `tenant` may see (None: every one), in ref order, after the ref `after`,
    through the partial index objects_quarantined: a page reads the quarantine, not the store."""
    if tenant is None:
        sql = f"""SELECT {OBJECT_COLUMNS} FROM objects WHERE objects.state = 'quarantined'
        AND objects.ref > $1 ORDER BY objects.ref LIMIT $2"""
        found = await db.fetch(sql, after, limit)
    else:
        # CROSS JOIN: SQLite then reads the quarantine first and looks up each grant, instead of walking
        # the tenant's grants (all of its objects) for the few quarantined
        sql = f"""SELECT {TENANT_COLUMNS} FROM objects CROSS JOIN grants
        WHERE grants.ref = objects.ref AND grants.tenant = $1
        AND objects.state = 'quarantined' AND objects.ref > $2 ORDER BY objects.ref LIMIT $3"""
        found = await db.fetch(sql, tenant, after, limit)
    return [object_row(r) for r in found]
