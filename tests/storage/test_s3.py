"""What only the S3 backend has: its keys, conditional writes between stores, its errors, its read cache.

The contract it shares with the local store is in test_conformance.py; the way to a server is in
tests/support/fixtures.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from attachstore.errors import Corrupt, Missing, StorageFull, StorageUnavailable
from attachstore.refs import Ref
from attachstore.storage import LocalBlobStore, Put, ReadCache
from attachstore.storage.s3 import S3BlobStore
from tests.support.faults import flip_byte
from tests.support.fixtures import S3Server, bucket_on, require_s3

DATA = b"s3 object bytes " * 500
REF = Ref.of("sha256", DATA)


@pytest.fixture
def server() -> S3Server:
    return require_s3()


@pytest.fixture
async def bucket(server: S3Server) -> AsyncIterator[str]:
    async with bucket_on(server) as name:
        yield name


@pytest.fixture
async def raw(server: S3Server) -> AsyncIterator[Any]:
    async with server.client() as client:
        yield client


@asynccontextmanager
async def opened(store: S3BlobStore) -> AsyncIterator[S3BlobStore]:
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def keys(raw: Any, bucket: str, prefix: str = "") -> list[str]:
    listing = await raw.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", ()))


async def get(raw: Any, bucket: str, key: str) -> bytes:
    answer = await raw.get_object(Bucket=bucket, Key=key)
    async with answer["Body"] as body:
        data: bytes = await body.read()
    return data


# -- keys ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "normalised"), [("/tenants/a/", "tenants/a/"), ("", "")])
async def test_keys_mirror_the_local_layout_under_the_prefix(
    server: S3Server, bucket: str, raw: Any, prefix: str, normalised: str
) -> None:
    local = LocalBlobStore(Path("/data"))
    refs = [Ref.of("sha256", DATA), Ref.of("blake3", DATA)]
    async with opened(server.store(bucket, prefix)) as store:
        for ref in refs:
            await store.put(ref, DATA)
    expected = [normalised + local.path(ref).relative_to("/data").as_posix() for ref in refs]
    assert await keys(raw, bucket) == sorted(expected)
    assert expected[0] == f"{normalised}objects/sha256/{REF.digest[:2]}/{REF.digest[2:4]}/{REF.digest}"


async def test_walk_gives_no_ref_to_a_key_out_of_place(server: S3Server, bucket: str, raw: Any) -> None:
    d = REF.digest
    strays = [
        f"p/objects/sha256/{d[:2]}/{d[2:4]}/not-a-digest",
        f"p/objects/sha256/00/00/{d}",  # in the wrong bucket
        f"p/objects/md5/{d[:2]}/{d[2:4]}/{d}",
        f"p/objects/sha256/{d[:2]}/{d}",
    ]
    for key in [*strays, "p/elsewhere/x", "other/objects/sha256/x"]:
        await raw.put_object(Bucket=bucket, Key=key, Body=b"x")
    async with opened(server.store(bucket, "p")) as store:
        await store.put(REF, DATA)
        listed = {o.key: o.ref async for o in store.walk()}
    assert listed == {store.key(REF): REF} | dict.fromkeys(strays)


# -- conditional writes ----------------------------------------------------------------------------------


async def test_racing_stores_create_each_object_once(server: S3Server, bucket: str) -> None:
    blobs = [bytes([i]) * 300_000 for i in range(4)]
    async with opened(server.store(bucket, "p")) as a, opened(server.store(bucket, "p")) as b:
        for data in blobs:
            ref = Ref.of("sha256", data)
            outcomes = await asyncio.gather(*(s.put(ref, data) for s in (a, b) * 4))
            assert sorted(o.value for o in outcomes) == ["created"] + ["existed"] * 7
            assert await b.read(ref, len(data)) == data


async def test_a_heal_overwrites_the_damaged_object(server: S3Server, bucket: str, raw: Any) -> None:
    async with opened(server.store(bucket, "p")) as a, opened(server.store(bucket, "p")) as b:
        await a.put(REF, DATA)
        await raw.put_object(Bucket=bucket, Key=a.key(REF), Body=b"garbage")  # even the size is wrong
        assert await b.put(REF, DATA) is Put.HEALED
    assert await get(raw, bucket, a.key(REF)) == DATA
    [kept] = await keys(raw, bucket, "p/quarantine/")
    assert await get(raw, bucket, kept) == b"garbage"


async def test_quarantine_keeps_each_damaged_copy_under_its_own_key(
    server: S3Server, bucket: str, raw: Any
) -> None:
    async with opened(server.store(bucket, "p")) as store:
        for damage in (b"first", b"second"):
            await store.put(REF, DATA)
            await raw.put_object(Bucket=bucket, Key=store.key(REF), Body=damage)
            assert await store.quarantine(REF) == "quarantined"
    assert await keys(raw, bucket, "p/objects/") == []
    kept = await keys(raw, bucket, "p/quarantine/")
    assert len(kept) == 2
    assert all(re.fullmatch(rf"p/quarantine/sha256-{REF.digest}\.\d{{19}}", key) for key in kept)
    assert sorted([await get(raw, bucket, key) for key in kept]) == [b"first", b"second"]


async def test_quarantine_looks_again_when_a_heal_lands_before_its_delete(
    server: S3Server, bucket: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(server.store(bucket, "p")) as store:
        await store.put(REF, DATA)
        await raw.put_object(Bucket=bucket, Key=store.key(REF), Body=b"damaged")
        keep = store._keep

        async def keep_then_heal(ref: Ref, damaged: bytes) -> None:
            await keep(ref, damaged)
            await raw.put_object(Bucket=bucket, Key=store.key(ref), Body=DATA)  # another node heals

        monkeypatch.setattr(store, "_keep", keep_then_heal)
        assert await store.quarantine(REF) == "intact"
        assert await store.read(REF, len(DATA)) == DATA


# -- errors ----------------------------------------------------------------------------------------------


async def test_a_missing_bucket_is_unavailable_storage_naming_it(
    server: S3Server, bucket: str, raw: Any
) -> None:
    store = server.store("no-such-bucket-here", "p")
    with pytest.raises(StorageUnavailable, match=r"no-such-bucket-here.*does not exist"):
        await store.start()
    async with opened(server.store(bucket, "p")) as store:
        await store.put(REF, DATA)
        await raw.delete_object(Bucket=bucket, Key=store.key(REF))
        await raw.delete_bucket(Bucket=bucket)  # gone while the store runs
        for call in (lambda: store.put(REF, DATA), lambda: store.read(REF, len(DATA)), store.probe_writable):
            with pytest.raises(StorageUnavailable, match=rf"{bucket}.*does not exist"):
                await call()
        await raw.create_bucket(Bucket=bucket)  # for the fixture's clean-up


async def test_refused_credentials_are_unavailable_storage(server: S3Server, bucket: str) -> None:
    store = S3BlobStore(server.endpoint, bucket, "p", server.region, "NOSUCHKEY", "wrong", max_attempts=1)
    with pytest.raises(StorageUnavailable, match="refused"):
        await store.start()


async def hung_up_on(max_attempts: int) -> int:
    """How many connections `start` makes to an endpoint that hangs up on each, before it gives up."""
    tries = 0

    def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal tries
        tries += 1
        writer.transport.abort()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    endpoint = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    store = S3BlobStore(endpoint, "b", "p", "us-east-1", "k", "s", max_attempts=max_attempts)
    try:
        with pytest.raises(StorageUnavailable, match="cannot reach"):
            await store.start()
        with pytest.raises(StorageUnavailable, match="not open"):
            await store.read(REF, len(DATA))
    finally:
        server.close()
        await server.wait_closed()
    return tries


async def test_an_unreachable_endpoint_is_unavailable_storage_after_its_attempts() -> None:
    # aiohttp itself connects again once when a fresh connection closes unanswered: hence a ratio
    once = await hung_up_on(1)
    assert once >= 1
    assert await hung_up_on(3) == 3 * once


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
def gateway(aiohttp_server: Any) -> Callable[[Handler], Awaitable[S3BlobStore]]:
    """A store on a fake gateway whose bucket "b" answers and whose object requests go to `handler`."""

    async def make(handler: Handler) -> S3BlobStore:
        async def route(request: web.Request) -> web.StreamResponse:
            if request.method == "HEAD" and request.path == "/b":
                return web.Response()
            return await handler(request)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", route)
        server = await aiohttp_server(app)
        return S3BlobStore(str(server.make_url("")), "b", "p", "us-east-1", "k", "s", max_attempts=2)

    return make


def s3_error(status: int, code: str) -> web.Response:
    body = f"<Error><Code>{code}</Code><Message>no</Message></Error>"
    return web.Response(status=status, text=body, content_type="application/xml")


@pytest.mark.parametrize("code", ["ServiceUnavailable", "SlowDown"])
async def test_server_errors_and_throttling_are_unavailable_storage(
    gateway: Callable[[Handler], Awaitable[S3BlobStore]], code: str
) -> None:
    methods: list[str] = []

    async def busy(request: web.Request) -> web.Response:
        methods.append(request.method)
        return s3_error(503, code)

    async with opened(await gateway(busy)) as store:
        requests = (
            lambda: store.put(REF, DATA),
            lambda: store.read(REF, len(DATA)),
            lambda: store.stat(REF),  # a HEAD: no body, so no code but the status
            lambda: store.discard(REF),
            store.probe_writable,
        )
        for call in requests:
            with pytest.raises(StorageUnavailable, match=r"answered .*\(HTTP 503\) while"):
                await call()
    assert methods.count("GET") == 2  # botocore's retries ran first


async def test_a_full_quota_is_storage_full(gateway: Callable[[Handler], Awaitable[S3BlobStore]]) -> None:
    async def full(request: web.Request) -> web.Response:
        if request.method == "HEAD":
            return web.Response(status=404)
        return s3_error(403, "QuotaExceeded")

    async with opened(await gateway(full)) as store:
        with pytest.raises(StorageFull, match="quota"):
            await store.put(REF, DATA)
        with pytest.raises(StorageUnavailable, match="quota"):  # not ready
            await store.probe_writable()


@pytest.mark.parametrize(("etag", "accepted"), [(hashlib.md5(DATA).hexdigest(), True), ("0" * 32, False)])
async def test_a_put_is_a_conditional_create_checked_both_ways(
    gateway: Callable[[Handler], Awaitable[S3BlobStore]], etag: str, accepted: bool
) -> None:
    puts: list[dict[str, str]] = []

    async def accept(request: web.Request) -> web.Response:
        if request.method == "HEAD":
            return web.Response(status=404)
        puts.append(dict(request.headers))
        return web.Response(headers={"ETag": f'"{etag}"'})

    async with opened(await gateway(accept)) as store:
        if accepted:
            assert await store.put(REF, DATA) is Put.CREATED
        else:
            with pytest.raises(StorageUnavailable, match="ETag other than its MD5"):
                await store.put(REF, DATA)
    [headers] = puts
    assert headers["If-None-Match"] == "*"
    assert headers["Content-MD5"] == base64.b64encode(hashlib.md5(DATA).digest()).decode()


async def test_the_readiness_probe_writes_as_an_admission_does(
    gateway: Callable[[Handler], Awaitable[S3BlobStore]],
) -> None:
    """A conditional create with Content-MD5, as an object's first write, then a DELETE: a gateway that
    takes a plain PUT but refuses what admissions send is not ready."""
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    conditional = True

    async def gateway_(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.method, request.path, dict(request.headers), body))
        if request.method == "PUT" and "If-None-Match" in request.headers and not conditional:
            return s3_error(501, "NotImplemented")
        if request.method == "DELETE":
            return web.Response(status=204)
        return web.Response(headers={"ETag": f'"{hashlib.md5(body).hexdigest()}"'})

    async with opened(await gateway(gateway_)) as store:
        await store.probe_writable(1 << 40, 16)  # S3 has no free space to ask about
        [(put, key, headers, block), (delete, deleted, _, _)] = seen
        assert (put, delete, deleted) == ("PUT", "DELETE", key)
        assert key.startswith("/b/p/probe/")
        assert len(block) == 4096
        assert headers["If-None-Match"] == "*"
        assert headers["Content-MD5"] == base64.b64encode(hashlib.md5(block).digest()).decode()
        conditional = False
        with pytest.raises(StorageUnavailable, match="NotImplemented"):
            await store.probe_writable()
        assert seen[2][1] != key  # a new key each time


async def test_a_body_cut_short_is_unavailable_storage_not_corrupt(
    gateway: Callable[[Handler], Awaitable[S3BlobStore]],
) -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"ETag": '"x"', "Last-Modified": "Mon, 30 Nov 2026 10:00:00 GMT"}
        )
        response.content_length = len(DATA)
        await response.prepare(request)
        await response.write(DATA[:100])
        assert request.transport is not None
        request.transport.close()
        return response

    async with opened(await gateway(cut)) as store:
        with pytest.raises(StorageUnavailable, match="while reading an object"):
            await store.read(REF, len(DATA))


# -- the read cache on its own ---------------------------------------------------------------------------


def cache_files(cache: ReadCache) -> list[str]:
    return sorted(os.listdir(cache.directory))


def on_disk(cache: ReadCache) -> int:
    return sum(os.path.getsize(cache.directory / name) for name in cache_files(cache))


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path / "cache", max_bytes=3000)
    cache.open()
    blobs = [bytes([i]) * 1000 for i in range(4)]
    refs = [Ref.of("sha256", b) for b in blobs]
    for ref, data in zip(refs[:3], blobs[:3], strict=True):
        cache.add(ref, data)
    assert cache.get(refs[0], 1000) == blobs[0]  # now the most recently used
    cache.add(refs[3], blobs[3])  # evicts refs[1]
    assert cache.used == 3000
    assert cache.get(refs[1], 1000) is None
    assert [cache.get(r, 1000) for r in (refs[0], refs[2], refs[3])] == [blobs[0], blobs[2], blobs[3]]
    assert len(cache_files(cache)) == 3
    cache.add(Ref.of("sha256", b"x" * 3001), b"x" * 3001)  # larger than the whole cache: not kept
    assert (cache.used, len(cache_files(cache))) == (3000, 3)
    assert (cache.hits, cache.misses, cache.drops) == (4, 1, 0)


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend"])
def test_a_damaged_cache_entry_is_dropped_not_served(tmp_path: Path, damage: str) -> None:
    cache = ReadCache(tmp_path / "cache", max_bytes=1 << 20)
    cache.open()
    cache.add(REF, DATA)
    path = cache.directory / cache_files(cache)[0]
    if damage == "flip":
        flip_byte(path)
    else:
        path.write_bytes(DATA[:-1] if damage == "truncate" else DATA + b"\0")
    assert cache.get(REF, len(DATA)) is None
    assert (cache.hits, cache.misses, cache.drops, cache.used) == (0, 1, 1, 0)
    assert cache_files(cache) == []


def test_the_cache_takes_over_what_an_earlier_run_left(tmp_path: Path) -> None:
    first = ReadCache(tmp_path / "cache", max_bytes=1 << 20)
    first.open()
    blobs = [bytes([i]) * 1000 for i in range(3)]
    for used, data in zip((2000, 1000, 1001), blobs, strict=True):  # blobs[1] is the least recently used
        ref = Ref.of("sha256", data)
        first.add(ref, data)
        os.utime(first.directory / f"sha256-{ref.digest}", (used, used))
    (first.directory / ".sha256-cut-short.part").write_bytes(b"half")
    (first.directory / "README").write_bytes(b"not ours")
    again = ReadCache(first.directory, max_bytes=2000)  # a smaller bound this time
    again.open()
    assert again.used == 2000
    assert again.get(Ref.of("sha256", blobs[1]), 1000) is None  # the least recently used went
    assert again.get(Ref.of("sha256", blobs[0]), 1000) == blobs[0]
    assert again.get(Ref.of("sha256", blobs[2]), 1000) == blobs[2]
    assert "README" in cache_files(again)
    assert not [name for name in cache_files(again) if name.endswith(".part")]


async def test_the_cache_serves_concurrent_threads(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path / "cache", max_bytes=4 * len(DATA))
    cache.open()
    blobs = [bytes([i]) + DATA for i in range(8)]

    def worker(data: bytes) -> None:
        ref = Ref.of("sha256", data)
        for _ in range(20):
            found = cache.get(ref, len(data))
            assert found in (None, data)
            if found is None:
                cache.add(ref, data)

    await asyncio.gather(*(asyncio.to_thread(worker, blobs[i % 8]) for i in range(16)))
    assert cache.used <= cache.max_bytes
    assert cache.used == on_disk(cache)
    assert cache.drops == 0


# -- the read cache in front of S3 ------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path) -> ReadCache:
    return ReadCache(tmp_path / "cache", max_bytes=1 << 20)


async def test_a_read_fills_the_cache_and_the_next_one_hits(
    server: S3Server, bucket: str, cache: ReadCache
) -> None:
    async with opened(server.store(bucket, "p")) as writer:
        await writer.put(REF, DATA)
    async with opened(server.store(bucket, "p", cache=cache)) as store:
        assert await store.read(REF, len(DATA)) == DATA
        assert (cache.hits, cache.misses) == (0, 1)
        assert await store.read(REF, len(DATA)) == DATA
        assert (cache.hits, cache.misses) == (1, 1)
        other = Ref.of("sha256", b"written here")
        await store.put(other, b"written here")  # a put fills it too
        assert await store.read(other, 12) == b"written here"
        assert (cache.hits, cache.misses) == (2, 1)


async def test_a_damaged_cache_entry_is_fetched_again_and_never_served(
    server: S3Server, bucket: str, cache: ReadCache
) -> None:
    async with opened(server.store(bucket, "p", cache=cache)) as store:
        await store.put(REF, DATA)
        path = cache.directory / cache_files(cache)[0]
        flip_byte(path)
        assert await store.read(REF, len(DATA)) == DATA
        assert (cache.hits, cache.misses, cache.drops) == (0, 1, 1)
        assert path.read_bytes() == DATA  # fetched again into the cache
        assert await store.read(REF, len(DATA)) == DATA
        assert cache.hits == 1


async def test_a_cached_copy_is_served_while_the_bucket_copy_is_damaged(
    server: S3Server, bucket: str, raw: Any, cache: ReadCache
) -> None:
    async with (
        opened(server.store(bucket, "p", cache=cache)) as cached,
        opened(server.store(bucket, "p")) as plain,
    ):
        await cached.put(REF, DATA)
        await raw.put_object(Bucket=bucket, Key=cached.key(REF), Body=b"X" + DATA[1:])
        with pytest.raises(Corrupt):
            await plain.read(REF, len(DATA))
        assert await cached.read(REF, len(DATA)) == DATA  # the cached bytes still hash right
        assert cache.hits == 1


async def test_discard_and_quarantine_empty_the_cache_entry(
    server: S3Server, bucket: str, raw: Any, cache: ReadCache
) -> None:
    async with opened(server.store(bucket, "p", cache=cache)) as store:
        await store.put(REF, DATA)
        await store.discard(REF)
        assert cache_files(cache) == []
        with pytest.raises(Missing):
            await store.read(REF, len(DATA))
        await store.put(REF, DATA)
        await raw.put_object(Bucket=bucket, Key=store.key(REF), Body=b"damaged")
        assert await store.quarantine(REF) == "quarantined"
        assert cache_files(cache) == []
