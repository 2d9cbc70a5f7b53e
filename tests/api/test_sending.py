"""Answers on their way to clients (api/sending.py): the per-tenant byte budget and its release when the
request ends, the watchdog that aborts stalled connections, and bytes written without a copy."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from attachstore.api.sending import Budget, Sending, Stalls, View
from attachstore.errors import ServerBusy
from tests.support.waiting import eventually

MiB = 1 << 20


def gauge() -> Gauge:
    return Gauge("sending", "test", registry=CollectorRegistry())


def counter() -> Counter:
    return Counter("aborted", "test", registry=CollectorRegistry())


def test_a_tenant_past_its_budget_is_busy_and_others_are_not() -> None:
    g = gauge()
    budget = Budget(10 * MiB, g)
    budget.take("mallory", 6 * MiB, mine=0)
    budget.take("mallory", 4 * MiB, mine=0)  # exactly the cap
    with pytest.raises(ServerBusy) as busy:
        budget.take("mallory", 1, mine=0)
    assert busy.value.status == 503
    assert busy.value.headers == {"Retry-After": "1"}
    assert "[http] max_sending_bytes" in busy.value.message
    budget.take("alice", 10 * MiB, mine=0)  # alice has her own
    assert g._value.get() == 20 * MiB
    budget.give("mallory", 6 * MiB)
    budget.take("mallory", 5 * MiB, mine=0)
    assert budget.held("mallory") == 9 * MiB


def test_one_answer_larger_than_the_budget_is_sent_alone() -> None:
    budget = Budget(10 * MiB, gauge())
    budget.take("t", 30 * MiB, mine=0)  # nothing else in flight: a large object stays readable
    budget.take("t", 5 * MiB, mine=30 * MiB)  # the same request's next piece: still alone
    with pytest.raises(ServerBusy):
        budget.take("t", 1, mine=0)  # anyone else waits
    budget.give("t", 35 * MiB)
    assert budget.held("t") == 0


async def test_a_share_is_given_back_when_its_request_ends_whatever_the_end() -> None:
    budget = Budget(10 * MiB, gauge())
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))

    async def request(n: int, fail: bool) -> None:
        share = Sending(budget, "t")
        share.claim(0)  # nothing: nothing to give back either
        share.claim(n)
        share.claim(n)
        await asyncio.sleep(0)
        if fail:
            raise ConnectionResetError("the client went away")

    task = asyncio.create_task(request(2 * MiB, fail=False))
    await asyncio.sleep(0)
    assert budget.held("t") == 4 * MiB  # held while the request runs
    await task
    await asyncio.sleep(0)  # done callbacks run in the next turn
    assert budget.held("t") == 0
    with pytest.raises(ConnectionResetError):
        await asyncio.create_task(request(3 * MiB, fail=True))
    await asyncio.sleep(0)
    assert budget.held("t") == 0
    assert errors == []  # each share given back once


async def test_a_refused_claim_holds_nothing() -> None:
    budget = Budget(MiB, gauge())
    budget.take("t", MiB, mine=0)

    async def request() -> None:
        Sending(budget, "t").claim(1)

    with pytest.raises(ServerBusy):
        await asyncio.create_task(request())
    await asyncio.sleep(0)
    assert budget.held("t") == MiB


@dataclass
class FakeTransport:
    waiting: int
    aborted: bool = False

    def get_write_buffer_size(self) -> int:
        return self.waiting

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1234) if name == "peername" else default


@dataclass(eq=False)
class FakeConnection:
    transport: FakeTransport | None


def test_a_connection_that_takes_nothing_for_the_timeout_is_aborted() -> None:
    aborted = counter()
    stalls = Stalls(30.0, aborted)
    stuck, slow, idle = FakeTransport(1000), FakeTransport(1000), FakeTransport(0)
    connections = [FakeConnection(t) for t in (stuck, slow, idle)] + [FakeConnection(None)]
    for now in range(30):
        stalls.sweep(connections, float(now))
        slow.waiting -= 10  # its client takes a little every second
    assert [t.aborted for t in (stuck, slow, idle)] == [False, False, False]
    stalls.sweep(connections, 30.0)
    assert [t.aborted for t in (stuck, slow, idle)] == [True, False, False]
    assert aborted._value.get() == 1


def test_progress_or_an_empty_buffer_restarts_the_clock() -> None:
    stalls = Stalls(10.0, counter())
    t = FakeTransport(500)
    c = [FakeConnection(t)]
    stalls.sweep(c, 0.0)
    t.waiting = 400  # taken at 9 s: watched anew from then
    stalls.sweep(c, 9.0)
    stalls.sweep(c, 18.0)
    assert not t.aborted
    t.waiting = 0  # all sent: no longer watched
    stalls.sweep(c, 19.0)
    t.waiting = 800  # the next answer: a new start
    stalls.sweep(c, 25.0)
    stalls.sweep(c, 34.0)
    assert not t.aborted
    stalls.sweep(c, 35.0)
    assert t.aborted


async def test_an_unread_answer_is_aborted_on_a_real_server() -> None:
    data = bytes(16 * MiB)  # more than the kernel's buffers take on loopback

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=View(data, "application/octet-stream"))

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert runner.server is not None
    port = runner.addresses[0][1]
    aborted = counter()
    watching = asyncio.create_task(Stalls(0.4, aborted).run(runner.server))
    reader = socket.socket()
    try:
        async with asyncio.timeout(60):  # a guard against a hang: the watchdog acts within a second
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.setblocking(False)
            await asyncio.get_running_loop().sock_connect(reader, ("127.0.0.1", port))
            reader.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await eventually(lambda: aborted._value.get(), "the stalled reader to be aborted", every=0.05)
        watching.cancel()  # the watchdog on the real clock has done its part
        assert aborted._value.get() == 1
        # The reader gets what the kernel had taken, then the connection's end, never the whole answer.
        received = await _drain(reader)
        assert 0 < received < len(data)
        # A client that reads is never cut off. The watchdog goes on, on a clock that moves 10 ms from one
        # sweep to the next, each after at least 10 ms of the loop running (the server writes, the client
        # reads): a pause of this whole process, which the real clock would count as the client's stall, is
        # not. The clock's rules themselves are the fake-clock tests' above.
        stalls, now = Stalls(0.4, aborted), 0.0
        async with asyncio.timeout(60):
            fetching = asyncio.create_task(_fetch(port))
            while not fetching.done():
                stalls.sweep(runner.server.connections, now)
                await asyncio.sleep(0.01)
                now += 0.01
            _, got = await fetching
        assert got == len(data)
        assert aborted._value.get() == 1
    finally:
        reader.close()
        watching.cancel()
        await runner.cleanup()


async def _drain(s: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    total = 0
    try:
        while piece := await asyncio.wait_for(loop.sock_recv(s, 1 << 20), 60):
            total += len(piece)
    except ConnectionResetError:
        pass
    return total


async def _fetch(port: int) -> tuple[bytes, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    body = 0
    while piece := await reader.read(1 << 20):
        body += len(piece)
    writer.close()
    return head, body


async def test_a_view_writes_the_bytes_it_was_given_without_a_copy() -> None:
    data = bytes(range(256)) * 1000
    written: list[Any] = []

    class Writer:
        async def write(self, chunk: Any) -> None:
            written.append(chunk)

    view = View(data, "image/png")
    assert view.size == len(data)
    await view.write(Writer())  # type: ignore[arg-type]
    assert b"".join(written) == data
    assert all(isinstance(chunk, memoryview) and chunk.obj is data for chunk in written)
    assert len(written[0]) == View.FIRST  # the piece that goes with the headers
