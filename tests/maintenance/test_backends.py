"""gc and the audit on S3 + PostgreSQL: the same findings, repairs and collections as on the local backends
(tests/maintenance/test_audit.py and tests/maintenance/test_gc.py hold the local ones)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from attachstore.config import Config
from attachstore.maintenance import Audit, Kind, gc
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from attachstore.storage.s3 import S3BlobStore
from tests.support import fixtures, images


def s3_storage(server: fixtures.S3Server, bucket: str) -> dict[str, Any]:
    """The [storage] section for `bucket` on the test server."""
    return {
        "backend": "s3",
        "endpoint": server.endpoint,
        "bucket": bucket,
        "region": server.region,
        "access_key_id": server.access_key,
        "secret_access_key": server.secret_key,
    }


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    server = fixtures.require_s3()
    async with fixtures.bucket_on(server) as bucket:
        with fixtures.database() as dsn:
            raw: dict[str, Any] = {
                "data_dir": str(tmp_path / "data"),
                "admission": {"decode_workers": 1},
                "storage": s3_storage(server, bucket),
                "index": {"backend": "postgresql", "dsn": dsn},
            }
            s = await Store.open(msgspec.convert(raw, Config))
            try:
                yield s
            finally:
                await s.close()


def bucket_store(store: Store) -> S3BlobStore:
    assert isinstance(store.blobs, S3BlobStore)
    return store.blobs


async def admit(store: Store, *data: bytes) -> list[str]:
    answer = await store.admit([Upload.of_bytes(d) for d in data], "user")
    return [a.ref for a in answer.attachments]


async def put_raw(store: Store, key: str, body: bytes) -> None:
    s3 = bucket_store(store)
    async with fixtures.require_s3().client() as raw:
        await raw.put_object(Bucket=s3.bucket, Key=key, Body=body)


async def test_a_clean_store_audits_clean(store: Store) -> None:
    refs = await admit(store, images.png(40, 30), images.jpeg(50, 20))
    report = await Audit(store).run()
    assert report.clean, report.findings
    assert (report.files, report.rows) == (2, 2)
    rows = await store.index.get_many(refs)
    assert report.bytes == sum(row.bytes for row in rows.values())


async def test_damage_in_the_bucket_is_found_and_quarantined(store: Store) -> None:
    [ref] = await admit(store, images.png(40, 30, seed=1))
    s3 = bucket_store(store)
    original = await s3.fetch(s3.key(Ref.parse(ref)))
    assert original is not None
    await put_raw(store, s3.key(Ref.parse(ref)), images.flip(original, 60))

    found = await Audit(store).run()
    assert [(f.kind, f.ref) for f in found.findings] == [(Kind.CORRUPT, ref)]
    repaired = await Audit(store, repair=True).run()
    assert repaired.findings[0].repair == "quarantined"
    assert await s3.stat(Ref.parse(ref)) is None
    row = await store.index.get(ref)
    assert row is not None
    assert row.state == "quarantined"
    # Admitting the same bytes heals it; the audit is clean again.
    assert await admit(store, original) == [ref]
    assert (await Audit(store).run()).clean


async def test_a_missing_object_is_found_and_marked(store: Store) -> None:
    [ref] = await admit(store, images.png(40, 30, seed=2))
    await bucket_store(store).discard(Ref.parse(ref))
    report = await Audit(store, repair=True).run()
    assert [(f.kind, f.ref, f.repair) for f in report.findings] == [(Kind.MISSING, ref, "marked missing")]
    row = await store.index.get(ref)
    assert row is not None
    assert row.state == "missing"


async def test_strays_in_the_bucket_are_reindexed_or_set_aside(store: Store) -> None:
    s3 = bucket_store(store)
    orphan = images.png(30, 30, seed=3)
    ref = Ref.of("sha256", orphan)
    await put_raw(store, s3.key(ref), orphan)  # bytes no row publishes
    junk = f"{s3.prefix}objects/sha256/notes.txt"
    await put_raw(store, junk, b"not an object")

    report = await Audit(store, repair=True, settle=0).run()
    kinds = sorted((f.kind, f.ref or "", f.repair or "") for f in report.findings)
    assert kinds[0][:2] == (Kind.STRAY_FILE, "")
    assert kinds[0][2].startswith(f"moved to {s3.prefix}quarantine/stray-notes.txt.")
    assert kinds[1] == (Kind.STRAY_FILE, str(ref), "re-indexed")
    assert await store.index.get(str(ref)) is not None
    assert await s3.fetch(junk) is None
    assert (await Audit(store, settle=0).run()).clean


async def test_gc_collects_unheld_objects_and_unindexed_keys_in_the_bucket(store: Store) -> None:
    s3 = bucket_store(store)
    [kept, dropped] = await admit(store, images.png(20, 20, seed=4), images.png(20, 20, seed=5))
    await store.sessions.create(("", "s"), None)
    await store.sessions.hold(("", "s"), [kept])
    loose = images.png(20, 20, seed=6)
    await put_raw(store, s3.key(Ref.of("sha256", loose)), loose)

    # An hour from now, with no grace: the unheld object and the unindexed key (past its minute) go.
    plan = await gc.plan(store, grace=0, now=time.time() + 3600)
    assert [r.ref for r in plan.garbage] == [dropped]
    assert [str(u.ref) for u in plan.unindexed] == [str(Ref.of("sha256", loose))]
    assert plan.staging == []  # S3 has no staging area
    result = await gc.execute(store, plan)
    assert result.collected == [dropped]
    assert result.unindexed_removed == 1
    assert await s3.stat(Ref.parse(dropped)) is None
    assert await store.index.get(dropped) is None
    _, data = await store.read(kept)
    assert Ref.parse(kept).matches(data)


@pytest.mark.parametrize(("storage", "index"), [("local", "postgresql"), ("s3", "sqlite")])
async def test_gc_and_the_audit_work_on_the_mixed_combinations(
    tmp_path: Path, storage: str, index: str
) -> None:
    server = fixtures.require_s3() if storage == "s3" else None
    async with contextlib.AsyncExitStack() as stack:
        raw: dict[str, Any] = {"data_dir": str(tmp_path / "data"), "admission": {"decode_workers": 1}}
        if server is not None:
            bucket = await stack.enter_async_context(fixtures.bucket_on(server))
            raw["storage"] = s3_storage(server, bucket)
        if index == "postgresql":
            raw["index"] = {"backend": "postgresql", "dsn": stack.enter_context(fixtures.database())}
        store = await Store.open(msgspec.convert(raw, Config))
        stack.push_async_callback(store.close)
        [kept, dropped] = await admit(store, images.png(20, 20, seed=7), images.png(20, 20, seed=8))
        await store.sessions.create(("", "s"), None)
        await store.sessions.hold(("", "s"), [kept])
        assert (await Audit(store).run()).clean
        result = await gc.execute(store, await gc.plan(store, grace=0, now=time.time() + 3600))
        assert result.collected == [dropped]
        report = await Audit(store).run()
        assert report.clean
        assert (report.files, report.rows) == (1, 1)


async def test_commands_open_the_store_without_the_read_cache(tmp_path: Path) -> None:
    """A read cache directory belongs to one daemon process; gc, audit, get and put open none."""
    server = fixtures.require_s3()
    async with fixtures.bucket_on(server) as bucket:
        storage = s3_storage(server, bucket) | {"cache_dir": str(tmp_path / "cache")}
        config = msgspec.convert({"data_dir": str(tmp_path / "data"), "storage": storage}, Config)
        for read_cache, cached in ((True, True), (False, False)):
            store = await Store.open(config, workers=1, read_cache=read_cache)
            try:
                assert (bucket_store(store).cache is not None) is cached
            finally:
                await store.close()
