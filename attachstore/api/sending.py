"""What the daemon holds for answers on their way to clients, and for how long: each tenant's byte budget
(`Budget`), the watchdog of stalled connections (`Stalls`), and writes without a copy (`View`);
`docs/design.md`, "Answers on their way to clients"."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from typing import Protocol

from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter
from prometheus_client import Counter, Gauge

from ..errors import ServerBusy
from ..text import human_bytes
from .common import tenant_of

log = logging.getLogger("attachstore.api")


class Budget:
    """A tenant with nothing in flight may send one answer larger than the cap, so that no stored object or
    render is unservable."""

    def __init__(self, cap: int, gauge: Gauge) -> None:
        self.cap = cap
        self._gauge = gauge
        self._held: dict[str, int] = {}

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)

    def take(self, tenant: str, n: int, mine: int) -> None:
        self.check(tenant, n, mine)
        self._held[tenant] = self._held.get(tenant, 0) + n
        self._gauge.inc(n)

    def check(self, tenant: str, n: int, mine: int) -> None:
        held = self._held.get(tenant, 0)
        if held + n > self.cap and held > mine:
            raise ServerBusy(
                f"answers not yet taken by this tenant's clients hold {human_bytes(held)}, and this one "
                f"needs {human_bytes(n)} more: the most the daemon keeps for one tenant is "
                f"{human_bytes(self.cap)} ([http] max_sending_bytes)",
                hint="read the answers already asked for, then retry",
            )

    def give(self, tenant: str, n: int) -> None:
        left = self._held[tenant] - n
        if left:
            self._held[tenant] = left
        else:
            del self._held[tenant]
        self._gauge.dec(n)


class Sending:
    __slots__ = ("_budget", "_tenant", "held")

    def __init__(self, budget: Budget, tenant: str) -> None:
        self._budget = budget
        self._tenant = tenant
        self.held = 0

    def claim(self, n: int) -> None:
        """Call it from the handler: the task that runs it also writes the answer, so its end is when the
        bytes are let go."""
        if n <= 0:
            return
        self._budget.take(self._tenant, n, self.held)
        if not self.held:
            task = asyncio.current_task()
            if task is None:  # pragma: no cover - handlers run in a task
                raise RuntimeError("Sending.claim outside a task")
            task.add_done_callback(self._release)
        self.held += n

    def _release(self, task: object) -> None:
        self._budget.give(self._tenant, self.held)
        self.held = 0


BUDGET = web.AppKey("sending_budget", Budget)


def sending(request: web.Request) -> Sending:
    return Sending(request.app[BUDGET], tenant_of(request))


class View(payload.Payload):
    """Given whole, a body is joined with the headers into a second copy on Python before 3.12.9 (aiohttp
    avoids `writelines` there)."""

    FIRST = 16 * 1024

    def __init__(self, data: bytes | bytearray, content_type: str) -> None:
        super().__init__(data, content_type=content_type)
        self._size = len(data)

    async def write(self, writer: AbstractStreamWriter) -> None:
        view = memoryview(self._value)
        await writer.write(view[: self.FIRST])
        if len(view) > self.FIRST:
            await writer.write(view[self.FIRST :])

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._value).decode(encoding, errors)


class _Transport(Protocol):
    def get_write_buffer_size(self) -> int: ...
    def abort(self) -> None: ...
    def get_extra_info(self, name: str, default: object = None) -> object: ...


class _Connection(Protocol):
    @property
    def transport(self) -> _Transport | None: ...


class Stalls:
    """Progress is the transport's write buffer getting smaller; a connection whose buffer is empty is not
    watched."""

    def __init__(self, timeout: float, aborted: Counter) -> None:
        self.timeout = timeout
        self.tick = min(1.0, timeout / 4)
        self._aborted = aborted
        self._watched: dict[_Connection, tuple[int, float]] = {}  # the smallest buffer seen, and since when

    def sweep(self, connections: Iterable[_Connection], now: float) -> None:
        watched: dict[_Connection, tuple[int, float]] = {}
        for connection in connections:
            transport = connection.transport
            if transport is None:
                continue
            waiting = transport.get_write_buffer_size()
            if not waiting:
                continue
            last = self._watched.get(connection)
            if last is None or waiting < last[0]:
                watched[connection] = (waiting, now)
            elif now - last[1] < self.timeout:
                watched[connection] = last
            else:
                log.warning(
                    "aborting the connection of %s: its client took none of the %d bytes waiting for it "
                    "in %.1f s ([http] write_timeout)",
                    transport.get_extra_info("peername") or "a client",
                    waiting,
                    now - last[1],
                )
                self._aborted.inc()
                transport.abort()
        self._watched = watched

    async def run(self, *servers: _Connections) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.tick)
            self.sweep(itertools.chain.from_iterable(s.connections for s in servers), loop.time())


class _Connections(Protocol):
    @property
    def connections(self) -> Iterable[_Connection]: ...


class _Answered:
    __slots__ = ("transport",)

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport: asyncio.Transport | None = transport


class Answering:
    """Taken from aiohttp's public `on_response_prepare` hook, where its list of a server's connections is
    internal."""

    def __init__(self) -> None:
        self._seen: dict[asyncio.Transport, _Answered] = {}

    async def prepared(self, request: web.Request, response: web.StreamResponse) -> None:
        transport = request.transport
        if transport is not None and transport not in self._seen:
            self._seen[transport] = _Answered(transport)

    @property
    def connections(self) -> list[_Answered]:
        done = [t for t in self._seen if t.is_closing() and not t.get_write_buffer_size()]
        for transport in done:
            del self._seen[transport]
        return list(self._seen.values())


ANSWERING = web.AppKey("answering", Answering)
