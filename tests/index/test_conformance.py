"""One contract (attachstore/index/), two index backends: the same tests against SQLite and PostgreSQL.

PostgreSQL needs a server, found by tests/support/fixtures.py: the one ATTACHSTORE_TEST_POSTGRES_DSN names,
else one `tests.support.services` starts. Without either the PostgreSQL tests fail, unless
ATTACHSTORE_TEST_SKIP_SERVICES=1 says to skip them.
The tests share one database per module, emptied before each test; those about the schema get their own.

The races at the end run two PgIndex instances on one database, as two daemons would. Each forces one
interleaving: a callback of the first waits on a gate, the second starts, and the test waits until the server
reports it waiting for a lock before it opens the gate. A backend without the locks lets the second run
through, and the outcome then shows it (a row without its file, a collected ref that a renewal answered).
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from attachstore.errors import NotFound, SessionConflict, SessionNotFound, StorageFull, StorageUnavailable
from attachstore.index import (
    Hold,
    Index,
    Link,
    NodeRow,
    ObjectRow,
    PolicyRecord,
    SessionRow,
    SqliteIndex,
    schema,
)
from attachstore.index import postgres as pgindex
from attachstore.index.postgres import PgIndex
from attachstore.index.rows import LinkRow
from attachstore.index.schema import SCHEMA_VERSION, IndexUnusable
from tests.support.fixtures import database, drop_database, fresh_database
from tests.support.waiting import eventually

AnyIndex = Index
HANG = 60.0  # seconds: a guard against a hang, not a measure


def ref(c: str) -> str:
    return "sha256:" + c * 64


A, B, C, D, E = (ref(c) for c in "abcde")


def row(r: str = A, name: str | None = "a.png", at: float = 100.0, size: int = 10) -> ObjectRow:
    return ObjectRow(r, "image/png", size, 2, 3, 1, name, at, at)


async def nothing() -> None:
    pass


def no_guard(session: SessionRow) -> None:
    pass


class Gate:
    """A callback that stops until `open()`: `entered` tells that it got there."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self._open = asyncio.Event()
        self.calls: list[tuple[object, ...]] = []

    def open(self) -> None:
        self._open.set()

    async def __call__(self, *args: object) -> None:
        self.calls.append(args)
        self.entered.set()
        try:
            await asyncio.wait_for(self._open.wait(), HANG)
        except TimeoutError:
            raise AssertionError(f"the gate was not opened within {HANG:g} s") from None


# -- a PostgreSQL server for the tests (tests/support/fixtures.py finds it) ------------------------------


@pytest.fixture(scope="module")
def shared_database() -> Iterator[str]:
    """One migrated database for the module; each test starts from its tables emptied."""
    with database() as dsn:
        yield dsn


# -- the backends under test, each with raw access to its database ---------------------------------------


class SqliteStore:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened: list[SqliteIndex] = []

    async def open(self) -> SqliteIndex:
        index = await SqliteIndex.open(self.path)
        self.opened.append(index)
        return index

    async def execute(self, *statements: str) -> None:
        db = sqlite3.connect(self.path)
        try:
            for statement in statements:
                db.execute(statement)
            db.commit()
        finally:
            db.close()

    async def version(self) -> int:
        db = sqlite3.connect(self.path)
        try:
            return int(db.execute("PRAGMA user_version").fetchone()[0])
        finally:
            db.close()

    async def set_version(self, version: int) -> None:
        await self.execute(f"PRAGMA user_version = {version}")

    async def fetch(self, statement: str) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.path)
        try:
            return [tuple(r) for r in db.execute(statement)]
        finally:
            db.close()

    async def build(self, version: int) -> None:
        """The index as an attachstore of schema `version` left it."""
        await self.execute(
            *(s for m in schema.MIGRATIONS[:version] for s in m), f"PRAGMA user_version = {version}"
        )

    async def close(self) -> None:
        for index in self.opened:
            await index.close()


class PostgresStore:
    kind = "postgresql"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.opened: list[PgIndex] = []
        self._admin: Any = None

    async def open(self) -> PgIndex:
        index = await PgIndex.open(self.dsn, max_size=4)
        self.opened.append(index)
        return index

    async def admin(self) -> Any:
        if self._admin is None:
            self._admin = await asyncpg.connect(self.dsn)
        return self._admin

    async def execute(self, *statements: str) -> None:
        db = await self.admin()
        async with db.transaction():
            for statement in statements:
                await db.execute(statement)

    async def version(self) -> int:
        return int(await (await self.admin()).fetchval("SELECT version FROM attachstore_schema"))

    async def set_version(self, version: int) -> None:
        await self.execute(f"UPDATE attachstore_schema SET version = {version}")

    async def fetch(self, statement: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await (await self.admin()).fetch(statement)]

    async def build(self, version: int) -> None:
        await self.execute(
            "CREATE TABLE attachstore_schema (one boolean PRIMARY KEY DEFAULT true, version integer)",
            f"INSERT INTO attachstore_schema (version) VALUES ({version})",
            *(s for m in pgindex.MIGRATIONS[:version] for s in m),
        )

    async def empty(self) -> None:
        """Delete every row (much faster than TRUNCATE on tables this small), children first."""
        db = await self.admin()
        found = await db.fetch(
            """SELECT tablename FROM pg_tables
            WHERE schemaname = 'public' AND tablename <> 'attachstore_schema'"""
        )
        tables = {r[0] for r in found}
        known = [
            t
            for t in ("holds", "variants", "grants", "sessions", "objects", "runs", "nodes", "policy")
            if t in tables
        ]
        if known:
            await db.execute("; ".join(f"DELETE FROM {t}" for t in known))
        # After the deletes: a table of a later schema version than this list knows, such as the totals
        # that their triggers keep
        if others := tables - set(known):
            await db.execute(f"TRUNCATE {', '.join(sorted(others))} CASCADE")
        await db.execute("DROP TRIGGER IF EXISTS inject ON objects")

    async def lock_waiters(self) -> int:
        """Sessions of this database waiting for a lock (advisory, row or transaction)."""
        return int(
            await (await self.admin()).fetchval(
                """SELECT count(*) FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock'"""
            )
        )

    async def until_waiting(self, task: asyncio.Task[Any], count: int = 1) -> None:
        """Until `count` sessions wait for a lock, or `task` has finished (without waiting: the test's
        assertions then tell what went wrong)."""

        async def waiting() -> bool:
            return task.done() or await self.lock_waiters() >= count

        await eventually(waiting, f"{count} sessions to wait for a lock", every=0.002)

    async def inject(self, body: str) -> None:
        """A trigger on inserts into objects, running `body` (PL/pgSQL) first."""
        await self.execute(
            "CREATE SEQUENCE IF NOT EXISTS inject_calls",
            "ALTER SEQUENCE inject_calls RESTART",
            f"""CREATE OR REPLACE FUNCTION inject() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN {body} RETURN NEW; END $$""",
            "CREATE TRIGGER inject BEFORE INSERT ON objects FOR EACH ROW EXECUTE FUNCTION inject()",
        )

    async def close(self) -> None:
        for index in self.opened:
            await index.close()
        if self._admin is not None:
            await self._admin.close()


