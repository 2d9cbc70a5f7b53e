"""One contract (attachstore/backend.py), every backend: the same tests against the local store and S3.

S3 needs a real server: the one the ATTACHSTORE_TEST_S3_* variables name, else one `tests.support.services`
starts. Without either the S3 tests fail, unless ATTACHSTORE_TEST_SKIP_SERVICES=1 says to skip them (it also
keeps `tests.support.services` from starting anything).
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from attachstore.backend import BlobStore, LocalBackend
from attachstore.blobstore import LocalBlobStore, Put
from attachstore.errors import Corrupt, Missing
from attachstore.refs import Ref
from attachstore.s3store import S3BlobStore
from tests.faults import flip_byte

DATA = b"conformance object bytes " * 400


# -- an S3 server for the tests ------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    fresh_bucket: Callable[[], str] | None  # the test support's own, when it provides the server

    def store(self, bucket: str, prefix: str = "", **options: Any) -> S3BlobStore:
        return S3BlobStore(
            self.endpoint, bucket, prefix, self.region, self.access_key, self.secret_key, **options
        )

    def client(self) -> AbstractAsyncContextManager[Any]:
        """A plain client for what the tests do behind a store's back."""
        return get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=AioConfig(
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                s3={"addressing_style": "path"},
            ),
        )


@functools.cache
def s3_server() -> S3Server | None:
    """The server named by ATTACHSTORE_TEST_S3_* (what `python -m tests.support.services env` prints), else
    one that `tests.support.services` starts, else None."""
    endpoint = os.environ.get("ATTACHSTORE_TEST_S3_ENDPOINT")
    if endpoint:
        return S3Server(
            endpoint,
            os.environ.get("ATTACHSTORE_TEST_S3_ACCESS_KEY", ""),
            os.environ.get("ATTACHSTORE_TEST_S3_SECRET_KEY", ""),
            os.environ.get("ATTACHSTORE_TEST_S3_REGION", "us-east-1"),
            None,
        )
    if os.environ.get("ATTACHSTORE_TEST_SKIP_SERVICES") == "1":
        return None
    try:
        from tests.support import services
    except ModuleNotFoundError as e:
        if e.name not in ("tests.support", "tests.support.services"):
            raise
        return None
    up = services.up(only="s3")
    return S3Server(
        str(up.s3_endpoint),
        str(up.s3_access_key),
        str(up.s3_secret_key),
        str(up.s3_region),
        lambda: str(services.fresh_bucket(up)),
    )


def require_s3() -> S3Server:
    server = s3_server()
    if server is not None:
        return server
    if os.environ.get("ATTACHSTORE_TEST_SKIP_SERVICES") == "1":
        pytest.skip("no S3 server (ATTACHSTORE_TEST_SKIP_SERVICES=1)")
    pytest.fail(
        "the S3 tests need a server: tests.support.services, or ATTACHSTORE_TEST_S3_ENDPOINT (with "
        "_ACCESS_KEY, _SECRET_KEY, _REGION); set ATTACHSTORE_TEST_SKIP_SERVICES=1 to skip them"
    )


@asynccontextmanager
async def bucket_on(server: S3Server) -> AsyncIterator[str]:
    """A new, empty bucket; one this helper created is emptied and removed afterwards."""
    if server.fresh_bucket is not None:
        yield await asyncio.to_thread(server.fresh_bucket)
        return
    name = f"attachstore-test-{secrets.token_hex(6)}"
    async with server.client() as c:
        await c.create_bucket(Bucket=name)
        try:
            yield name
        finally:
            async for page in c.get_paginator("list_objects_v2").paginate(Bucket=name):
                for item in page.get("Contents", ()):
                    await c.delete_object(Bucket=name, Key=item["Key"])
            await c.delete_bucket(Bucket=name)


# -- the backends under test, each with raw access to damage and remove what it stores -----------------


