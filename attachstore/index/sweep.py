"""The garbage collector's statements: what it may consider, what it keeps whatever the roots say, and the
transaction that collects a batch (protocol.py says which locks it takes, and why)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from .dialect import Reads, Tx, call
from .objects import object_row
from .rows import COLUMNS, ObjectRow

# Not held by a session and not a variant some source still links to: what GC may consider.
_UNHELD = """NOT EXISTS (SELECT 1 FROM holds WHERE holds.ref = objects.ref)
    AND NOT EXISTS (SELECT 1 FROM variants WHERE variants.variant = objects.ref)"""
_COLLECTIBLE = f"SELECT bytes FROM objects WHERE ref = $1 AND lease_at < $2 AND {_UNHELD}"
# A variant that only its source kept: no hold, no other source, no grant from an admission of its bytes.
_ORPHANED = f"{_COLLECTIBLE} AND NOT EXISTS (SELECT 1 FROM grants WHERE grants.ref = objects.ref)"
_DELETE = "DELETE FROM objects WHERE ref = $1"


async def collectible(reads: Reads, cutoff: float) -> list[ObjectRow]:
    sql = f"SELECT {COLUMNS} FROM objects WHERE lease_at < $1 AND {_UNHELD} ORDER BY ref"
    return [object_row(r) for r in await reads.fetch(sql, cutoff)]


async def held_and_recent(reads: Reads, cutoff: float) -> tuple[int, int]:
    sql = f"""SELECT CAST(coalesce(sum(CASE WHEN {_UNHELD} THEN 0 ELSE 1 END), 0) AS bigint),
        CAST(coalesce(sum(CASE WHEN {_UNHELD} AND lease_at >= $1 THEN 1 ELSE 0 END), 0) AS bigint)
        FROM objects"""
    [found] = await reads.fetch(sql, cutoff)
    return int(found[0]), int(found[1])


async def collect(
    tx: Tx, candidates: Sequence[str], cutoff: float, remove: Callable[[str], Awaitable[object]]
) -> list[tuple[str, int]]:
    await _lock_with_variants(tx, candidates)
    collected: list[tuple[str, int]] = []
    for ref in candidates:
        found = await tx.fetch(_COLLECTIBLE, ref, cutoff)
        if not found:
            continue
        variants = [r[0] for r in await tx.fetch("SELECT variant FROM variants WHERE source = $1", ref)]
        await call(remove, ref)
        await tx.execute(_DELETE, ref)  # its variant links cascade
        collected.append((ref, int(found[0][0])))
        for v in variants:
            # A variant renewed since the cutoff is being derived again for another source that
            # yields the same bytes: it stays, and goes later as an unheld object if nothing links it.
            orphan = await tx.fetch(_ORPHANED, v, cutoff)
            if orphan:
                await call(remove, v)
                await tx.execute(_DELETE, v)
                collected.append((v, int(orphan[0][0])))
    return collected


async def _lock_with_variants(tx: Tx, sources: Sequence[str]) -> None:
    """Every lock before any removal: the variants seen before locking, then any linked since (a link needs
    its source's lock, so once the sources are locked the set stands still)."""
    if tx.exclusive:
        return

    async def linked() -> set[str]:
        found: set[str] = set()
        for where, values in tx.refs_in("source", sources, 1):
            found |= {r[0] for r in await tx.fetch(f"SELECT variant FROM variants WHERE {where}", *values)}
        return found

    first = set(sources) | await linked()
    await tx.lock_refs(first)
    await tx.lock_refs(await linked() - first)


# What gc may consider, for GET /v1/stats to count the same (listings.collectible_count).
UNHELD = _UNHELD
