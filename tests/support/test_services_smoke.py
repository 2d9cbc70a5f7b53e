"""The throw-away servers work: S3 PUT, GET and a conditional PUT; a query in a database of one's own."""

from __future__ import annotations

import asyncpg
import pytest
from botocore.exceptions import ClientError

from tests.support import fixtures, services
from tests.support.services import Services


@pytest.fixture(scope="module")
def running() -> Services:
    # Recorded in fixtures.started: the session fixture in conftest.py stops them at the very end, so the
    # suites after this one reuse them instead of booting Ceph again.
    for kind in ("s3", "postgresql"):
        fixtures.up(kind)
    return services.up()  # both are up: this reuses them


def test_s3_put_get_and_put_if_none_match(running: Services) -> None:
    bucket = services.fresh_bucket(running)
    with services.s3_client(running) as s3:
        s3.put_object(Bucket=bucket, Key="a", Body=b"first")
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket=bucket, Key="a", Body=b"second", IfNoneMatch="*")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        with s3.get_object(Bucket=bucket, Key="a")["Body"] as body:
            assert body.read() == b"first"


async def test_fresh_database_is_empty_and_dropped(running: Services) -> None:
    assert running.postgres_dsn is not None
    dsn = services.fresh_database(running.postgres_dsn)
    connection = await asyncpg.connect(dsn)
    try:
        assert await connection.fetchval("SELECT current_database()") == dsn.rpartition("/")[2]
        assert await connection.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0
        await connection.execute("CREATE TABLE t (n int); INSERT INTO t VALUES (1), (2)")
        assert await connection.fetchval("SELECT sum(n) FROM t") == 3
    finally:
        await connection.close()
    services.drop_database(dsn)
    with pytest.raises(asyncpg.InvalidCatalogNameError):
        await asyncpg.connect(dsn)


def test_up_again_reuses_them(running: Services) -> None:
    assert services.up() == running == services.current()
    assert set(running.env()) == {
        "ATTACHSTORE_TEST_S3_ENDPOINT",
        "ATTACHSTORE_TEST_S3_ACCESS_KEY",
        "ATTACHSTORE_TEST_S3_SECRET_KEY",
        "ATTACHSTORE_TEST_S3_REGION",
        "ATTACHSTORE_TEST_POSTGRES_DSN",
    }
