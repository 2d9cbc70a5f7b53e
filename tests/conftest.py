from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import BaseTestServer, TestClient

from attachstore.api import make_app
from attachstore.config import Config
from attachstore.service import Store
from attachstore.storage import FileOps
from tests.support import fixtures, services
from tests.support.daemon import Daemons
from tests.support.serving import DaemonTestServer

MakeConfig = Callable[..., Config]
MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


@pytest.fixture(scope="session", autouse=True)
def _stop_the_services_this_session_started() -> Iterator[None]:
    """At the end of the session, stop the throw-away servers that this session started (a clean machine,
    such as CI's, is left as it was), and leave alone those that were up before it began (a developer's).
    Starting them is left to the tests that need them: a session that needs none pays nothing here."""
    before = {kind: services.current(kind) for kind in services.KINDS}
    yield
    for kind, up in fixtures.started.items():
        # `up` reuses servers that answer and restarts the others: on other ports, hence unequal.
        if up != before[kind]:
            services.down(kind)


@pytest.fixture(scope="session", autouse=True)
def _check_keys_of_this_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default check key is made in $XDG_CONFIG_HOME (outside every data dir): the tests' go to a
    directory of their own, never the developer's, and so do those of the daemons they start."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    mp.delenv("ATTACHSTORE_CHECK_KEY", raising=False)
    mp.delenv("CREDENTIALS_DIRECTORY", raising=False)
    yield
    mp.undo()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    """The `attachstore serve` processes the test starts (tests/support/daemon.py), stopped at its end."""
    with Daemons(tmp_path) as started:
        yield started


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_config(data_dir: Path) -> MakeConfig:
    """A Config on a temporary data dir with one decode worker; keyword arguments are config sections."""

    def make(**sections: Any) -> Config:
        raw = _merge({"data_dir": str(data_dir), "admission": {"decode_workers": 1}}, sections)
        return msgspec.convert(raw, Config)

    return make


@pytest.fixture
def aiohttp_client(aiohttp_client: Any) -> Any:
    """pytest-aiohttp's, serving an app as the daemon does (tests/support/serving.py): its plain reads are
    answered by the read lane, as in production, unless the app's configuration turns it off."""

    async def serve(
        app: web.Application | BaseTestServer,
        *,
        server_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        if isinstance(app, web.Application):
            app = DaemonTestServer(app, **(server_kwargs or {}))
            # A connection of its own for each request: a connection whose first request is not a plain
            # read is aiohttp's for the rest of its life, so a read after an admission would never be the
            # lane's on a connection the client keeps.
            kwargs.setdefault("connector", aiohttp.TCPConnector(force_close=True))
        return await aiohttp_client(app, **kwargs)

    return serve


@pytest.fixture
async def aiohttp_server() -> AsyncIterator[Callable[..., Awaitable[DaemonTestServer]]]:
    """pytest-aiohttp's, serving an app as the daemon does, as `aiohttp_client` above."""
    servers: list[DaemonTestServer] = []

    async def serve(
        app: web.Application, *, host: str = "127.0.0.1", port: int | None = None, **kwargs: Any
    ) -> DaemonTestServer:
        server = DaemonTestServer(app, host=host, port=port)
        await server.start_server(**kwargs)
        servers.append(server)
        return server

    yield serve
    while servers:
        await servers.pop().close()


@pytest.fixture
def make_client(aiohttp_client: Any, make_config: MakeConfig) -> MakeClient:
    async def make(file_ops: FileOps | None = None, **sections: Any) -> TestClient[Any, Any]:
        client: TestClient[Any, Any] = await aiohttp_client(
            make_app(make_config(**sections), file_ops=file_ops)
        )
        return client

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> TestClient[Any, Any]:
    return await make_client()


@pytest.fixture
async def store(make_config: MakeConfig) -> AsyncIterator[Store]:
    """The service on a temporary data dir, without HTTP."""
    s = await Store.open(make_config())
    try:
        yield s
    finally:
        await s.close()
