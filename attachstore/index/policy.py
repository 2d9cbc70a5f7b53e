"""The store's policy record and the nodes that serve it: the statements and the transactions that change them
(`Index` runs each one). What a node's policy is, and when one differs, is the service's to decide
(service/storepolicy.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from .dialect import Reads, Tx, call, locked
from .rows import NODE_COLUMNS, NodeRow, PolicyRecord

# What a joining node decides, given the record and the other nodes: whether its policy becomes the store's,
# and which nodes to forget (those it found dead). It raises to refuse; nothing is then written.
Decide = Callable[[PolicyRecord | None, Sequence[NodeRow]], Awaitable[tuple[bool, Sequence[str]]]]


async def record(db: Reads, locking: str = "") -> PolicyRecord | None:
    found = await db.fetch(
        f"SELECT fingerprint, document, recorded_at, recorded_by FROM policy WHERE one = 1{locking}"
    )
    if not found or found[0][0] is None:
        return None
    return PolicyRecord(*found[0])


async def nodes(db: Reads) -> list[NodeRow]:
    return [NodeRow(*r) for r in await db.fetch(f"SELECT {NODE_COLUMNS} FROM nodes ORDER BY node")]


async def join(tx: Tx, node: NodeRow, decide: Decide) -> PolicyRecord | None:
    await tx.execute("INSERT INTO policy (one) VALUES (1) ON CONFLICT (one) DO NOTHING")
    before = await record(tx, locked(tx, "UPDATE"))
    others = [n for n in await nodes(tx) if n.node != node.node]
    replace, forget = await call(decide, before, others)
    for gone in forget:
        await tx.execute("DELETE FROM nodes WHERE node = $1", gone)
    if replace:
        await tx.execute(
            """UPDATE policy SET fingerprint = $1, document = $2, recorded_at = $3, recorded_by = $4
            WHERE one = 1""",
            node.fingerprint,
            node.document,
            node.started_at,
            node.node,
        )
    await _insert(tx, node, node.seen_at)
    return before


async def heartbeat(tx: Tx, node: NodeRow, now: float) -> PolicyRecord | None:
    if await tx.fetch("SELECT 1 FROM nodes WHERE node = $1", node.node):
        await tx.execute("UPDATE nodes SET seen_at = $1 WHERE node = $2", now, node.node)
    else:  # another node forgot it
        await _insert(tx, node, now)
    return await record(tx)


async def _insert(tx: Tx, node: NodeRow, seen_at: float) -> None:
    await tx.execute(
        f"""INSERT INTO nodes ({NODE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
        ON CONFLICT (node) DO UPDATE SET fingerprint = excluded.fingerprint, document = excluded.document,
        seen_at = excluded.seen_at""",
        node.node,
        node.host,
        node.pid,
        node.fingerprint,
        node.document,
        node.started_at,
        seen_at,
    )