Store = SqliteStore | PostgresStore


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store with a migrated, empty index; `await store.open()` opens an index on it (again)."""
    s: Store
    if request.param == "sqlite":
        s = SqliteStore(tmp_path / "index.sqlite3")
    else:
        s = PostgresStore(request.getfixturevalue("shared_database"))
    try:
        if isinstance(s, PostgresStore):
            await s.empty()
        yield s
    finally:
        await s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def blank(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store whose database has never seen attachstore."""
    s: Store
    if request.param == "sqlite":
        s = SqliteStore(tmp_path / "index.sqlite3")
        yield s
        await s.close()
        return
    dsn = fresh_database()
    s = PostgresStore(dsn)
    try:
        yield s
    finally:
        await s.close()
        drop_database(dsn)


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[PostgresStore]:
    """The PostgreSQL store alone, for what only a server shared by several nodes can show."""
    s = PostgresStore(request.getfixturevalue("shared_database"))
    try:
        await s.empty()
        yield s
    finally:
        await s.close()


@pytest.fixture
async def index(store: Store) -> AnyIndex:
    return await store.open()


# -- the interface ---------------------------------------------------------------------------------------


def test_pgindex_has_the_interface_of_index() -> None:
    public = {n for n in dir(SqliteIndex) if not n.startswith("_")} - {"write", "open"}
    assert public <= set(dir(PgIndex))
    for name in public:
        mine, theirs = (
            inspect.signature(getattr(PgIndex, name)),
            inspect.signature(getattr(SqliteIndex, name)),
        )
        assert mine == theirs, name
        assert inspect.iscoroutinefunction(getattr(PgIndex, name)) == inspect.iscoroutinefunction(
            getattr(SqliteIndex, name)
        ), name


def test_the_postgresql_migrations_are_the_twins_of_sqlites() -> None:
    assert len(pgindex.MIGRATIONS) == len(schema.MIGRATIONS) == SCHEMA_VERSION


# -- schema ----------------------------------------------------------------------------------------------


async def test_a_new_index_is_migrated_once(blank: Store) -> None:
    first = await blank.open()
    await first.close()
    assert await blank.version() == SCHEMA_VERSION
    again = await blank.open()  # migrations are idempotent
    await again.ping()
    assert await blank.version() == SCHEMA_VERSION


