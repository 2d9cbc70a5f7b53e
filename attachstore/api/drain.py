"""Stopping without losing what was begun: the requests in progress finish before aiohttp's own shutdown
closes their connections (`docs/design.md`, "Shutdown")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from ..errors import ServerBusy
from .common import STORE

log = logging.getLogger("attachstore.server")


class Drain:
    def __init__(self) -> None:
        self.stopping = False
        self._running: set[asyncio.Task[object]] = set()
        self._also: list[Callable[[float], Awaitable[None]]] = []

    def also(self, finish: Callable[[float], Awaitable[None]]) -> None:
        self._also.append(finish)

    def begin(self, task: asyncio.Task[object]) -> None:
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def finish(self, within: float) -> None:
        self.stopping = True
        await asyncio.gather(self._finish(within), *(finish(within) for finish in self._also))

    async def _finish(self, within: float) -> None:
        if not self._running:
            return
        _, late = await asyncio.wait(set(self._running), timeout=within)
        if late:
            log.warning("cancelling %d request(s) still in progress after %g s", len(late), within)
            for task in late:
                task.cancel()
            await asyncio.wait(late)


DRAIN = web.AppKey("drain", Drain)


@web.middleware
async def refuse_when_stopping(request: web.Request, handler: Handler) -> web.StreamResponse:
    drain = request.app[DRAIN]
    if drain.stopping:
        raise ServerBusy(
            "the daemon is stopping: it finishes the requests it had begun and takes no new one",
            hint="retry: another node, or this one once restarted, will take it",
        )
    task = asyncio.current_task()
    if task is not None:
        drain.begin(task)
    return await handler(request)


async def close_when_stopping(request: web.Request, response: web.StreamResponse) -> None:
    """The hook runs once the headers are made: the header is set here, the connection closed by
    force_close."""
    if request.app[DRAIN].stopping:
        response.force_close()
        response.headers["Connection"] = "close"


async def drain(app: web.Application, within: float) -> None:
    """Stop taking requests on `app`, and let those in progress finish within `within` seconds."""
    await asyncio.gather(app[STORE].stopping(), app[DRAIN].finish(within))
