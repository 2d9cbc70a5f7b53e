"""The part of asyncpg the PostgreSQL index uses, typed (asyncpg ships no type information), and the
mapping of its failures onto ours: a full disk is StorageFull, anything else StorageUnavailable."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import asyncpg  # type: ignore[import-untyped,unused-ignore]

from ..errors import AttachstoreError, StorageFull, StorageUnavailable

LOCK_TIMEOUT = "30s"  # index.BUSY_TIMEOUT_MS
RETRY_SQLSTATES = frozenset({"40001", "40P01"})  # deadlock, serialization failure: run the transaction again


class Record(Protocol):
    def __getitem__(self, key: int | str, /) -> Any: ...
    def __iter__(self) -> Iterator[Any]: ...
    def __len__(self) -> int: ...


class Connection(Protocol):
    async def execute(self, query: str, *args: object) -> str: ...
    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None: ...
    async def fetch(self, query: str, *args: object) -> list[Record]: ...
    async def fetchrow(self, query: str, *args: object) -> Record | None: ...
    async def fetchval(self, query: str, *args: object) -> Any: ...
    def transaction(self) -> AbstractAsyncContextManager[object]: ...
    def terminate(self) -> None: ...


class Pool(Protocol):
    def acquire(self) -> Awaitable[Connection]: ...
    async def release(self, connection: Connection) -> None: ...
    async def fetch(self, query: str, *args: object) -> list[Record]: ...
    async def fetchrow(self, query: str, *args: object) -> Record | None: ...
    async def close(self) -> None: ...
    def is_closing(self) -> bool: ...


# Everything the driver raises: server errors, client and pool errors, sockets and timeouts.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # e.g. a query sent just as the server ended the connection
    OSError,
)
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    OSError,
)


def storage_error(e: BaseException, closed: bool) -> AttachstoreError:
    if closed:
        return StorageUnavailable("the PostgreSQL index is closed")
    sqlstate = getattr(e, "sqlstate", None)
    if sqlstate == "53100":
        return StorageFull(f"the index cannot grow: {e}")
    if sqlstate == "55P03":
        return StorageUnavailable(f"the index is busy: a lock was not granted within {LOCK_TIMEOUT}")
    if isinstance(e, CONNECTION_ERRORS):
        return StorageUnavailable(f"the PostgreSQL index is unreachable: {e or type(e).__name__}")
    return StorageUnavailable(f"index error: {e}")
