"""The read lanes of one app: their connections, their life beside the app's, and the protocol factory a
listening socket starts each connection in (`api/lane.py`, `docs/design.md` "The read lane")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from ..config import Config
from .common import STORE
from .lane import Lane
from .sending import BUDGET


class Lanes:
    def __init__(self, config: Config, tokens: dict[str, str]) -> None:
        self.tokens = tokens
        self.max_line = config.http.max_header_bytes
        self.keepalive = config.http.keepalive_timeout_seconds
        self.mapped = config.http.mapped_reads
        self.connections: set[Lane] = set()
        self.closing = False

    def in_front_of(self, server: web.Server) -> Lanes:
        self.server = server
        return self

    def __call__(self) -> Lane:
        return Lane(self)

    async def running(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context after the store's: no connection is left open after it."""
        self.store, self.budget = app[STORE], app[BUDGET]
        sweeping = asyncio.create_task(self._sweep_forever())
        try:
            yield
        finally:
            sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeping
            await self.shutdown(0)

    def sweep(self, now: float) -> None:
        for lane in list(self.connections):
            if lane.idle and now - lane.since > self.keepalive and lane.transport is not None:
                lane.transport.close()

    async def _sweep_forever(self) -> None:
        loop = asyncio.get_running_loop()
        unwatch = self.store.watch_leases(loop) if self.mapped else None
        try:
            while True:
                await asyncio.sleep(min(1.0, self.keepalive / 4))
                self.sweep(loop.time())
                self.store.sweep_reads()
        finally:
            if unwatch is not None:
                unwatch()

    async def shutdown(self, within: float) -> None:
        self.closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while self.connections and loop.time() < deadline:
            for lane in list(self.connections):
                if lane.idle and lane.transport is not None:
                    lane.transport.close()
            await asyncio.sleep(0.02)
        for lane in list(self.connections):
            if lane.transport is not None:
                lane.transport.abort()


LANES = web.AppKey("read_lanes", Lanes)
