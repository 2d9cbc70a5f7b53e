"""The write path through the real app: SPEC order, and a fault at every step publishes nothing."""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from attachstore.index import ObjectRow, SqliteIndex
from attachstore.refs import Ref
from tests.conftest import MakeClient
from tests.support.faults import RecordingOps
from tests.support.http import admit, error_of, object_path
from tests.support.images import png

IMAGE = png(32, 24)
REF = str(Ref.of("sha256", IMAGE))


@pytest.fixture
def ops() -> RecordingOps:
    return RecordingOps()


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch, ops: RecordingOps) -> list[str]:
    """Record the index commit in the same log as the file-system calls."""
    real = SqliteIndex.publish

    async def publish(self: SqliteIndex, rows: Sequence[ObjectRow], check: Any, *rest: Any) -> None:
        await real(self, rows, check, *rest)
        ops.log.append("commit")

    monkeypatch.setattr(SqliteIndex, "publish", publish)
    return ops.log


def published_nothing(data_dir: Path) -> bool:
    db = sqlite3.connect(data_dir / "index.sqlite3")
    try:
        rows = db.execute("SELECT count(*) FROM objects").fetchone()[0]
    finally:
        db.close()
    return rows == 0 and not object_path(data_dir, REF).exists() and os.listdir(data_dir / "tmp") == []


async def test_the_write_order_is_the_spec_order(
    make_client: MakeClient, ops: RecordingOps, commits: list[str]
) -> None:
    client = await make_client(file_ops=ops)
    ops.log.clear()  # start-up made the layout durable
    response = await admit(client, IMAGE)
    assert response.status == 201
    assert ops.log == [
        "open",  # staging file, O_EXCL, 0600
        "write",
        "fsync",  # the bytes are durable
        "fchmod",  # read-only
        "close",
        "mkdir",  # objects/sha256, its two bucket levels
        "mkdir",
        "mkdir",
        "link",  # into place, never over another file
        "fsync_dir",  # the bucket directory ...
        "fsync_dir",  # ... and the parent of every directory created on the way
        "fsync_dir",
        "fsync_dir",
        "unlink",  # the staging name
        "commit",  # only now the index row, then the answer
    ]


@pytest.mark.parametrize("step", ["open", "write", "fsync", "fchmod", "mkdir", "link", "fsync_dir"])
async def test_an_io_error_at_any_step_publishes_nothing(
    make_client: MakeClient, ops: RecordingOps, data_dir: Path, step: str
) -> None:
    client = await make_client(file_ops=ops)
    ops.fail_at = step
    response = await admit(client, IMAGE)
    assert (response.status, (await error_of(response))["code"]) == (503, "STORAGE_UNAVAILABLE")
    assert published_nothing(data_dir)
    assert (await client.get(f"/v1/attachments/{REF}")).status == 404
    # The store keeps working once the fault is gone.
    assert (await admit(client, IMAGE)).status == 201


async def test_a_full_disk_is_507(make_client: MakeClient, ops: RecordingOps, data_dir: Path) -> None:
    client = await make_client(file_ops=ops)
    ops.fail_at, ops.fail_errno = "write", errno.ENOSPC
    response = await admit(client, IMAGE)
    assert (response.status, (await error_of(response))["code"]) == (507, "STORAGE_FULL")
    assert published_nothing(data_dir)


async def test_a_failed_index_commit_publishes_nothing(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, data_dir: Path
) -> None:
    client = await make_client()

    async def broken(self: SqliteIndex, rows: Sequence[ObjectRow], check: Any, *rest: Any) -> None:
        async with self.write() as db:
            await db.execute("SELECT 1")
            raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SqliteIndex, "publish", broken)
    response = await admit(client, IMAGE)
    assert (response.status, (await error_of(response))["code"]) == (503, "STORAGE_UNAVAILABLE")
    assert published_nothing(data_dir)


async def test_a_file_removed_before_the_commit_is_rewritten(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, data_dir: Path
) -> None:
    # Stands in for a concurrent remover (another process's failed batch, later the GC) that took the file
    # between the write and the commit: the commit's check under the write lock sees it and the admission
    # writes the bytes again instead of publishing a ref without bytes.
    client = await make_client()
    real = SqliteIndex.publish
    removed: list[bool] = []

    async def publish(self: SqliteIndex, rows: Sequence[ObjectRow], check: Any, *rest: Any) -> None:
        if not removed:
            object_path(data_dir, REF).unlink()
            removed.append(True)
        await real(self, rows, check, *rest)

    monkeypatch.setattr(SqliteIndex, "publish", publish)
    assert (await admit(client, IMAGE)).status == 201
    assert removed == [True]
    assert await (await client.get(f"/v1/attachments/{REF}")).read() == IMAGE


async def test_a_failed_batch_removes_only_what_it_wrote(
    make_client: MakeClient, ops: RecordingOps, data_dir: Path
) -> None:
    client = await make_client(file_ops=ops)
    earlier = png(5, 5)
    assert (await admit(client, earlier)).status == 201
    ops.fail_at = "fsync_dir"
    response = await admit(client, earlier, IMAGE)
    assert response.status == 503
    assert not object_path(data_dir, REF).exists()
    assert await (await client.get(f"/v1/attachments/{Ref.of('sha256', earlier)}")).read() == earlier
