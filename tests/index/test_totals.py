"""The totals the triggers keep (attachstore/index/totals.py), on both backends: after every kind of change,
each figure is what counting the rows gives."""

from __future__ import annotations

from attachstore.index import Hold, totals
from attachstore.index.schema import SCHEMA_VERSION
from tests.index.test_conformance import A, AnyIndex, B, C, D, Store, no_guard, nothing, row


async def counted(store: Store) -> dict[tuple[str, str], int]:
    """Every figure as counting the rows gives it (the statements that fill the totals at migration)."""
    found: dict[tuple[str, str], int] = {}
    for select in totals._FILL:
        for scope, figure, _, value in await store.fetch(select):
            if value:
                found[(scope, figure)] = found.get((scope, figure), 0) + int(value)
    return found


async def kept(store: Store) -> dict[tuple[str, str], int]:
    rows = await store.fetch("SELECT scope, figure, sum(value) FROM totals GROUP BY scope, figure")
    return {(r[0], r[1]): int(r[2]) for r in rows if r[2]}


async def test_the_totals_follow_every_change(store: Store, index: AnyIndex) -> None:
    assert await kept(store) == {}
    await index.publish([row(A, size=10), row(B, size=20)], nothing, tenant="t")
    await index.publish([row(A, size=10), row(C, size=40)], nothing, tenant="u")
    await index.create_session(("t", "s"), None, 1.0)
    await index.create_session(("u", "s"), None, 1.0)
    await index.add_holds(Hold(("t", "s"), no_guard), [A, B], 2.0)
    await index.add_holds(Hold(("u", "s"), no_guard), [A], 2.0)
    await index.fork(("t", "s"), ("t", "f"), 3.0)
    assert await kept(store) == await counted(store)
    figures = await index.totals(totals.STORE)
    assert (figures["objects"], figures["bytes"], figures["objects:image/png"]) == (3, 70, 3)
    # held: A three times, B twice; each once
    assert (figures["held_bytes"], figures["held_unique_bytes"], figures["sessions"]) == (70, 30, 3)
    assert (await index.totals("u"))["bytes"] == 50
    assert (await index.totals("t"))["held_bytes"] == 60

    await index.publish_variant(row(D, None, size=5), A, "preview/1 side=64 bytes=16384", nothing, "l")
    await index.settle(C, None, _quarantine)
    assert await kept(store) == await counted(store)
    assert (await index.totals("u"))["state:quarantined"] == 1
    assert (await index.totals(totals.STORE))["previews"] == 1

    await index.delete_session(("t", "s"), 10.0)
    await index.delete_session(("t", "f"), 10.0)
    await index.delete_session(("u", "s"), 10.0)
    await index.collect([A, B, C], 1e12, _removed)
    assert await kept(store) == await counted(store) == {}


async def _quarantine(r: object) -> tuple[str, None]:
    return "quarantined", None


async def _removed(ref: str) -> None:
    pass


async def test_a_version_11_index_gets_its_totals_counted(blank: Store) -> None:
    await blank.build(11)
    await blank.execute(
        f"""INSERT INTO objects (ref, media_type, bytes, width, height, frames, created_at, lease_at, state)
        VALUES ('{A}', 'image/png', 10, 1, 1, 1, 1.0, 1.0, 'ok'),
        ('{B}', 'image/jpeg', 20, 1, 1, 1, 1.0, 1.0, 'missing')""",
        f"INSERT INTO grants (tenant, ref) VALUES ('t', '{A}'), ('t', '{B}'), ('u', '{A}')",
        "INSERT INTO sessions (tenant, id, created_at, used_at) VALUES ('t', 's', 1.0, 1.0)",
        f"INSERT INTO holds (tenant, session, ref, created_at) VALUES ('t', 's', '{A}', 1.0)",
    )
    await blank.open()
    assert await blank.version() == SCHEMA_VERSION
    assert await kept(blank) == await counted(blank)
    assert (await kept(blank))[("t", "bytes")] == 30
