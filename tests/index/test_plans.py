"""The statements of the listings, the totals and the operator page's lookups read through indexes: SQLite's
query plan for each, as the index runs it, names no full scan of objects, sessions, holds, grants or totals (a
page costs what it shows, not what the store holds)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from attachstore.index import SqliteIndex, listings, lookups, totals

A = "sha256:" + "a" * 64
TABLES = ("objects", "sessions", "holds", "grants", "totals")


class Recorder:
    """A `Reads` that keeps each statement and its arguments, and answers what the page needs to go on."""

    hold_order = "rowid"

    def __init__(self, answers: list[list[tuple[object, ...]]] | None = None) -> None:
        self.statements: list[tuple[str, tuple[object, ...]]] = []
        self.answers = answers or []

    async def fetch(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        self.statements.append((sql, args))
        return self.answers.pop(0) if self.answers else [(0, 0)]

    def refs_in(self, column: str, refs: Sequence[str], first: int) -> Iterator[tuple[str, Sequence[object]]]:
        if refs:
            yield f"{column} IN ({', '.join(f'${first + i}' for i in range(len(refs)))})", list(refs)


async def statements() -> list[tuple[str, tuple[object, ...]]]:
    found: list[tuple[str, tuple[object, ...]]] = []
    one = [("s", None, 1.0, 2.0, None, None, 0, 0)]
    for given in (
        {},
        {"prefix": "mcp-"},
        {"expired": True},
        {"expired": False, "prefix": "a"},
        {"after": (5.0, "s")},
    ):
        db = Recorder([list(one)])
        await listings.sessions_page(db, "t", now=9.0, limit=10, **given)  # type: ignore[arg-type]
        found += db.statements
    for scoped in (True, False):
        for after in (None, (1.0, A)):
            db = Recorder([[(1,)], []])
            await listings.holds_page(db, ("t", "s"), scoped, after=after, limit=10)
            found += db.statements
    for tenant in (None, "t"):
        db = Recorder()
        await listings.expired_count(db, tenant, 9.0)
        found += db.statements
    db = Recorder([[(1.0, A, 10, 1)], []])  # a chunk of one, then the chunk after it
    await listings.collectible_count(db, 9.0, chunk=1)
    found += db.statements
    db = Recorder([[]])
    await totals.read(db, "t")
    found += db.statements
    for tenant in (None, "t"):  # the operator page's lookups
        db = Recorder([[]])
        await lookups.quarantined(db, tenant, A, 10)
        await lookups.holders(db, A, "t", "s", 10)
        found += db.statements
    return found


@pytest.fixture
async def database(tmp_path: Path) -> Path:
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    await index.close()
    return tmp_path / "index.sqlite3"


async def test_no_statement_scans_a_table(database: Path) -> None:
    db = sqlite3.connect(database)
    found = await statements()
    assert len(found) >= 15
    for sql, args in found:
        plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + re.sub(r"\$(\d+)", r"?\1", sql), args)]
        scans = [step for step in plan if any(step.startswith(f"SCAN {t}") for t in TABLES)]
        assert scans == [], f"{sql}\n{plan}"
        if "lease_at >= $3" in sql:  # a chunk of the count starts where the last ended, not at the start
            assert any("(lease_at>? AND lease_at<?)" in step for step in plan), plan
    db.close()


async def test_the_quarantine_is_read_through_its_own_index(database: Path) -> None:
    """Not the primary key walked from the cursor: on a large store with little in quarantine that reads
    every row after it."""
    db = sqlite3.connect(database)
    for tenant in (None, "t"):
        recorder = Recorder([[]])
        await lookups.quarantined(recorder, tenant, A, 10)
        [(sql, args)] = recorder.statements
        plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + re.sub(r"\$(\d+)", r"?\1", sql), args)]
        assert any("objects_quarantined" in step for step in plan), plan
    db.close()
