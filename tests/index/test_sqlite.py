import asyncio
import os
import sqlite3
from pathlib import Path

import aiosqlite
import pytest

from attachstore.errors import StorageFull, StorageUnavailable
from attachstore.index import ObjectRow, SqliteIndex, rows_in
from attachstore.index import sqlite as sqlite_index
from attachstore.index.schema import SCHEMA_VERSION, IndexUnusable


async def _nothing() -> None:
    pass


def row(ref: str = "sha256:" + "a" * 64, name: str | None = "a.png", at: float = 100.0) -> ObjectRow:
    return ObjectRow(ref, "image/png", 10, 2, 3, 1, name, at, at)


async def test_schema_is_versioned_and_wal(tmp_path: Path) -> None:
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    await index.close()
    db = sqlite3.connect(tmp_path / "index.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    reopened = await SqliteIndex.open(tmp_path / "index.sqlite3")  # migrations are idempotent
    await reopened.close()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "index.sqlite3")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(IndexUnusable, match="newer"):
        await SqliteIndex.open(tmp_path / "index.sqlite3")


async def test_publish_renew_and_state(tmp_path: Path) -> None:
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    try:
        await index.publish([row()], _nothing)
        assert await index.get(row().ref) == row()
        renewed = await index.renew([row().ref, "sha256:" + "b" * 64], now=200.0)
        assert list(renewed) == [row().ref]
        got = await index.get(row().ref)
        assert got is not None
        assert (got.created_at, got.lease_at) == (100.0, 200.0)
        # A second publication keeps the first display name and created time, refreshes the lease.
        await index.publish([row(name="b.png", at=300.0)], _nothing)
        got = await index.get(row().ref)
        assert got is not None
        assert (got.name, got.lease_at) == ("a.png", 300.0)

        # A read's finding, settled under the ref's lock, gives the row the state it decides.
        async def quarantined(found: ObjectRow) -> tuple[str, str]:
            return "quarantined", found.state

        assert await index.settle(row().ref, None, quarantined) == "ok"
        assert (await index.get(row().ref)).state == "quarantined"  # type: ignore[union-attr]
    finally:
        await index.close()


async def test_a_failed_check_commits_nothing(tmp_path: Path) -> None:
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")

    async def gone() -> None:
        raise FileNotFoundError

    try:
        with pytest.raises(FileNotFoundError):
            await index.publish([row()], gone)
        assert await index.get(row().ref) is None
    finally:
        await index.close()


async def test_discard_unpublished_spares_published_refs(tmp_path: Path) -> None:
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    removed: list[str] = []
    try:
        await index.publish([row()], _nothing)

        async def remove(ref: str) -> None:
            removed.append(ref)

        await index.discard_unpublished([row().ref, "sha256:" + "c" * 64], remove)
        assert removed == ["sha256:" + "c" * 64]
    finally:
        await index.close()


async def test_a_full_disk_under_sqlite_is_storage_full(tmp_path: Path) -> None:
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    try:
        for code, expected in (
            (sqlite3.SQLITE_FULL, StorageFull),
            (sqlite3.SQLITE_IOERR, StorageUnavailable),
        ):
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = code
            with pytest.raises(expected):
                async with index.write():
                    raise error
        await index.publish([row()], _nothing)  # nothing stuck: the next transaction commits
        assert await index.get(row().ref) is not None
    finally:
        await index.close()


async def test_rows_in_gives_the_rows_that_exist_by_ref(tmp_path: Path) -> None:
    """What a process of the audit's reads: only the rows asked for, however many (in chunks)."""
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    try:
        rows = [ObjectRow(f"sha256:{i:064x}", "image/png", i, 1, 1, 1, None, 0.0, 0.0) for i in range(10_000)]
        await index.publish(rows, _nothing)
    finally:
        await index.close()
    db = sqlite3.connect(tmp_path / "index.sqlite3")
    try:
        wanted = [r.ref for r in rows[::2]] + [f"sha256:{'f' * 64}"]
        found = rows_in(db, wanted)
    finally:
        db.close()
    assert found == {r.ref: r for r in rows[::2]}


def _statvfs(free: int, flag: int = 0) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, 1 << 20, free // 4096, free // 4096, 0, 0, 0, flag, 255))


