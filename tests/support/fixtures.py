"""Where the tests find an S3 server and a PostgreSQL server: one place for every test module.

Each kind comes from the environment first (what `python -m tests.support.services env` prints:
ATTACHSTORE_TEST_S3_ENDPOINT with _ACCESS_KEY, _SECRET_KEY, _REGION; ATTACHSTORE_TEST_POSTGRES_DSN), else from
`tests.support.services`, which starts a throw-away one. Without either a test that needs the server fails,
unless ATTACHSTORE_TEST_SKIP_SERVICES=1 says to skip it (that also keeps `services` from starting anything).

`started` records what `services.up` answered in this process, so that the session fixture in
tests/conftest.py can stop what this test session started, and only that.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from tests.support import services

if TYPE_CHECKING:
    from attachstore.storage.s3 import S3BlobStore

SKIP_VARIABLE = "ATTACHSTORE_TEST_SKIP_SERVICES"

# kind ("s3", "postgresql") -> the servers `services.up` answered for it in this process
started: dict[str, services.Services] = {}


def skipping_services() -> bool:
    return os.environ.get(SKIP_VARIABLE) == "1"


def up(kind: str) -> services.Services:
    """`services.up(only=kind)`, recorded: the servers it started stop at the end of the test session."""
    answer = services.up(only=kind)
    started[kind] = answer
    return answer


def _missing(what: str, variables: str) -> NoReturn:
    if skipping_services():
        pytest.skip(f"no {what} server ({SKIP_VARIABLE}=1)")
    pytest.fail(
        f"the {what} tests need a server: tests.support.services, or {variables}; "
        f"set {SKIP_VARIABLE}=1 to skip them"
    )


# -- S3 ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    fresh_bucket: Callable[[], str] | None  # the test support's own, when it provides the server

    def store(self, bucket: str, prefix: str = "", **options: Any) -> S3BlobStore:
        from attachstore.storage.s3 import S3BlobStore

        return S3BlobStore(
            self.endpoint, bucket, prefix, self.region, self.access_key, self.secret_key, **options
        )

    def as_services(self) -> services.Services:
        """The server as `tests.support.services` describes one (for its synchronous client)."""
        return services.Services(self.endpoint, self.access_key, self.secret_key, self.region)

    def client(self) -> AbstractAsyncContextManager[Any]:
        """A plain client for what the tests do behind a store's back."""
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session

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
    """The server named by ATTACHSTORE_TEST_S3_*, else one that `tests.support.services` starts, else
    None."""
    endpoint = os.environ.get("ATTACHSTORE_TEST_S3_ENDPOINT")
    if endpoint:
        return S3Server(
            endpoint,
            os.environ.get("ATTACHSTORE_TEST_S3_ACCESS_KEY", ""),
            os.environ.get("ATTACHSTORE_TEST_S3_SECRET_KEY", ""),
            os.environ.get("ATTACHSTORE_TEST_S3_REGION", "us-east-1"),
            None,
        )
    if skipping_services():
        return None
    found = up("s3")
    return S3Server(
        str(found.s3_endpoint),
        str(found.s3_access_key),
        str(found.s3_secret_key),
        str(found.s3_region),
        lambda: services.fresh_bucket(found),
    )


def require_s3() -> S3Server:
    server = s3_server()
    if server is None:
        _missing("S3", "ATTACHSTORE_TEST_S3_ENDPOINT (with _ACCESS_KEY, _SECRET_KEY, _REGION)")
    return server


@asynccontextmanager
async def bucket_on(server: S3Server) -> AsyncIterator[str]:
    """A new, empty bucket; one this helper created is emptied and removed afterwards (the test support's
    own go with its server)."""
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


@contextmanager
def bucket(server: S3Server) -> Iterator[str]:
    """`bucket_on` for code outside an event loop (a module-scoped fixture, say)."""
    if server.fresh_bucket is not None:
        yield server.fresh_bucket()
        return
    name = f"attachstore-test-{secrets.token_hex(6)}"
    with services.s3_client(server.as_services()) as c:
        c.create_bucket(Bucket=name)
        try:
            yield name
        finally:
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=name):
                for item in page.get("Contents", ()):
                    c.delete_object(Bucket=name, Key=item["Key"])
            c.delete_bucket(Bucket=name)


# -- PostgreSQL ----------------------------------------------------------------------------------------


@functools.cache
def postgres_server() -> str | None:
    """The DSN of the server named by ATTACHSTORE_TEST_POSTGRES_DSN, else of one that
    `tests.support.services` starts, else None."""
    dsn = os.environ.get("ATTACHSTORE_TEST_POSTGRES_DSN")
    if dsn:
        return dsn
    if skipping_services():
        return None
    return up("postgresql").postgres_dsn


def require_postgres() -> str:
    dsn = postgres_server()
    if dsn is None:
        _missing("PostgreSQL", "ATTACHSTORE_TEST_POSTGRES_DSN")
    return dsn


def fresh_database() -> str:
    """A new, empty database on the test server; returns its DSN."""
    return services.fresh_database(require_postgres())


def drop_database(dsn: str) -> None:
    services.drop_database(dsn)


@contextmanager
def database() -> Iterator[str]:
    """A new, empty database for the block, dropped afterwards; yields its DSN."""
    dsn = fresh_database()
    try:
        yield dsn
    finally:
        drop_database(dsn)
