"""Where the daemon listens: the one way a connection reaches the app, for the server and the tests alike."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from aiohttp import web

from .lanes import LANES


class DaemonSite(web.BaseSite):
    """Every connection starts in the read lane, where the app has one (unless `[http] read_lane = false`),
    else in aiohttp."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket) -> None:
        super().__init__(runner)
        self._app_runner = runner
        self._sock = sock
        self._listening: asyncio.Server | None = None

    @property
    def name(self) -> str:
        address = self._sock.getsockname()
        return f"unix:{address}" if isinstance(address, str) else f"http://{address[0]}:{address[1]}"

    async def start(self) -> None:
        await super().start()
        factory = protocol_factory(self._app_runner)
        self._listening = await asyncio.get_running_loop().create_server(factory, sock=self._sock)

    async def stop(self) -> None:
        if self._listening is not None:
            self._listening.close()
        await super().stop()


def protocol_factory(runner: web.AppRunner) -> Callable[[], asyncio.BaseProtocol]:
    server = runner.server
    if server is None:  # pragma: no cover - setup() makes it
        raise RuntimeError("protocol_factory needs a runner that is set up")
    lanes = runner.app.get(LANES)
    return server if lanes is None else lanes.in_front_of(server)