@pytest.mark.parametrize(
    ("free", "flag", "why"),
    [(1 << 20, 0, r"1\.0 MiB free, less than the index may need"), (1 << 30, os.ST_RDONLY, "read-only")],
)
async def test_an_index_that_cannot_grow_is_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int, flag: int, why: str
) -> None:
    """A full file system fails every write transaction (STORAGE_FULL): /readyz must say so first."""
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    try:
        await index.ready()
        monkeypatch.setattr(sqlite_index.os, "statvfs", lambda path: _statvfs(free, flag))
        with pytest.raises(StorageUnavailable, match=why):
            await index.ready()
        monkeypatch.setattr(sqlite_index.os, "statvfs", lambda path: _statvfs(sqlite_index.READY_ROOM))
        await index.ready()
    finally:
        await index.close()


async def test_concurrent_writes_share_one_commit_and_hear_only_after_it(tmp_path: Path) -> None:
    """Group commit: transactions that wait while one commits go in one BEGIN ... COMMIT, each in a savepoint;
    one that fails is rolled back alone; none of them is answered before the COMMIT."""
    import asyncio

    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    statements: list[str] = []
    await index._w.set_trace_callback(statements.append)
    heard: list[tuple[str, int]] = []
    refs = ["sha256:" + c * 64 for c in "0123456"]

    async def gone() -> None:
        raise FileNotFoundError

    async def publish(ref: str, check: object = _nothing) -> None:
        try:
            await index.publish([row(ref)], check)  # type: ignore[arg-type]
        finally:
            heard.append((ref, sum(s == "COMMIT" for s in statements)))

    try:
        outcomes = await asyncio.gather(
            *(publish(r, gone if r == refs[3] else _nothing) for r in refs), return_exceptions=True
        )
        assert [type(o).__name__ for o in outcomes] == ["NoneType"] * 3 + ["FileNotFoundError"] + [
            "NoneType"
        ] * 3
        commits = statements.count("COMMIT")
        assert commits <= 2  # one each, they would be six: they came together and went together
        assert all(n >= 1 for _, n in heard)  # every answer came after a COMMIT
        assert [r for r in refs if await index.get(r) is not None] == refs[:3] + refs[4:]
        assert "ROLLBACK TO work" in statements
    finally:
        await index.close()


async def test_a_commit_that_fails_fails_every_write_of_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    execute = index._w.execute

    async def failing_commit(sql: str, *args: object) -> object:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return await execute(sql, *args)

    monkeypatch.setattr(index._w, "execute", failing_commit)
    try:
        refs = ["sha256:" + c * 64 for c in "abc"]
        outcomes = await asyncio.gather(
            *(index.publish([row(r)], _nothing) for r in refs), return_exceptions=True
        )
        assert all(isinstance(o, StorageUnavailable) for o in outcomes), outcomes
        monkeypatch.setattr(index._w, "execute", execute)
        assert [await index.get(r) for r in refs] == [None] * 3  # nothing of any of them committed
        await index.publish([row(refs[0])], _nothing)  # and the index goes on
        assert await index.get(refs[0]) is not None
    finally:
        monkeypatch.setattr(index._w, "execute", execute)
        await index.close()


async def test_a_connection_cancelled_while_it_opens_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /v1/stats counts what gc would collect on a connection of its own, opened by the first count; a
    store closing cancels the count, maybe while that connection is being set up: it is closed then, not
    left open to the garbage collector (a ResourceWarning, and a thread that keeps the process alive)."""
    index = await SqliteIndex.open(tmp_path / "index.sqlite3")
    opened: list[aiosqlite.Connection] = []

    async def cancelled(db: aiosqlite.Connection) -> None:  # cancelled while the connection turns WAL on
        opened.append(db)
        raise asyncio.CancelledError

    monkeypatch.setattr(sqlite_index, "_wal", cancelled)
    try:
        with pytest.raises(asyncio.CancelledError):
            await index.background_reads()
        [db] = opened
        with pytest.raises(ValueError, match="no active connection"):  # aiosqlite, once closed
            await db.execute("SELECT 1")
    finally:
        for db in opened:
            await db.close()
        await index.close()