@dataclass
class Backend:
    store: BlobStore
    damage: Callable[[Ref], Awaitable[None]]  # flip one bit of the stored object
    remove: Callable[[Ref], Awaitable[None]]  # take it away behind the store's back
    quarantined: Callable[[], Awaitable[list[bytes]]]  # the bytes kept in quarantine


@asynccontextmanager
async def local_backend(root: Path) -> AsyncIterator[Backend]:
    blobs = LocalBlobStore(root)

    async def damage(ref: Ref) -> None:
        await asyncio.to_thread(flip_byte, blobs.path(ref))

    async def remove(ref: Ref) -> None:
        await asyncio.to_thread(blobs.path(ref).unlink)

    async def quarantined() -> list[bytes]:
        return [p.read_bytes() for p in sorted(blobs.quarantine_dir.iterdir())]

    store = LocalBackend(blobs)
    await store.start()
    try:
        yield Backend(store, damage, remove, quarantined)
    finally:
        await store.close()


@asynccontextmanager
async def s3_backend(server: S3Server, prefix: str = "conformance/") -> AsyncIterator[Backend]:
    async with bucket_on(server) as bucket, server.client() as raw:
        store = server.store(bucket, prefix)

        async def damage(ref: Ref) -> None:
            answer = await raw.get_object(Bucket=bucket, Key=store.key(ref))
            async with answer["Body"] as body:
                data = bytearray(await body.read())
            data[-1] ^= 0x01
            await raw.put_object(Bucket=bucket, Key=store.key(ref), Body=bytes(data))

        async def remove(ref: Ref) -> None:
            await raw.delete_object(Bucket=bucket, Key=store.key(ref))

        async def quarantined() -> list[bytes]:
            found = []
            listing = await raw.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}quarantine/")
            for item in listing.get("Contents", ()):
                answer = await raw.get_object(Bucket=bucket, Key=item["Key"])
                async with answer["Body"] as body:
                    found.append(await body.read())
            return found

        await store.start()
        try:
            yield Backend(store, damage, remove, quarantined)
        finally:
            await store.close()


