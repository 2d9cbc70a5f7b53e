"""aiohttp's test server, listening as the daemon listens: through `api.DaemonSite`, so that an in-process
test's requests take the path the daemon's take (the read lane first, where the app has one)."""

from __future__ import annotations

import socket
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from attachstore.api import DaemonSite


class DaemonTestServer(TestServer):
    async def start_server(self, loop: Any = None, **kwargs: Any) -> None:
        if self.runner:
            return
        kwargs.setdefault("handler_cancellation", True)  # as aiohttp's TestServer and the daemon have it
        self.runner = runner = web.AppRunner(self.app, **kwargs)
        await runner.setup()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = self.socket_factory(self.host, self.port or 0, family)
        self.host, self.port = sock.getsockname()[:2]
        await DaemonSite(runner, sock).start()
        self.scheme = self.scheme or "http"

    def make_url(self, path: Any) -> URL:
        host = f"[{self.host}]" if ":" in self.host else self.host
        url = URL(path)
        assert not url.absolute  # as TestServer's
        return URL(f"{self.scheme}://{host}:{self.port}").join(url)
