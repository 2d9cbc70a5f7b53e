"""Stopping without losing what was begun: once the daemon is told to stop, a request not yet begun is `503
SERVER_BUSY`, and the requests in progress finish (an upload's body keeps arriving, its answer is written),
for up to the shutdown bound; those still running then are cancelled.

aiohttp's own shutdown closes every connection first, and a connection closed so drops whatever bytes still
arrive on it: an admission whose body was on its way waited for the rest until `[http] read_timeout` and
answered 408. So the server waits here for the requests in progress, and only then lets aiohttp shut down."""

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
    """The requests in progress (their tasks, which end once the answer is written), and whether the daemon
    is stopping."""

    def __init__(self) -> None:
        self.stopping = False
        self._running: set[asyncio.Task[object]] = set()
        self._also: list[Callable[[float], Awaitable[None]]] = []

    def also(self, finish: Callable[[float], Awaitable[None]]) -> None:
        """Let `finish(within)` finish its own requests alongside (the read lanes')."""
        self._also.append(finish)

    def begin(self, task: asyncio.Task[object]) -> None:
        """Count a request in progress until its task ends."""
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def finish(self, within: float) -> None:
        """Take no new request; wait up to `within` seconds for those in progress, then cancel the rest."""
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
    """A request begun before the daemon is told to stop is counted in progress; one begun after is
    refused."""
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
    """An answer written while the daemon stops closes its connection: nothing more is read from it. (The
    hook runs once the headers are made: the header is set here, the connection closed by force_close.)"""
    if request.app[DRAIN].stopping:
        response.force_close()
        response.headers["Connection"] = "close"


async def drain(app: web.Application, within: float) -> None:
    """Stop taking requests on `app`, and let those in progress finish within `within` seconds. The store's
    node says at once that it is stopping (a daemon started meanwhile waits for it instead of refusing)."""
    await asyncio.gather(app[STORE].stopping(), app[DRAIN].finish(within))