async def test_a_newer_schema_is_refused(blank: Store) -> None:
    await (await blank.open()).close()
    await blank.set_version(SCHEMA_VERSION + 1)
    with pytest.raises(IndexUnusable, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        await blank.open()


async def test_an_older_index_is_migrated_forward(blank: Store) -> None:
    # As version 4 left it: grants without names, no variants.
    await blank.build(4)
    await blank.execute(
        f"""INSERT INTO objects (ref, media_type, bytes, width, height, frames, name, created_at, lease_at)
        VALUES ('{A}', 'image/png', 10, 2, 3, 1, 'old.png', 1.0, 1.0)""",
        f"INSERT INTO grants (tenant, ref) VALUES ('alpha', '{A}')",
    )
    index = await blank.open()
    assert await blank.version() == SCHEMA_VERSION
    got = await index.get(A, "alpha")
    assert got is not None
    assert got.name == "old.png"
    assert await index.publish_variant(row(B, None), A, "fit", nothing, "l")
    assert await index.variant(A, "fit") == Link(A, "fit", row(B, None), "l")


async def test_a_version_7_index_gains_the_keyed_check_column_empty(blank: Store) -> None:
    await blank.build(7)
    await blank.execute(
        f"""INSERT INTO objects (ref, media_type, bytes, width, height, frames, name, created_at, lease_at)
        VALUES ('{A}', 'image/png', 10, 2, 3, 1, NULL, 1.0, 1.0)"""
    )
    index = await blank.open()
    assert await blank.version() == SCHEMA_VERSION
    got = await index.get(A)
    assert got is not None
    assert got.keyed_check is None


async def test_a_version_8_index_drops_its_checks_of_the_bytes_alone(blank: Store) -> None:
    """Checks bind the ref, size and media type since version 9: those of version 8 (of the bytes alone)
    go, and every row is verified by its address until a verified read records a bound check."""
    await blank.build(8)
    unbound = "0123456789abcdef:" + "a" * 64  # <key id>:<keyed BLAKE3 of the bytes alone>
    await blank.execute(
        f"""INSERT INTO objects (ref, media_type, bytes, width, height, frames, name, created_at, lease_at,
        keyed_check) VALUES ('{A}', 'image/png', 10, 2, 3, 1, 'a.png', 1.0, 1.0, '{unbound}')""",
        f"""INSERT INTO objects (ref, media_type, bytes, width, height, frames, name, created_at, lease_at)
        VALUES ('{B}', 'image/png', 10, 2, 3, 1, NULL, 1.0, 1.0)""",
    )
    index = await blank.open()
    assert await blank.version() == SCHEMA_VERSION
    assert await index.get(A) == ObjectRow(A, "image/png", 10, 2, 3, 1, "a.png", 1.0, 1.0)
    assert await index.get(B) == ObjectRow(B, "image/png", 10, 2, 3, 1, None, 1.0, 1.0)
    await index.record_check(A, "v2:k:bb")
    assert (await index.get(A)).keyed_check == "v2:k:bb"  # type: ignore[union-attr]


async def test_a_version_9_index_keeps_its_links_without_checks(blank: Store) -> None:
    """Links gain their keyed check in version 10: those made before have none (each is derived again,
    and linked with a check, when first wanted), and a link published since records its check."""
    await blank.build(9)
    columns = "ref, media_type, bytes, width, height, frames, name, created_at, lease_at"
    await blank.execute(
        *(
            f"INSERT INTO objects ({columns}) VALUES ('{r}', 'image/png', 10, 2, 3, 1, NULL, 1.0, 1.0)"
            for r in (A, B)
        ),
        f"INSERT INTO variants (source, spec, variant, created_at) VALUES ('{A}', 'fit', '{B}', 1.0)",
    )
    index = await blank.open()
    assert await blank.version() == SCHEMA_VERSION
    assert await index.variant(A, "fit") == Link(A, "fit", row(B, None, at=1.0), None)
    assert await index.links() == [LinkRow(A, "fit", B, None)]
    assert await index.publish_variant(row(B, None, at=2.0), A, "fit", nothing, "v2:k:ll")
    assert await index.variant(A, "fit") == Link(
        A, "fit", row(B, None, at=1.0)._replace(lease_at=2.0), "v2:k:ll"
    )


async def test_a_version_10_index_gives_its_sessions_no_lifetime(blank: Store) -> None:
    """Sessions gain a lifetime in version 11: those made before have none, and were last used when they
    were made."""
    await blank.build(10)
    await blank.execute("INSERT INTO sessions (tenant, id, route, created_at) VALUES ('t', 's', NULL, 5.0)")
    await blank.open()
    assert await blank.version() == SCHEMA_VERSION
    assert await blank.fetch("SELECT ttl, used_at, expires_at FROM sessions") == [(None, 5.0, None)]


# -- objects ---------------------------------------------------------------------------------------------


async def test_the_keyed_check_is_published_recorded_and_kept_by_a_publication_without_one(
    index: AnyIndex,
) -> None:
    await index.publish([row(A)._replace(keyed_check="k1:aa")], nothing)
    assert (await index.get(A)).keyed_check == "k1:aa"  # type: ignore[union-attr]
    await index.publish([row(A, at=200.0)], nothing)  # e.g. the audit's re-index by an older attachstore
    assert (await index.get(A)).keyed_check == "k1:aa"  # type: ignore[union-attr]
    await index.record_check(A, "k2:bb")
    assert (await index.get(A)).keyed_check == "k2:bb"  # type: ignore[union-attr]
    await index.publish([row(A, at=300.0)._replace(keyed_check="k2:cc")], nothing)
    assert (await index.get(A)).keyed_check == "k2:cc"  # type: ignore[union-attr]
    await index.record_check(B, "k2:dd")  # no row: nothing to record it on
    assert await index.get(B) is None


async def test_publish_and_get(index: AnyIndex) -> None:
    await index.ping()
    assert await index.get(A) is None
    await index.publish([row(A), row(B, "b.png", size=20)], nothing)
    assert await index.get(A) == row(A)
    assert await index.get_many([A, B, C]) == {A: row(A), B: row(B, "b.png", size=20)}
    assert await index.get_many([]) == {}
    assert await index.refs() == {A, B}
    assert await index.rows() == [row(A), row(B, "b.png", size=20)]
    assert await index.stats() == (2, 30)


async def test_a_second_publication_keeps_created_and_first_name(index: AnyIndex) -> None:
    await index.publish([row(name=None)], nothing)
    await index.publish([row(name="a.png", at=200.0)], nothing)
    await index.publish([row(name="b.png", at=300.0)], nothing)
    got = await index.get(A)
    assert got is not None
    assert (got.name, got.created_at, got.lease_at) == ("a.png", 100.0, 300.0)


async def test_tenants_see_what_they_admitted_under_their_own_names(index: AnyIndex) -> None:
    await index.publish([row(A, "alpha.png"), row(B, "b.png")], nothing, tenant="alpha")
    await index.publish([row(A, None)], nothing, tenant="beta")
    await index.publish([row(A, "beta.png", at=200.0)], nothing, tenant="beta")
    await index.publish([row(C, "c.png")], nothing)  # the operator: no grant
    assert (await index.get(A, "alpha")).name == "alpha.png"  # type: ignore[union-attr]
    assert (await index.get(A, "beta")).name == "beta.png"  # type: ignore[union-attr]
    assert (await index.get(A)).name == "alpha.png"  # type: ignore[union-attr]
    assert await index.get(A, "gamma") is None
    assert await index.get(C, "alpha") is None
    assert await index.get(C) is not None
    assert set(await index.get_many([A, B, C], "alpha")) == {A, B}
    beta = await index.get_many([A, B, C], "beta")
    assert list(beta) == [A]
    assert (beta[A].name, beta[A].lease_at) == ("beta.png", 200.0)
    assert set(await index.get_many([A, B, C])) == {A, B, C}


async def test_a_failed_check_commits_nothing(index: AnyIndex) -> None:
    async def gone() -> None:
        raise FileNotFoundError(A)

    with pytest.raises(FileNotFoundError):
        await index.publish([row()], gone, tenant="alpha")
    assert await index.get(A) is None
    assert await index.stats() == (0, 0)


async def test_renew(index: AnyIndex) -> None:
    await index.publish([row(A), row(B)], nothing)
    renewed = await index.renew([B, C, A, B], now=200.0)
    assert list(renewed) == [B, A]
    assert (renewed[A].lease_at, renewed[A].created_at) == (200.0, 100.0)
    assert (await index.get(A)).lease_at == 200.0  # type: ignore[union-attr]
    assert await index.renew([]) == {}
    before = time.time()
    assert (await index.renew([A]))[A].lease_at >= before


async def test_discard_unpublished_spares_published_refs(index: AnyIndex) -> None:
    await index.publish([row(A)], nothing)
    removed: list[str] = []

    async def remove(r: str) -> None:
        removed.append(r)

    await index.discard_unpublished([A, C, B], remove)
    assert removed == [C, B]
    await index.discard_unpublished([], remove)
    assert removed == [C, B]


async def test_published_now(index: AnyIndex) -> None:
    assert not await index.published_now(A)
    await index.publish([row()], nothing)
    assert await index.published_now(A)


async def test_confirm_missing(index: AnyIndex) -> None:
    async def gone() -> bool:
        return True

    async def there() -> bool:
        return False

    assert await index.confirm_missing(A, gone, mark=True) is None  # no row
    await index.publish([row()], nothing)
    assert await index.confirm_missing(A, there, mark=True) is None
    assert await index.confirm_missing(A, gone, mark=False) == "ok"
    assert (await index.get(A)).state == "ok"  # type: ignore[union-attr]
    assert await index.confirm_missing(A, gone, mark=True) == "ok"
    assert (await index.get(A)).state == "missing"  # type: ignore[union-attr]
    assert await index.confirm_missing(A, gone, mark=True) == "missing"


async def test_settle_records_what_the_decision_found_under_the_refs_lock(index: AnyIndex) -> None:
    seen: list[ObjectRow] = []

    def deciding(state: str) -> Callable[[ObjectRow], Awaitable[tuple[str, str]]]:
        async def decide(found: ObjectRow) -> tuple[str, str]:
            seen.append(found)
            return state, f"was {found.state}"

        return decide

    assert await index.settle(A, None, deciding("missing")) is None  # no row: not even asked
    await index.publish([row()], nothing, tenant="t1")
    assert await index.settle(A, "t2", deciding("missing")) is None  # a row t2 may not see is no row
    assert seen == []
    assert await index.settle(A, "t1", deciding("quarantined")) == "was ok"
    assert await index.settle(A, None, deciding("quarantined")) == "was quarantined"  # unchanged: no write
    assert [s.state for s in seen] == ["ok", "quarantined"]
    assert (await index.get(A)).state == "quarantined"  # type: ignore[union-attr]
    await index.publish([row(at=300.0)], nothing)  # the same bytes admitted again
    assert (await index.get(A)).state == "ok"  # type: ignore[union-attr]


async def test_runs_and_stats(index: AnyIndex) -> None:
    assert await index.runs() == {}
    assert await index.stats() == (0, 0)
    await index.record_run("gc", {"collected": 1}, now=5.0)
    await index.record_run("audit", {"findings": 0.5})
    await index.record_run("gc", {"collected": 2, "skipped": 1}, now=6.0)
    runs = await index.runs()
    assert runs["gc"] == (6.0, {"collected": 2, "skipped": 1})
    assert runs["audit"][1] == {"findings": 0.5}


# -- garbage collection ----------------------------------------------------------------------------------


class Files:
    """Object files as a set: what `remove` callbacks take away, and what checks look for."""

    def __init__(self, *refs: str) -> None:
        self.present = set(refs)
        self.removed: list[str] = []

    async def remove(self, r: str) -> None:
        self.removed.append(r)
        self.present.discard(r)

    def check(self, *refs: str) -> Callable[[], Awaitable[None]]:
        async def still_there() -> None:
            for r in refs:
                if r not in self.present:
                    raise FileNotFoundError(r)

        return still_there


async def test_collect_rechecks_removes_the_file_then_the_row(index: AnyIndex, store: Store) -> None:
    await index.publish([row(A, at=100.0), row(B, at=100.0), row(C, at=100.0), row(D, at=300.0)], nothing)
    await index.create_session(("t", "s"), None, 1.0)
    await index.add_holds(Hold(("t", "s"), no_guard, everything=True), [B], now=100.0)
    assert [r.ref for r in await index.collectible(200.0)] == [A, C]
    await index.renew([C], now=250.0)  # renewed after the plan: skipped
    other = await store.open()
    seen: list[ObjectRow | None] = []

    async def remove(r: str) -> None:
        seen.append(await other.get(r))  # the row still stands while its file goes

    assert await index.collect([A, B, C, D, E], 200.0, remove) == [(A, 10)]
    assert seen == [row(A)]
    assert await index.refs() == {B, C, D}
    assert await index.collect([A], 200.0, remove) == []  # collected already
    assert await index.collect([], 200.0, remove) == []


async def test_collect_takes_variants_with_their_source_unless_kept(index: AnyIndex) -> None:
    files = Files(A, B, C, D, E)
    await index.publish([row(A), row(E)], nothing)
    # B: only A's variant. C: also admitted as such by a tenant. D: also held by a session.
    for r, spec in ((B, "fit"), (C, "fit-c"), (D, "fit-d")):
        assert await index.publish_variant(row(r, None), A, spec, files.check(r), "l")
    await index.publish([row(C, None)], nothing, tenant="alpha")
    await index.create_session(("t", "s"), None, 1.0)
    await index.add_holds(Hold(("t", "s"), no_guard, everything=True), [D], now=100.0)
    # E has a variant that a second source also links.
    assert await index.publish_variant(row(B, None), E, "other", nothing, "l")
    assert await index.variant(A, "fit") == Link(A, "fit", row(B, None), "l")
    assert [r.ref for r in await index.collectible(200.0)] == [A, E]  # linked variants are not candidates
    assert await index.held_and_recent(200.0) == (3, 0)  # B, C and D: linked (and D held)
    await index.renew([E], now=250.0)
    assert await index.held_and_recent(200.0) == (3, 1)  # E: within the grace period
    await index.renew([E], now=100.0)

    assert await index.collect([A], 200.0, files.remove) == [(A, 10)]
    assert files.removed == [A]  # B stays: E still links it
    assert await index.refs() == {B, C, D, E}
    assert await index.variant(A, "fit") is None

    assert await index.collect([E], 200.0, files.remove) == [(E, 10), (B, 10)]
    assert await index.refs() == {C, D}


async def test_a_variant_needs_its_source(index: AnyIndex) -> None:
    checked: list[str] = []

    async def check() -> None:
        checked.append("yes")

    assert not await index.publish_variant(row(B, None), A, "fit", check, "l")  # collected meanwhile
    assert checked == []
    assert await index.get(B) is None
    await index.publish([row(A)], nothing)
    assert await index.publish_variant(row(B, None, at=150.0), A, "fit", check, "l")
    assert await index.publish_variant(row(C, None, at=160.0), A, "fit", check, "l2")  # derived again
    assert await index.variant(A, "fit") == Link(A, "fit", row(C, None, at=160.0), "l2")
    assert await index.variant(A, "other") is None
    assert checked == ["yes", "yes"]

    async def gone() -> None:
        raise FileNotFoundError(D)

    with pytest.raises(FileNotFoundError):
        await index.publish_variant(row(D, None), A, "small", gone, "l")
    assert await index.get(D) is None
    assert await index.variant(A, "small") is None


async def test_a_link_is_removed_only_as_it_was_seen(index: AnyIndex) -> None:
    await index.publish([row(A), row(B, None), row(C, None)], nothing)
    assert await index.publish_variant(row(B, None), A, "fit", nothing, "v2:k:one")
    assert await index.publish_variant(row(C, None), A, "small", nothing, None)
    assert await index.links() == [LinkRow(A, "fit", B, "v2:k:one"), LinkRow(A, "small", C, None)]
    assert not await index.unlink(LinkRow(A, "fit", B, "v2:k:other"))  # relinked since it was seen
    assert not await index.unlink(LinkRow(A, "fit", C, "v2:k:one"))
    assert not await index.unlink(LinkRow(A, "gone", B, None))
    assert await index.unlink(LinkRow(A, "small", C, None))
    assert await index.links() == [LinkRow(A, "fit", B, "v2:k:one")]
    assert await index.get(C) is not None  # the variant stays, for gc


# -- sessions and holds ----------------------------------------------------------------------------------


async def test_create_and_get_a_session(index: AnyIndex) -> None:
    assert await index.get_session(("t", "s")) is None
    made, created = await index.create_session(("t", "s"), "gpt-4o", 5.0)
    assert created
    assert made == SessionRow("t", "s", "gpt-4o", 5.0, (), used_at=5.0)
    again, created = await index.create_session(("t", "s"), "gpt-4o", 9.0)
    assert not created
    assert again == made
    with pytest.raises(SessionConflict, match="already exists with route 'gpt-4o'"):
        await index.create_session(("t", "s"), "other", 9.0)
    assert await index.get_session(("u", "s")) is None  # sessions belong to their tenant
    assert (await index.create_session(("u", "s"), None, 6.0))[1]
    assert await index.get_session(("t", "s")) == made


async def test_set_route_runs_the_guard_on_the_session(index: AnyIndex) -> None:
    await index.publish([row()], nothing)
    await index.create_session(("t", "s"), "vision", 1.0)
    await index.add_holds(Hold(("t", "s"), no_guard, everything=True), [A], 2.0)
    seen: list[SessionRow] = []

    def refuse(session: SessionRow) -> None:
        seen.append(session)
        raise SessionConflict("no")

    with pytest.raises(SessionConflict):
        await index.set_route(("t", "s"), "text", refuse)
    assert seen == [SessionRow("t", "s", "vision", 1.0, (A,), used_at=2.0)]
    assert (await index.get_session(("t", "s"))).route == "vision"  # type: ignore[union-attr]
    switched = await index.set_route(("t", "s"), "text", no_guard)
    assert (
        switched
        == SessionRow("t", "s", "text", 1.0, (A,), used_at=2.0)
        == await index.get_session(("t", "s"))
    )
    with pytest.raises(SessionNotFound):
        await index.set_route(("t", "nope"), "text", no_guard)


async def test_add_holds_is_all_or_nothing_and_scoped(index: AnyIndex) -> None:
    await index.publish([row(A), row(B)], nothing, tenant="t")
    await index.publish([row(C)], nothing, tenant="u")
    await index.create_session(("t", "s"), None, 1.0)
    hold = Hold(("t", "s"), no_guard)
    for refs in ([A, C], [A, D]):  # C: another tenant's; D: no such object
        with pytest.raises(NotFound, match=refs[1]):
            await index.add_holds(hold, refs, 200.0)
    assert (await index.get_session(("t", "s"))).holds == ()  # type: ignore[union-attr]
    assert (await index.get(A)).lease_at == 100.0  # type: ignore[union-attr]

    held = await index.add_holds(hold, [B, A, B], 200.0)
    assert held == SessionRow("t", "s", None, 1.0, (B, A), used_at=200.0)
    assert (await index.get(A)).lease_at == 200.0  # type: ignore[union-attr]
    held = await index.add_holds(hold, [A], 300.0)  # held again: order kept
    assert held.holds == (B, A)
    everything = Hold(("t", "s"), no_guard, everything=True)  # no tokens, or the operator
    assert (await index.add_holds(everything, [C], 400.0)).holds == (B, A, C)
    assert [r.ref for r in await index.collectible(1e12)] == []
    with pytest.raises(SessionNotFound):
        await index.add_holds(Hold(("t", "nope"), no_guard), [A], 1.0)


async def test_a_refusing_guard_holds_nothing(index: AnyIndex) -> None:
    await index.publish([row()], nothing)
    await index.create_session(("t", "s"), "text", 1.0)

    def refuse(session: SessionRow) -> None:
        raise SessionConflict(f"route {session.route}")

    with pytest.raises(SessionConflict, match="route text"):
        await index.add_holds(Hold(("t", "s"), refuse, everything=True), [A], 2.0)
    with pytest.raises(SessionConflict, match="route text"):
        await index.publish([row(B)], nothing, Hold(("t", "s"), refuse))
    assert await index.get(B) is None
    assert (await index.get_session(("t", "s"))).holds == ()  # type: ignore[union-attr]


async def test_publish_into_a_session(index: AnyIndex) -> None:
    with pytest.raises(SessionNotFound):
        await index.publish([row(A)], nothing, Hold(("t", "s"), no_guard), tenant="t")
    assert await index.get(A) is None
    await index.create_session(("t", "s"), None, 1.0)
    seen: list[SessionRow] = []
    await index.publish(
        [row(B, at=50.0), row(A, at=50.0)], nothing, Hold(("t", "s"), seen.append), tenant="t"
    )
    assert seen == [SessionRow("t", "s", None, 1.0, (), used_at=1.0)]
    assert (await index.get_session(("t", "s"))).holds == (B, A)  # type: ignore[union-attr]
    assert await index.get(A, "t") == row(A, at=50.0)
    await index.publish([], nothing, Hold(("t", "s"), no_guard))
    assert await index.collectible(1e12) == []


async def test_fork_copies_the_holds_and_renews_them(index: AnyIndex) -> None:
    await index.publish([row(A), row(B)], nothing)
    await index.create_session(("t", "s"), "vision", 1.0)
    await index.add_holds(Hold(("t", "s"), no_guard, everything=True), [B, A], 2.0)
    forked = await index.fork(("t", "s"), ("t", "f"), 300.0)
    assert (
        forked
        == SessionRow("t", "f", "vision", 300.0, (B, A), used_at=300.0)
        == await index.get_session(("t", "f"))
    )
    assert (await index.get(A)).lease_at == 300.0  # type: ignore[union-attr]
    with pytest.raises(SessionConflict, match="'f' already exists"):
        await index.fork(("t", "s"), ("t", "f"), 400.0)
    with pytest.raises(SessionConflict):
        await index.fork(("t", "s"), ("t", "s"), 400.0)
    with pytest.raises(SessionNotFound):
        await index.fork(("t", "nope"), ("t", "g"), 400.0)
    with pytest.raises(SessionNotFound):
        await index.fork(("u", "s"), ("u", "g"), 400.0)  # another tenant's session
    assert await index.get_session(("t", "g")) is None
    assert (await index.fork(("t", "f"), ("t", "empty-copy"), 500.0)).holds == (B, A)


async def test_a_lifetime_is_set_renewed_by_every_use_and_replaced_by_a_put(index: AnyIndex) -> None:
    await index.publish([row(A), row(B)], nothing, tenant="t")
    made, _ = await index.create_session(("t", "s"), None, 10.0, ttl=100)
    assert (made.ttl, made.used_at, made.expires_at) == (100, 10.0, 110.0)
    assert await index.get_session(("t", "s")) == made
    held = await index.add_holds(Hold(("t", "s"), no_guard), [A], 20.0)
    assert (held.used_at, held.expires_at) == (20.0, 120.0)
    await index.publish([row(B, at=30.0)], nothing, Hold(("t", "s"), no_guard), tenant="t")
    assert (await index.get_session(("t", "s"))).expires_at == 130.0  # type: ignore[union-attr]
    forked = await index.fork(("t", "s"), ("t", "f"), 40.0)
    assert (forked.ttl, forked.used_at, forked.expires_at) == (100, 40.0, 140.0)
    assert await index.get_session(("t", "f")) == forked
    assert (await index.get_session(("t", "s"))).expires_at == 140.0  # type: ignore[union-attr]
    same, created = await index.create_session(("t", "s"), None, 50.0)  # no ttl: as it was
    assert (created, same.expires_at) == (False, 140.0)
    longer, _ = await index.create_session(("t", "s"), None, 60.0, ttl=1000)
    assert (longer.ttl, longer.used_at, longer.expires_at) == (1000, 60.0, 1060.0)
    assert await index.get_session(("t", "s")) == longer
    plain, _ = await index.create_session(("t", "p"), None, 5.0)
    assert (plain.ttl, plain.used_at, plain.expires_at) == (None, 5.0, None)
    await index.add_holds(Hold(("t", "p"), no_guard), [A], 70.0)
    assert (await index.get_session(("t", "p"))).expires_at is None  # type: ignore[union-attr]


async def test_a_migrations_lifetime_moves_the_last_use_only_forward(index: AnyIndex) -> None:
    await index.create_session(("t", "s"), None, 50.0)
    await index.keep_lifetime(("t", "s"), 100, 40.0)  # the copy was used later than the source says
    found = await index.get_session(("t", "s"))
    assert (found.ttl, found.used_at, found.expires_at) == (100, 50.0, 150.0)  # type: ignore[union-attr]
    await index.keep_lifetime(("t", "s"), None, 80.0)
    found = await index.get_session(("t", "s"))
    assert (found.ttl, found.used_at, found.expires_at) == (None, 80.0, None)  # type: ignore[union-attr]


async def test_a_touch_renews_only_a_session_unused_since(index: AnyIndex) -> None:
    await index.create_session(("t", "s"), None, 10.0, ttl=100)
    assert not await index.touch_session(("t", "s"), 50.0, 5.0)  # used at 10, after 5
    assert await index.touch_session(("t", "s"), 80.0, 20.0)
    assert (await index.get_session(("t", "s"))).expires_at == 180.0  # type: ignore[union-attr]
    assert not await index.touch_session(("t", "gone"), 90.0, 1e12)


async def test_expired_sessions_are_released_with_leases_from_their_expiry(index: AnyIndex) -> None:
    await index.publish([row(A), row(B), row(C)], nothing, tenant="t")
    await index.create_session(("t", "old"), None, 10.0, ttl=100)  # expires at 110
    await index.create_session(("u", "old"), None, 10.0, ttl=50)  # another tenant's, expires at 60
    await index.create_session(("t", "live"), None, 10.0, ttl=1000)
    await index.create_session(("t", "kept"), None, 10.0)  # no lifetime
    await index.add_holds(Hold(("t", "old"), no_guard), [A, B], 10.0)
    await index.add_holds(Hold(("t", "live"), no_guard), [B], 10.0)
    await index.add_holds(Hold(("t", "kept"), no_guard), [C], 10.0)
    assert [(s.tenant, s.id, s.holds) for s in await index.expired_sessions(200.0)] == [
        ("u", "old", ()),
        ("t", "old", ()),
    ]
    # Before gc releases them, its plan already sees their objects as unheld since the expiry.
    assert [r.ref for r in await index.collectible(150.0)] == [A]
    assert await index.collectible(100.0) == []  # the grace counts from the expiry, at 110
    assert await index.held_and_recent(150.0, 200.0) == (2, 0)  # B (live) and C (kept)
    assert await index.held_and_recent(100.0, 200.0) == (2, 1)  # A: within the grace since its expiry

    assert await index.release_expired(("t", "old"), 100.0) is None  # not yet expired at 100
    assert await index.release_expired(("t", "old"), 200.0) == 2
    assert await index.release_expired(("t", "old"), 200.0) is None  # gone
    assert await index.get_session(("t", "old")) is None
    assert (await index.get(A)).lease_at == 110.0  # type: ignore[union-attr]  # renewed to its expiry
    assert [r.ref for r in await index.collectible(150.0)] == [A]
    assert await index.release_expired(("t", "live"), 200.0) is None
    assert await index.release_expired(("u", "old"), 200.0) == 0
    assert await index.expired_sessions(200.0) == []


async def test_a_renewed_session_is_not_released(index: AnyIndex) -> None:
    await index.publish([row(A)], nothing, tenant="t")
    await index.create_session(("t", "s"), None, 10.0, ttl=100)
    await index.add_holds(Hold(("t", "s"), no_guard), [A], 150.0)  # after it expired at 110, before gc
    assert await index.expired_sessions(200.0) == []
    assert await index.release_expired(("t", "s"), 200.0) is None
    assert await index.collectible(240.0) == []  # held until it expires at 250
    assert [r.ref for r in await index.collectible(300.0)] == [A]


async def test_delete_session_releases_and_renews(index: AnyIndex) -> None:
    await index.publish([row(A), row(B)], nothing)
    await index.create_session(("t", "s"), None, 1.0)
    await index.add_holds(Hold(("t", "s"), no_guard, everything=True), [A, B], 2.0)
    await index.fork(("t", "s"), ("t", "f"), 3.0)
    assert await index.delete_session(("t", "s"), 500.0) == 2
    assert await index.get_session(("t", "s")) is None
    assert (await index.get(A)).lease_at == 500.0  # type: ignore[union-attr]  # the grace period starts now
    assert await index.collectible(1e12) == []  # the fork still holds them
    assert await index.delete_session(("t", "f"), 600.0) == 2
    assert [r.ref for r in await index.collectible(601.0)] == [A, B]
    assert [r.ref for r in await index.collectible(600.0)] == []
    with pytest.raises(SessionNotFound):
        await index.delete_session(("t", "s"), 700.0)
    assert (await index.create_session(("t", "s"), None, 800.0))[0].holds == ()


# -- what the operator page looks up -------------------------------------------------------------------------


async def test_holders_are_a_tenants_sessions_that_hold_the_ref_paged_by_id(index: AnyIndex) -> None:
    await index.publish([row(A), row(B)], nothing)
    for key, refs in ((("t", "s2"), [A]), (("t", "s1"), [A, B]), (("t", "s3"), [B]), (("u", "x"), [A])):
        await index.create_session(key, None, 1.0)
        await index.add_holds(Hold(key, no_guard, everything=True), refs, 2.0)
    assert await index.holders(A, "t") == ["s1", "s2"]
    assert await index.holders(A, "t", limit=1) == ["s1"]
    assert await index.holders(A, "t", after="s1") == ["s2"]
    assert await index.holders(A, "u") == ["x"]
    assert await index.holders(C, "t") == []
    await index.delete_session(("t", "s1"), 3.0)
    assert await index.holders(A, "t") == ["s2"]


async def test_quarantined_objects_are_those_a_tenant_may_see_paged_by_ref(index: AnyIndex) -> None:
    await index.publish([row(A), row(B), row(C)], nothing, tenant="t")
    await index.publish([row(D)], nothing, tenant="u")
    for r in (A, C, D):
        await index.settle(r, None, quarantine)
    assert [r.ref for r in await index.quarantined("t")] == [A, C]
    assert [r.ref for r in await index.quarantined("t", after=A)] == [C]
    assert [r.ref for r in await index.quarantined("t", limit=1)] == [A]
    assert [r.ref for r in await index.quarantined("u")] == [D]
    assert [r.ref for r in await index.quarantined(None)] == [A, C, D]
    assert {r.state for r in await index.quarantined(None)} == {"quarantined"}


async def quarantine(found: ObjectRow) -> tuple[str, None]:
    return "quarantined", None


# -- PostgreSQL: failures ----------------------------------------------------------------------------------


# -- the store's policy and its nodes ----------------------------------------------------------------------


def node(name: str, fingerprint: str = "sha256:p", seen: float = 10.0) -> NodeRow:
    return NodeRow(name, "host/boot/1", 42, fingerprint, f'{{"p": "{fingerprint}"}}', 5.0, seen)


def deciding(replace: bool, forget: tuple[str, ...] = ()) -> Any:
    seen: list[tuple[PolicyRecord | None, list[str]]] = []

    async def decide(record: PolicyRecord | None, others: Any) -> tuple[bool, tuple[str, ...]]:
        seen.append((record, [n.node for n in others]))
        return replace, forget

    decide.seen = seen  # type: ignore[attr-defined]
    return decide


async def test_a_store_has_no_policy_until_a_node_records_one(index: AnyIndex) -> None:
    assert await index.policy() is None
    assert await index.join(node("a"), deciding(False)) is None
    assert await index.policy() is None  # joined without recording
    assert [n.node for n in await index.nodes()] == ["a"]
    assert await index.join(node("b"), deciding(True)) is None
    assert await index.policy() == PolicyRecord("sha256:p", '{"p": "sha256:p"}', 5.0, "b")


async def test_a_joining_node_sees_the_record_and_the_others_and_forgets_the_gone(index: AnyIndex) -> None:
    await index.join(node("a", "sha256:1"), deciding(True))
    await index.join(node("b", "sha256:1"), deciding(False))
    decide = deciding(True, ("a",))
    before = await index.join(node("c", "sha256:2"), decide)
    assert before is not None
    assert before.recorded_by == "a"
    assert decide.seen == [(before, ["a", "b"])]
    assert [n.node for n in await index.nodes()] == ["b", "c"]
    record = await index.policy()
    assert record is not None
    assert (record.fingerprint, record.recorded_by) == ("sha256:2", "c")


async def test_a_refusing_node_changes_nothing(index: AnyIndex) -> None:
    await index.join(node("a", "sha256:1"), deciding(True))

    async def refuse(record: PolicyRecord | None, others: Any) -> tuple[bool, list[str]]:
        raise ValueError("another policy")

    with pytest.raises(ValueError, match="another policy"):
        await index.join(node("b", "sha256:2"), refuse)
    assert [n.node for n in await index.nodes()] == ["a"]
    record = await index.policy()
    assert record is not None
    assert record.fingerprint == "sha256:1"


async def test_beats_and_leaving(index: AnyIndex) -> None:
    a = node("a")
    await index.join(a, deciding(True))
    assert (await index.heartbeat(a, 99.0)) == await index.policy()
    assert [n.seen_at for n in await index.nodes()] == [99.0]
    await index.leave("a")
    assert await index.nodes() == []
    await index.heartbeat(a, 100.0)  # forgotten by another node meanwhile: back
    assert [(n.node, n.seen_at, n.document) for n in await index.nodes()] == [("a", 100.0, a.document)]


async def test_nodes_joining_at_once_decide_one_after_the_other(pg: PostgresStore) -> None:
    one, two = await pg.open(), await pg.open()
    await one.join(node("z", "sha256:0"), deciding(True))  # the record's row exists: only its lock orders
    gate = Gate()

    async def first(record: PolicyRecord | None, others: Any) -> tuple[bool, list[str]]:
        await gate()
        return True, []

    second = deciding(True)
    joining = asyncio.create_task(one.join(node("a", "sha256:1"), first))
    await gate.entered.wait()
    other = asyncio.create_task(two.join(node("b", "sha256:2"), second))
    await pg.until_waiting(other)
    assert not other.done()
    gate.open()
    await joining
    await other
    [(seen_record, seen_nodes)] = second.seen
    assert seen_record is not None
    assert seen_record.recorded_by == "a"
    assert seen_nodes == ["a", "z"]


async def test_a_full_disk_is_storage_full(pg: PostgresStore) -> None:
    index = await pg.open()
    await pg.inject("RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full';")
    with pytest.raises(StorageFull, match="could not extend file"):
        await index.publish([row()], nothing)
    await pg.execute("DROP TRIGGER inject ON objects")
    await index.publish([row()], nothing)  # nothing stuck: the next transaction commits
    assert await index.get(A) == row()


@pytest.mark.parametrize("code", ["serialization_failure", "deadlock_detected"])
async def test_conflicts_are_retried_inside_the_method(pg: PostgresStore, code: str) -> None:
    index = await pg.open()
    await pg.inject(
        f"IF nextval('inject_calls') <= 2 THEN RAISE EXCEPTION 'conflict' USING ERRCODE = '{code}'; END IF;"
    )
    checks: list[int] = []

    async def check() -> None:
        checks.append(1)

    await index.publish([row()], check)
    assert len(checks) == 3  # the whole transaction again, callbacks included
    assert await index.get(A) == row()


async def test_conflicts_that_persist_are_storage_unavailable(pg: PostgresStore) -> None:
    index = await pg.open()
    await pg.inject("RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure';")
    with pytest.raises(StorageUnavailable, match="conflict"):
        await index.publish([row()], nothing)


async def test_an_unreachable_server_is_storage_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once it is closed
    with pytest.raises(StorageUnavailable, match="cannot connect"):
        await PgIndex.open(f"postgresql://postgres@127.0.0.1:{port}/attachstore")
    with pytest.raises(ValueError, match="max_size >= 2"):  # sweeping() keeps a connection of its own
        await PgIndex.open(f"postgresql://postgres@127.0.0.1:{port}/attachstore", max_size=1)


async def test_a_closed_index_is_storage_unavailable(pg: PostgresStore) -> None:
    index = await pg.open()
    await index.close()
    with pytest.raises(StorageUnavailable, match="closed"):
        await index.get(A)
    with pytest.raises(StorageUnavailable, match="closed"):
        await index.publish([row()], nothing)
    with pytest.raises(StorageUnavailable, match="closed"):
        async with index.sweeping():
            pass


async def test_connections_ended_by_the_server(pg: PostgresStore) -> None:
    index = await pg.open()
    await index.publish([row()], nothing)
    db = await pg.admin()
    await db.execute(
        """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = 'attachstore'"""
    )
    # A read goes to another connection; a write either commits or fails as STORAGE_UNAVAILABLE.
    assert await index.get(A) == row()
    for _ in range(3):
        try:
            await index.renew([A], now=200.0)
        except StorageUnavailable:
            continue
        break
    assert (await index.get(A)).lease_at == 200.0  # type: ignore[union-attr]


# -- PostgreSQL: several nodes on one database -------------------------------------------------------------


async def test_nodes_migrating_at_once_migrate_once() -> None:
    dsn = fresh_database()
    try:
        indexes = await asyncio.gather(*(PgIndex.open(dsn, max_size=2) for _ in range(4)))
        try:
            await indexes[0].publish([row()], nothing)
            assert [await i.get(A) for i in indexes] == [row()] * 4
        finally:
            for i in indexes:
                await i.close()
        db = await asyncpg.connect(dsn)
        try:
            assert await db.fetchval("SELECT version FROM attachstore_schema") == SCHEMA_VERSION
            assert await db.fetchval("SELECT count(*) FROM attachstore_schema") == 1
        finally:
            await db.close()
    finally:
        drop_database(dsn)


async def test_collect_then_renew(pg: PostgresStore) -> None:
    gc, admission = await pg.open(), await pg.open()
    await gc.publish([row(at=100.0)], nothing)
    gate = Gate()
    collecting = asyncio.create_task(gc.collect([A], 150.0, gate))
    await gate.entered.wait()  # the file is going
    renewing = asyncio.create_task(admission.renew([A], now=200.0))
    await pg.until_waiting(renewing)
    gate.open()
    assert await collecting == [(A, 10)]
    assert await renewing == {}  # no row: the admission writes the bytes again
    assert await admission.get(A) is None


async def test_a_reads_finding_waits_for_a_sweep_and_finds_no_row(pg: PostgresStore) -> None:
    """A read that found the file gone (gc removed it) settles after the sweep: no row, nothing marked."""
    gc, read = await pg.open(), await pg.open()
    await gc.publish([row(at=100.0)], nothing)
    gate = Gate()
    collecting = asyncio.create_task(gc.collect([A], 150.0, gate))
    await gate.entered.wait()  # the file is gone, the row not yet
    decided: list[ObjectRow] = []

    async def missing(found: ObjectRow) -> tuple[str, str]:
        decided.append(found)
        return "missing", "missing"

    settling = asyncio.create_task(read.settle(A, None, missing))
    await pg.until_waiting(settling)
    gate.open()
    assert await collecting == [(A, 10)]
    assert await settling is None
    assert decided == []


async def test_a_reads_finding_waits_for_a_publish_and_sees_its_row(pg: PostgresStore) -> None:
    """A heal's publish and a read's mark of the same ref happen one after the other, never interleaved."""
    admission, read = await pg.open(), await pg.open()
    await admission.publish([row(at=100.0)], nothing)
    gate = Gate()
    publishing = asyncio.create_task(admission.publish([row(at=200.0)], gate))
    await gate.entered.wait()  # the admission checks its (healed) files under the lock

    async def quarantined(found: ObjectRow) -> tuple[str, float]:
        return "quarantined", found.lease_at

    settling = asyncio.create_task(read.settle(A, None, quarantined))
    await pg.until_waiting(settling)
    gate.open()
    await publishing
    assert await settling == 200.0  # decided on the published row, after the publish


async def test_an_admission_first_keeps_its_object(pg: PostgresStore) -> None:
    gc, admission = await pg.open(), await pg.open()
    await gc.publish([row(at=100.0)], nothing)
    await admission.create_session(("t", "s"), None, 1.0)
    gate, files = Gate(), Files(A)
    publishing = asyncio.create_task(
        admission.publish([row(at=300.0)], gate, Hold(("t", "s"), no_guard), tenant="t")
    )
    await gate.entered.wait()  # the admission checks its files
    collecting = asyncio.create_task(gc.collect([A], 150.0, files.remove))
    await pg.until_waiting(collecting)
    gate.open()
    await publishing
    assert await collecting == []
    assert files.removed == []
    assert (await gc.get(A)).lease_at == 300.0  # type: ignore[union-attr]
    assert (await gc.get_session(("t", "s"))).holds == (A,)  # type: ignore[union-attr]


async def test_an_admission_renews_an_expired_session_before_gc_releases_it(pg: PostgresStore) -> None:
    """gc's release of an expired session waits for an admission that holds the session's row, then finds
    it renewed and leaves it, and its holds, as they are."""
    gc, admission = await pg.open(), await pg.open()
    await gc.publish([row(A, at=10.0)], nothing, tenant="t")
    await admission.create_session(("t", "s"), None, 10.0, ttl=100)
    await admission.add_holds(Hold(("t", "s"), no_guard), [A], 10.0)
    assert [s.id for s in await gc.expired_sessions(500.0)] == ["s"]  # gc plans to release it
    gate = Gate()
    publishing = asyncio.create_task(
        admission.publish([row(B, at=450.0)], gate, Hold(("t", "s"), no_guard), tenant="t")
    )
    await gate.entered.wait()  # the admission holds the session's row
    releasing = asyncio.create_task(gc.release_expired(("t", "s"), 500.0))
    await pg.until_waiting(releasing)
    gate.open()
    await publishing
    assert await releasing is None
    session = await gc.get_session(("t", "s"))
    assert session is not None
    assert (session.holds, session.expires_at) == ((A, B), 550.0)
    assert await gc.collect([A], 1e6, Files(A).remove) == []  # still held


async def test_gc_releases_an_expired_session_before_an_admission_into_it(pg: PostgresStore) -> None:
    gc, admission = await pg.open(), await pg.open()
    await admission.create_session(("t", "s"), None, 10.0, ttl=100)
    assert await gc.release_expired(("t", "s"), 500.0) == 0
    with pytest.raises(SessionNotFound):  # the host makes it again (attachstore mcp does), then admits
        await admission.publish([row(B, at=501.0)], nothing, Hold(("t", "s"), no_guard), tenant="t")
    assert await admission.get(B) is None


async def test_collect_then_hold(pg: PostgresStore) -> None:
    gc, daemon = await pg.open(), await pg.open()
    await gc.publish([row(at=100.0)], nothing)
    await daemon.create_session(("t", "s"), None, 1.0)
    gate = Gate()
    collecting = asyncio.create_task(gc.collect([A], 150.0, gate))
    await gate.entered.wait()
    holding = asyncio.create_task(daemon.add_holds(Hold(("t", "s"), no_guard, everything=True), [A], 200.0))
    await pg.until_waiting(holding)
    gate.open()
    assert await collecting == [(A, 10)]
    with pytest.raises(NotFound):
        await holding
    assert (await daemon.get_session(("t", "s"))).holds == ()  # type: ignore[union-attr]


async def test_discard_then_publish(pg: PostgresStore) -> None:
    gc, admission = await pg.open(), await pg.open()
    files, gate = Files(A), Gate()

    async def remove(r: str) -> None:
        await gate(r)
        await files.remove(r)

    discarding = asyncio.create_task(gc.discard_unpublished([A], remove))
    await gate.entered.wait()  # no row publishes A: its file is going
    publishing = asyncio.create_task(admission.publish([row()], files.check(A)))
    await pg.until_waiting(publishing)
    gate.open()
    await discarding
    with pytest.raises(FileNotFoundError):  # the admission sees its file gone, publishes nothing
        await publishing
    assert await admission.get(A) is None


async def test_publish_then_discard(pg: PostgresStore) -> None:
    gc, admission = await pg.open(), await pg.open()
    files, gate = Files(A), Gate()

    async def check() -> None:
        await gate()
        await files.check(A)()

    publishing = asyncio.create_task(admission.publish([row()], check))
    await gate.entered.wait()
    discarding = asyncio.create_task(gc.discard_unpublished([A], files.remove))
    await pg.until_waiting(discarding)
    gate.open()
    await publishing
    await discarding
    assert files.removed == []  # a published row always has its file
    assert A in files.present
    assert await gc.get(A) == row()


async def test_a_guard_sees_holds_committed_while_it_waited(pg: PostgresStore) -> None:
    one, two = await pg.open(), await pg.open()
    await one.create_session(("t", "s"), "vision", 1.0)
    gate = Gate()
    publishing = asyncio.create_task(one.publish([row()], gate, Hold(("t", "s"), no_guard)))
    await gate.entered.wait()  # the session is locked, the hold not yet made
    seen: list[tuple[str, ...]] = []
    switching = asyncio.create_task(two.set_route(("t", "s"), "text", lambda s: seen.append(s.holds)))
    await pg.until_waiting(switching)
    gate.open()
    await publishing
    await switching
    assert seen == [(A,)]


async def test_one_session_created_by_two_nodes(pg: PostgresStore) -> None:
    one, two = await pg.open(), await pg.open()
    results = await asyncio.gather(
        one.create_session(("t", "s"), "m", 1.0), two.create_session(("t", "s"), "m", 2.0)
    )
    assert sorted(created for _, created in results) == [False, True]
    assert results[0][0] == results[1][0]


async def test_one_gc_sweeps_at_a_time(pg: PostgresStore) -> None:
    one, two = await pg.open(), await pg.open()
    order: list[str] = []

    async def second() -> None:
        async with two.sweeping():
            order.append("second in")

    async with one.sweeping():
        order.append("first in")
        waiting = asyncio.create_task(second())
        await pg.until_waiting(waiting)
        assert not waiting.done()
        order.append("first out")
    await waiting
    assert order == ["first in", "first out", "second in"]
    async with one.sweeping():  # released at exit: the next run starts at once
        pass