@pytest.fixture(params=["local", "s3"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "local":
        async with local_backend(tmp_path / "data") as b:
            yield b
    else:
        async with s3_backend(require_s3()) as b:
            yield b


def ref_of(data: bytes, algorithm: str = "sha256") -> Ref:
    return Ref.of(algorithm, data)


# -- the contract ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
async def test_put_then_read_gives_the_bytes_back(backend: Backend, algorithm: str) -> None:
    ref = ref_of(DATA, algorithm)
    assert await backend.store.put(ref, DATA) is Put.CREATED
    assert await backend.store.read(ref, len(DATA)) == DATA


async def test_a_second_put_of_the_same_bytes_finds_them(backend: Backend) -> None:
    ref = ref_of(DATA)
    await backend.store.put(ref, DATA)
    assert await backend.store.put(ref, DATA) is Put.EXISTED
    assert await backend.quarantined() == []


async def test_concurrent_puts_of_one_ref_all_succeed_and_one_creates(backend: Backend) -> None:
    ref = ref_of(DATA)
    outcomes = await asyncio.gather(*(backend.store.put(ref, DATA) for _ in range(8)))
    assert sorted(o.value for o in outcomes) == ["created"] + ["existed"] * 7
    assert await backend.store.read(ref, len(DATA)) == DATA


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
async def test_put_heals_a_damaged_object_and_keeps_the_damaged_copy(
    backend: Backend, algorithm: str
) -> None:
    ref = ref_of(DATA, algorithm)
    await backend.store.put(ref, DATA)
    await backend.damage(ref)
    assert await backend.store.put(ref, DATA) is Put.HEALED
    assert await backend.store.read(ref, len(DATA)) == DATA
    [kept] = await backend.quarantined()
    assert kept != DATA
    assert len(kept) == len(DATA)


async def test_put_writes_a_missing_object_again(backend: Backend) -> None:
    ref = ref_of(DATA)
    await backend.store.put(ref, DATA)
    await backend.remove(ref)
    assert await backend.store.put(ref, DATA) is Put.CREATED
    assert await backend.store.read(ref, len(DATA)) == DATA


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
async def test_a_damaged_object_is_never_served(backend: Backend, algorithm: str) -> None:
    ref = ref_of(DATA, algorithm)
    await backend.store.put(ref, DATA)
    await backend.damage(ref)
    with pytest.raises(Corrupt):
        await backend.store.read(ref, len(DATA))


async def test_a_size_other_than_the_recorded_one_is_corrupt(backend: Backend) -> None:
    ref = ref_of(DATA)
    await backend.store.put(ref, DATA)
    for size in (len(DATA) - 1, len(DATA) + 1):
        with pytest.raises(Corrupt):
            await backend.store.read(ref, size)


async def test_reading_what_is_not_there_is_missing(backend: Backend) -> None:
    ref = ref_of(DATA)
    with pytest.raises(Missing):
        await backend.store.read(ref, len(DATA))
    await backend.store.put(ref, DATA)
    await backend.remove(ref)
    with pytest.raises(Missing):
        await backend.store.read(ref, len(DATA))


async def test_quarantine_leaves_an_intact_object_in_place(backend: Backend) -> None:
    ref = ref_of(DATA)
    await backend.store.put(ref, DATA)
    assert await backend.store.quarantine(ref) == "intact"
    assert await backend.store.read(ref, len(DATA)) == DATA
    assert await backend.quarantined() == []


async def test_quarantine_moves_a_damaged_object_aside(backend: Backend) -> None:
    ref = ref_of(DATA)
    await backend.store.put(ref, DATA)
    await backend.damage(ref)
    assert await backend.store.quarantine(ref) == "quarantined"
    with pytest.raises(Missing):
        await backend.store.read(ref, len(DATA))
    assert await backend.store.stat(ref) is None
    assert await backend.store.quarantine(ref) == "missing"
    [kept] = await backend.quarantined()
    assert kept != DATA
    # A later admission of the same bytes writes the object again.
    assert await backend.store.put(ref, DATA) is Put.CREATED
    assert await backend.store.read(ref, len(DATA)) == DATA


async def test_discard_removes_the_object_and_is_idempotent(backend: Backend) -> None:
    ref = ref_of(DATA)
    await backend.store.put(ref, DATA)
    await backend.store.discard(ref)
    await backend.store.discard(ref)
    assert await backend.store.stat(ref) is None
    with pytest.raises(Missing):
        await backend.store.read(ref, len(DATA))


async def test_stat_describes_the_object(backend: Backend) -> None:
    ref = ref_of(DATA)
    assert await backend.store.stat(ref) is None
    before = time.time()
    await backend.store.put(ref, DATA)
    found = await backend.store.stat(ref)
    assert found is not None
    assert (found.ref, found.size) == (ref, len(DATA))
    assert ref.digest in found.key
    assert before - 5 <= found.mtime <= time.time() + 5  # clocks of a server may drift a little


async def test_walk_lists_exactly_the_objects(backend: Backend) -> None:
    assert [o async for o in backend.store.walk()] == []
    blobs = {ref_of(d, a): d for a in ("sha256", "blake3") for d in (DATA, b"second", b"third" * 999)}
    for ref, data in blobs.items():
        await backend.store.put(ref, data)
    damaged = ref_of(b"second", "blake3")
    await backend.damage(damaged)
    await backend.store.quarantine(damaged)  # quarantine is not under the objects
    await backend.store.probe_writable()  # nor is the probe
    listed = [o async for o in backend.store.walk()]
    assert sorted((str(o.ref), o.size) for o in listed) == sorted(
        (str(r), len(d)) for r, d in blobs.items() if r != damaged
    )
    assert len({o.key for o in listed}) == len(listed)


async def test_the_store_is_writable(backend: Backend) -> None:
    await backend.store.probe_writable()
