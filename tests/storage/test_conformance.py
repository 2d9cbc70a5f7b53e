"""One contract (attachstore/storage/backend.py), every backend: the same tests against the local store and
S3.

S3 needs a real server, found by tests/support/fixtures.py: the one the ATTACHSTORE_TEST_S3_* variables name,
else one `tests.support.services` starts. Without either the S3 tests fail, unless
ATTACHSTORE_TEST_SKIP_SERVICES=1 says to skip them (it also keeps `tests.support.services` from starting
anything).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from attachstore.errors import Corrupt, Missing
from attachstore.refs import Ref
from attachstore.storage import LocalBlobStore, Put
from attachstore.storage.backend import BlobStore, LocalBackend
from tests.support.faults import flip_byte
from tests.support.fixtures import S3Server, bucket_on, require_s3

DATA = b"conformance object bytes " * 400


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


async def test_stat_many_is_stat_of_each_in_order(backend: Backend) -> None:
    there, gone = ref_of(DATA), ref_of(DATA + b"!")
    await backend.store.put(there, DATA)
    found = await backend.store.stat_many([gone, there, gone])
    assert [f if f is None else (f.ref, f.size) for f in found] == [None, (there, len(DATA)), None]
    assert await backend.store.stat_many([]) == []


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
