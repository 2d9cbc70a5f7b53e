"""Listings: a page of a tenant's sessions, newest used first, and a page of a session's holds, oldest first.
Each page is one range read on an index from the position the previous page ended at (a keyset, never an
OFFSET): its cost grows with the page, not with the store. A session's images and bytes are its row's, kept
by the triggers of its holds (totals.py)."""

from __future__ import annotations

from dataclasses import dataclass

from .dialect import Reads
from .objects import object_row
from .rows import COLUMNS, ObjectRow, SessionKey
from .sweep import unheld_at

SessionAt = tuple[float, str]  # (used_at, id): where a page of sessions ended
HoldAt = tuple[float, str]  # (created_at, ref): where a page of holds ended


@dataclass(frozen=True, slots=True)
class SessionEntry:
    id: str
    route: str | None
    created_at: float
    used_at: float
    expires_at: float | None  # None: never
    ttl: int | None  # seconds idle before it expires; None: no lifetime
    images: int  # the objects it holds
    bytes: int  # their bytes


@dataclass(frozen=True, slots=True)
class HeldRow:
    row: ObjectRow  # the tenant's display name in place of the object's (as rows_of gives it)
    held_at: float


def prefix_end(prefix: str) -> str:
    """The least string above every string that starts with `prefix`, in byte order: ids are ASCII, and the
    last character is never the highest one (a session id's characters are letters, digits and . _ : -)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class _Args:
    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def __call__(self, value: object) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


async def sessions_page(
    db: Reads,
    tenant: str,
    *,
    prefix: str = "",
    expired: bool | None = None,
    now: float,
    after: SessionAt | None = None,
    limit: int,
) -> list[SessionEntry]:
    """The sessions_used index (tenant, used_at) gives the order; a prefix is a range of the primary key
    (tenant, id), checked again by substr where the collation is not the bytes' order."""
    arg = _Args(tenant)
    where = ["tenant = $1"]
    if prefix:
        where.append(f"id >= {arg(prefix)} AND id < {arg(prefix_end(prefix))}")
        where.append(f"substr(id, 1, {len(prefix)}) = $2")
    if expired is True:
        where.append(f"expires_at <= {arg(now)}")
    elif expired is False:
        where.append(f"(expires_at IS NULL OR expires_at > {arg(now)})")
    if after is not None:
        used, last = arg(after[0]), arg(after[1])
        where.append(f"used_at <= {used} AND (used_at < {used} OR id < {last})")
    found = await db.fetch(
        f"""SELECT id, route, created_at, used_at, expires_at, ttl, images, bytes FROM sessions
        WHERE {" AND ".join(where)} ORDER BY used_at DESC, id DESC LIMIT {arg(limit)}""",
        *arg.values,
    )
    return [
        SessionEntry(
            r[0], r[1], float(r[2]), float(r[3]), r[4], None if r[5] is None else int(r[5]), r[6], r[7]
        )
        for r in found
    ]


async def holds_page(
    db: Reads, key: SessionKey, scoped: bool, *, after: HoldAt | None = None, limit: int
) -> list[HeldRow] | None:
    """Oldest held first, by (created_at, ref); None if there is no such session. `scoped`: the tenant's
    display names (its grants), not the objects' own."""
    if not await db.fetch("SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2", *key):
        return None
    columns = ", ".join(f"objects.{c}" for c in COLUMNS.split(", "))
    grants = ""
    if scoped:
        columns = columns.replace("objects.name", "grants.name")
        grants = "LEFT JOIN grants ON grants.ref = holds.ref AND grants.tenant = holds.tenant"
    arg = _Args(*key)
    where = "holds.tenant = $1 AND holds.session = $2"
    if after is not None:
        at, ref = arg(after[0]), arg(after[1])
        where += f" AND holds.created_at >= {at} AND (holds.created_at > {at} OR holds.ref > {ref})"
    found = await db.fetch(
        f"""SELECT {columns}, holds.created_at FROM holds JOIN objects ON objects.ref = holds.ref {grants}
        WHERE {where} ORDER BY holds.created_at, holds.ref LIMIT {arg(limit)}""",
        *arg.values,
    )
    return [HeldRow(object_row(tuple(r)[:-1]), float(r[-1])) for r in found]


async def expired_count(db: Reads, tenant: str | None, now: float) -> int:
    """A range of sessions_expires (expires_at, partial): as many index entries as expired sessions."""
    where, args = (
        ("expires_at <= $1", (now,))
        if tenant is None
        else ("expires_at <= $1 AND tenant = $2", (now, tenant))
    )
    [found] = await db.fetch(f"SELECT count(*) FROM sessions WHERE {where}", *args)
    return int(found[0])


async def collectible_count(db: Reads, cutoff: float, chunk: int = 1000) -> tuple[int, int]:
    """A range of objects_lease below the cutoff, each checked for holds and links as gc checks it; read
    `chunk` objects a statement, so that the other reads of a process sharing one connection (SQLite's
    reader) go in between."""
    objects = size = 0
    after: tuple[float, str] | None = None
    while True:
        # lease_at >= $3 first: the bound the index's range starts from (an OR alone would not give one)
        tail = "" if after is None else " AND lease_at >= $3 AND (lease_at > $3 OR ref > $4)"
        found = await db.fetch(
            f"""SELECT lease_at, ref, bytes, CASE WHEN {unheld_at("$1")} THEN 1 ELSE 0 END FROM objects
            WHERE lease_at < $1{tail} ORDER BY lease_at, ref LIMIT $2""",
            cutoff,
            chunk,
            *(after or ()),
        )
        objects += sum(int(r[3]) for r in found)
        size += sum(int(r[2]) for r in found if r[3])
        if len(found) < chunk:
            return objects, size
        after = (float(found[-1][0]), str(found[-1][1]))
