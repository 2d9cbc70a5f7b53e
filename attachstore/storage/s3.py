"""The S3-compatible backend (AWS S3, Ceph RGW, MinIO, R2), keeping the contract of backend.py; what it relies
on each server for, and where S3 differs from a file system: `docs/scale-out.md`, "The object store". Its
node-local read cache is cache.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import aiohttp

# aiobotocore and botocore ship no type information: their client is `Any`, used only through `_call`.
from aiobotocore.config import AioConfig  # type: ignore[import-untyped]
from aiobotocore.session import get_session  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from ..errors import AttachstoreError, Corrupt, Missing, StorageFull, StorageUnavailable
from ..refs import Ref
from .backend import StoredObject
from .cache import ReadCache
from .layout import object_name, ref_at
from .local import Put, Verify

# Hashing less than this inline costs less than the hop to a thread.
_INLINE_HASH = 1 << 16
_PROBE_BLOCK = 4096  # what the readiness probe writes
# Rounds of put and quarantine when the object changes under them (a concurrent writer, remover or healer).
_ATTEMPTS = 4
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})
# Failures on the way; aiohttp's own escape aiobotocore where a body is cut short (ClientPayloadError).
_TRANSPORT_ERRORS = (BotoCoreError, aiohttp.ClientError)
_DENIED_CODES = frozenset({"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch"})

T = TypeVar("T")


class _KeyMissing(Exception):
    pass


class _ConditionFailed(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Fetched:
    data: bytes
    etag: str
    modified: datetime


class S3BlobStore:
    kind = "s3"

    def __init__(
        self,
        endpoint: str | None,
        bucket: str,
        prefix: str,
        region: str | None,
        access_key: str | None,
        secret_key: str | None,
        *,
        cache: ReadCache | None = None,
        max_connections: int = 64,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_attempts: int = 3,
    ) -> None:
        """`endpoint` None means AWS itself (a custom one is addressed path-style); credentials None,
        botocore's usual chain; the timeouts are per attempt."""
        self.endpoint = endpoint
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.cache = cache
        self._client_args: dict[str, Any] = {
            "endpoint_url": endpoint,
            "region_name": region,
            "aws_access_key_id": access_key,
            "aws_secret_access_key": secret_key,
            "config": AioConfig(
                # Ceph RGW cannot parse aws-chunked trailers: checksums only where an operation needs one.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                retries={"mode": "standard", "total_max_attempts": max_attempts},
                max_pool_connections=max_connections,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                s3={"addressing_style": "path" if endpoint else "auto"},
            ),
        }
        self._probe_key = f"{self.prefix}probe/{secrets.token_hex(8)}"
        self._stack: AsyncExitStack | None = None
        self._client: Any = None  # aiobotocore's S3 client: untyped, and used only through _call

    def __repr__(self) -> str:
        return f"S3BlobStore({self._where()})"

    def key(self, ref: Ref) -> str:
        return f"{self.prefix}objects/{object_name(ref)}"

    def quarantine_key(self, ref: Ref) -> str:
        return f"{self.prefix}quarantine/{ref.algorithm}-{ref.digest}.{time.time_ns()}"

    # -- lifetime --------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._stack = AsyncExitStack()
        try:
            client = _session().create_client("s3", **self._client_args)
            self._client = await self._stack.enter_async_context(client)
            try:
                await self._call("checking the bucket", "head_bucket")
            except _KeyMissing:  # a HEAD has no body: a bare 404 is the bucket's
                raise StorageUnavailable(f"the {self._where()} does not exist") from None
            if self.cache is not None:
                await asyncio.to_thread(self.cache.open)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    # -- the contract ----------------------------------------------------------------------------------

    async def put(self, ref: Ref, data: bytes | memoryview) -> Put:
        return await self._put(ref, data if isinstance(data, bytes) else data.tobytes())

    async def _put(self, ref: Ref, data: bytes) -> Put:
        key = self.key(ref)
        md5 = await _off_loop(_md5, data)
        for _ in range(_ATTEMPTS):
            # A HEAD first: a refused create would upload the bytes for nothing (and RGW answers any error
            # late: docs/performance.md). The conditional create alone decides who creates.
            if await self._head(key) is None and await self._create(key, data, md5):
                outcome = Put.CREATED
                break
            found = await self._get(key, "verifying an existing object")
            if found is None:
                continue  # removed meanwhile: create it again
            if len(found.data) == len(data) and await _off_loop(ref.matches, found.data):
                outcome = Put.EXISTED
                break
            await self._keep(ref, found.data)
            await self._put_object(key, data, md5)
            outcome = Put.HEALED
            break
        else:
            raise StorageUnavailable(f"{ref} kept changing in the {self._where()} while it was being written")
        if self.cache is not None:
            await asyncio.to_thread(self.cache.add, ref, data)
        return outcome

    async def read(self, ref: Ref, size: int, *, fresh: bool = False, verify: Verify | None = None) -> bytes:
        if self.cache is not None and not fresh:
            cached = await asyncio.to_thread(self.cache.get, ref, size)
            if cached is not None:
                return cached
        try:
            answer = await self._call("reading an object", "get_object", Key=self.key(ref))
        except _KeyMissing:
            raise Missing(f"the bytes of {ref} are missing from the store") from None
        async with answer["Body"] as body:
            if answer.get("ContentLength", size) != size:
                raise Corrupt(f"the stored bytes of {ref} do not match their reference")
            data = await self._body(body, "reading an object")
        if len(data) != size or not await _off_loop(ref.matches if verify is None else verify, data):
            raise Corrupt(f"the stored bytes of {ref} do not match their reference")
        if self.cache is not None:
            await asyncio.to_thread(self.cache.add, ref, data)
        return data

    async def quarantine(self, ref: Ref) -> str:
        key = self.key(ref)
        for _ in range(_ATTEMPTS):
            found = await self._get(key, "re-checking an object")
            if found is None:
                return "missing"
            if await _off_loop(ref.matches, found.data):
                return "intact"
            await self._keep(ref, found.data)
            if self.cache is not None:
                await asyncio.to_thread(self.cache.drop, ref)
            now = await self._head(key)
            if now is None:
                return "quarantined"  # removed meanwhile; its damaged bytes are kept all the same
            if (now["ETag"], now["LastModified"]) != (found.etag, found.modified):
                continue  # rewritten since it was read, perhaps healed: look again
            try:
                await self._call("quarantining an object", "delete_object", Key=key, IfMatch=found.etag)
            except _ConditionFailed:
                continue
            except _KeyMissing:
                pass
            return "quarantined"
        raise StorageUnavailable(f"{ref} kept changing in the {self._where()} while it was being quarantined")

    async def stat(self, ref: Ref) -> StoredObject | None:
        key = self.key(ref)
        head = await self._head(key)
        if head is None:
            return None
        return StoredObject(key, ref, head["ContentLength"], head["LastModified"].timestamp())

    async def stat_many(self, refs: Sequence[Ref]) -> list[StoredObject | None]:
        return list(await asyncio.gather(*(self.stat(ref) for ref in refs)))

    async def discard(self, ref: Ref) -> None:
        if self.cache is not None:
            await asyncio.to_thread(self.cache.drop, ref)
        with contextlib.suppress(_KeyMissing):
            await self._call("removing an object", "delete_object", Key=self.key(ref))

    async def fetch(self, key: str) -> bytes | None:
        found = await self._get(key, "reading an object")
        return None if found is None else found.data

    async def set_aside(self, key: str) -> str:
        found = await self._get(key, "setting an entry aside")
        if found is None:
            return "gone meanwhile"
        target = f"{self.prefix}quarantine/stray-{key.rsplit('/', 1)[-1]}.{time.time_ns()}"
        await self._call("setting an entry aside", "put_object", Key=target, Body=found.data)
        with contextlib.suppress(_KeyMissing):
            await self._call("setting an entry aside", "delete_object", Key=key)
        return f"moved to {target}"

    async def probe_writable(self, room: int = 0, objects: int = 0) -> None:
        """A block written as an object's first write is, then deleted: a HEAD of the bucket would not notice
        read-only credentials, a full quota, or a gateway that refuses conditional writes. `room` and
        `objects` are not checked: S3 has no free space to ask about."""
        key = f"{self._probe_key}-{secrets.token_hex(4)}"  # new each time: the create is conditional
        block = secrets.token_bytes(_PROBE_BLOCK)
        try:
            if not await self._create(key, block, _md5(block)):
                raise StorageUnavailable(f"the {self._where()} refused the create of a new probe key")
            with contextlib.suppress(_KeyMissing):
                await self._call("probing", "delete_object", Key=key)
        except StorageFull as e:
            raise StorageUnavailable(e.message) from e

    async def walk(self) -> AsyncIterator[StoredObject]:
        top = f"{self.prefix}objects/"
        pages = (
            self._require_client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=top)
        )
        try:
            async for page in pages:
                for item in page.get("Contents", ()):
                    key = item["Key"]
                    yield StoredObject(
                        key, ref_at(key[len(top) :]), item["Size"], item["LastModified"].timestamp()
                    )
        except (*_TRANSPORT_ERRORS, ClientError) as e:
            raise self._failure(e, "listing objects") from e

    # -- requests --------------------------------------------------------------------------------------

    async def _put_object(self, key: str, data: bytes, md5: tuple[str, str], **conditions: str) -> None:
        """Where S3 defines the ETag as the MD5 (a single PUT, not encrypted), the answer's ETag is checked
        too."""
        answer = await self._call(
            "writing an object", "put_object", Key=key, Body=data, ContentMD5=md5[0], **conditions
        )
        etag = answer.get("ETag", "").strip('"')
        if "ServerSideEncryption" not in answer and re.fullmatch(r"[0-9a-f]{32}", etag) and etag != md5[1]:
            raise StorageUnavailable(
                f"the {self._where()} answered a write of {key} with an ETag other than its MD5"
            )

    async def _create(self, key: str, data: bytes, md5: tuple[str, str]) -> bool:
        """False when a concurrent create got there first (or is in flight)."""
        try:
            await self._put_object(key, data, md5, IfNoneMatch="*")
        except _ConditionFailed:
            return False
        return True

    async def _get(self, key: str, doing: str) -> _Fetched | None:
        try:
            answer = await self._call(doing, "get_object", Key=key)
        except _KeyMissing:
            return None
        async with answer["Body"] as body:
            data = await self._body(body, doing)
        return _Fetched(data, answer["ETag"], answer["LastModified"])

    async def _head(self, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = await self._call("looking up an object", "head_object", Key=key)
        except _KeyMissing:
            return None
        return head

    async def _keep(self, ref: Ref, damaged: bytes) -> None:
        await self._call("keeping damaged bytes", "put_object", Key=self.quarantine_key(ref), Body=damaged)

    async def _body(self, body: Any, doing: str) -> bytes:
        try:
            data: bytes = await body.read()
        except _TRANSPORT_ERRORS as e:
            raise self._failure(e, doing) from e
        return data

    async def _call(self, doing: str, operation: str, /, **params: Any) -> Any:
        try:
            return await getattr(self._require_client(), operation)(Bucket=self.bucket, **params)
        except ClientError as e:
            code = _code(e)
            if code in _MISSING_CODES:
                raise _KeyMissing from None
            if code in _CONFLICT_CODES:
                raise _ConditionFailed from None
            raise self._failure(e, doing) from e
        except _TRANSPORT_ERRORS as e:
            raise self._failure(e, doing) from e

    def _require_client(self) -> Any:
        if self._client is None:
            raise StorageUnavailable(f"{self!r} is not open")
        return self._client

    def _failure(self, e: Exception, doing: str) -> AttachstoreError:
        where = self._where()
        if not isinstance(e, ClientError):
            return StorageUnavailable(f"cannot reach the {where} while {doing}: {e}")
        code = _code(e)
        if code == "NoSuchBucket":
            return StorageUnavailable(f"the {where} does not exist")
        if code in _DENIED_CODES:
            return StorageUnavailable(f"access to the {where} was refused ({code})")
        if code == "QuotaExceeded":
            return StorageFull(f"the {where} is full (its quota is reached)")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return StorageUnavailable(f"the {where} answered {code} (HTTP {status}) while {doing}")

    def _where(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint or 'AWS S3'}"


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _md5(data: bytes) -> tuple[str, str]:
    h = hashlib.md5(data, usedforsecurity=False)
    return base64.b64encode(h.digest()).decode("ascii"), h.hexdigest()


async def _off_loop(fn: Callable[[bytes], T], data: bytes) -> T:
    return fn(data) if len(data) < _INLINE_HASH else await asyncio.to_thread(fn, data)


@functools.cache
def _session() -> Any:
    """Making a session parses botocore's service models: once per process."""
    return get_session()
