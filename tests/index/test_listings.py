"""Listings on both index backends (attachstore/index/listings.py): pages of a tenant's sessions, newest used
first, and of a session's holds, oldest first, each continued from where the last page ended."""

from __future__ import annotations

from attachstore.index import Hold
from attachstore.index.listings import prefix_end
from tests.index.test_conformance import A, AnyIndex, B, C, Store, no_guard, nothing, row


def test_prefix_end_is_the_least_string_above_the_prefix() -> None:
    assert prefix_end("mcp-") == "mcp."
    assert prefix_end("a") == "b"
    assert all("mcp-" <= s < prefix_end("mcp-") for s in ("mcp-", "mcp-0", "mcp-zzz"))
    assert prefix_end("mcp-") <= "mcp."


async def sessions(index: AnyIndex, tenant: str = "t", **given: object) -> list[str]:
    """Every page of two sessions, followed to its end."""
    found: list[str] = []
    after = None
    while True:
        page = await index.sessions_page(
            tenant,
            prefix=str(given.get("prefix", "")),
            expired=given.get("expired"),  # type: ignore[arg-type]
            now=float(given.get("now", 1000.0)),  # type: ignore[arg-type]
            after=after,
            limit=2,
        )
        found += [s.id for s in page]
        if len(page) < 2:
            return found
        after = (page[-1].used_at, page[-1].id)


async def test_sessions_newest_used_first_with_their_images_and_bytes(store: Store, index: AnyIndex) -> None:
    await index.publish([row(A, size=10), row(B, size=20), row(C, size=40)], nothing, tenant="t")
    for i, id_ in enumerate(["old", "mid", "new", "tie-a", "tie-b"]):
        await index.create_session(("t", id_), "vision" if id_ == "new" else None, float(10 + min(i, 3)))
    await index.create_session(("u", "other"), None, 99.0)  # another tenant's: never listed
    everything = Hold(("t", "new"), no_guard, everything=True)
    await index.add_holds(everything, [A, B], 50.0)
    await index.add_holds(Hold(("t", "old"), no_guard, everything=True), [A], 50.0)
    # as the holds left it or not (a hold renews a session's lifetime): the times this test wants
    await store.execute(
        "UPDATE sessions SET used_at = created_at",
        "UPDATE sessions SET used_at = 20.0 WHERE id = 'new'",
    )
    assert await sessions(index) == ["new", "tie-b", "tie-a", "mid", "old"]
    assert await sessions(index, "u") == ["other"]
    assert await sessions(index, "nobody") == []
    [first] = await index.sessions_page("t", prefix="", expired=None, now=0.0, after=None, limit=1)
    assert (first.id, first.route, first.created_at, first.used_at) == ("new", "vision", 12.0, 20.0)
    assert (first.expires_at, first.images, first.bytes) == (None, 2, 30)
    page = await index.sessions_page("t", prefix="", expired=None, now=0.0, after=None, limit=10)
    assert {s.id: (s.images, s.bytes) for s in page} == {
        "new": (2, 30),
        "old": (1, 10),
        "mid": (0, 0),
        "tie-a": (0, 0),
        "tie-b": (0, 0),
    }


async def test_sessions_by_prefix_and_by_expiry(store: Store, index: AnyIndex) -> None:
    for i, id_ in enumerate(["mcp-1", "mcp-2", "mcp.x", "mcp", "mcq-1", "MCP-3", "other"]):
        await index.create_session(("t", id_), None, float(i))
    await store.execute(
        "UPDATE sessions SET expires_at = 500.0 WHERE id IN ('mcp-1', 'other')",
        "UPDATE sessions SET expires_at = 2000.0 WHERE id = 'mcp-2'",
    )
    assert await sessions(index, prefix="mcp-") == ["mcp-2", "mcp-1"]
    assert await sessions(index, prefix="mcp") == ["mcp", "mcp.x", "mcp-2", "mcp-1"]
    assert await sessions(index, prefix="m") == ["mcq-1", "mcp", "mcp.x", "mcp-2", "mcp-1"]
    assert await sessions(index, prefix="zz") == []
    assert await sessions(index, expired=True) == ["other", "mcp-1"]
    assert await sessions(index, expired=True, now=500.0) == ["other", "mcp-1"]  # expires at: gone then
    assert await sessions(index, expired=True, now=499.0) == []
    assert await sessions(index, expired=False) == ["MCP-3", "mcq-1", "mcp", "mcp.x", "mcp-2"]
    assert await sessions(index, expired=True, prefix="mcp-", now=5000.0) == ["mcp-2", "mcp-1"]


async def test_holds_oldest_first_in_pages_with_the_tenants_names(index: AnyIndex) -> None:
    await index.publish([row(A, name="a-own"), row(B), row(C)], nothing, tenant="t")
    await index.publish([row(A, name="a-of-u")], nothing, tenant="u")
    await index.create_session(("t", "s"), None, 1.0)
    everything = Hold(("t", "s"), no_guard, everything=True)
    await index.add_holds(everything, [C], 5.0)
    await index.add_holds(everything, [B, A], 7.0)  # same time: by ref
    assert await index.holds_page(("t", "nope"), True, after=None, limit=5) is None
    assert await index.holds_page(("u", "s"), True, after=None, limit=5) is None  # another tenant's
    held = await index.holds_page(("t", "s"), True, after=None, limit=2)
    assert held is not None
    assert [(h.row.ref, h.held_at) for h in held] == [(C, 5.0), (A, 7.0)]
    assert held[1].row.name == "a-own"
    rest = await index.holds_page(("t", "s"), True, after=(7.0, A), limit=2)
    assert [h.row.ref for h in rest or []] == [B]
    assert await index.holds_page(("t", "s"), True, after=(7.0, B), limit=2) == []
    await index.create_session(("t", "empty"), None, 1.0)
    assert await index.holds_page(("t", "empty"), False, after=None, limit=2) == []
