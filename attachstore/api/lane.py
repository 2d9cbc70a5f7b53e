"""The read lane: a plain `GET /v1/attachments/{ref}` answered in front of aiohttp, with the same service
calls, headers, envelopes, log line, budget and bounds; anything else hands the connection to aiohttp for
the rest of its life. The rule (the lane answers only what aiohttp would accept) and why the lane is here:
`docs/design.md`, "The read lane". Recognizing a plain read is `heads.py`; writing its head, `headers.py`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from typing import Protocol, cast

from aiohttp import web

from ..errors import AttachstoreError, Unauthorized
from ..service import ImageRef, Store
from ..storage import Mapped
from .attachments import etag_matches
from .common import error_response, tenant_for
from .headers import head, not_modified_headers, verified_head
from .heads import BARE_LF, MAX_HEADERS, PlainRead, possible, recognize
from .observe import CLIENT_GONE, record, request_id
from .sending import Budget

log = logging.getLogger("attachstore.api")

ENDPOINT = "/v1/attachments/{ref}"  # the aiohttp route's canonical form, for the same metrics and log lines
_PENDING_MAX = 64 * 1024  # bytes of requests waiting behind the one being answered, before reading pauses
_READS_KEPT = 64  # where the last reads ended, kept to give them to aiohttp as they came at a hand-over


class _Lanes(Protocol):
    store: Store
    budget: Budget
    tokens: dict[str, str]
    server: web.Server
    max_line: int
    mapped: bool
    connections: set[Lane]
    closing: bool


class Lane(asyncio.Protocol):
    def __init__(self, lanes: _Lanes) -> None:
        self.lanes = lanes
        self.transport: asyncio.Transport | None = None
        self._fd = -1  # the socket's, written to directly only while the transport holds nothing unsent
        self.since = 0.0  # when it last began to wait for a request (the loop's clock)
        self._loop = asyncio.get_running_loop()
        self._pending = bytearray()  # received and not yet answered
        # Where the last reads of the socket ended, counted from the connection's first byte (at most
        # _READS_KEPT: older ones are merged), and how many bytes were answered and let go before `_pending`.
        self._segments: deque[int] = deque()
        self._let_go = 0
        self._heads: deque[tuple[int, PlainRead]] = (
            deque()
        )  # the complete heads at its start: length, request
        self._parsed = 0  # where in `_pending` the first incomplete head begins
        self._searched = 0  # how far past it no head ends: where the next search begins, less 3
        self._refused: int | None = None  # where in `_pending` aiohttp takes over, once the heads before it
        self._task: asyncio.Task[None] | None = None  # the answer being made off the caller's stack
        self._paused = False  # the transport holds more unsent bytes than its high-water mark
        self._reading = True
        self._held: tuple[str, int] | None = None  # this connection's bytes in flight, by tenant
        self._eof = False
        self._close = False  # the connection is closed once what is buffered is sent

    @property
    def idle(self) -> bool:
        return self._task is None and not self._paused

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        self.since = self._loop.time()
        self.lanes.connections.add(self)
        if self.lanes.closing:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._pending += data
        self._segments.append(self._let_go + len(self._pending))
        if len(self._segments) > _READS_KEPT:
            self._segments.popleft()
        if self._refused is None:
            self._parse()
        self._next()

    def eof_received(self) -> bool:
        self._eof = True
        self._next()
        return True  # closed by _next once every complete request is answered

    def connection_lost(self, exc: Exception | None) -> None:
        self.lanes.connections.discard(self)
        self.transport = None
        self._release()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._release()
        self._next()

    # answering

    @property
    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _parse(self) -> None:
        """All the heads of the last read or none: aiohttp takes each read whole (`docs/design.md`, "The read
        lane"), so it takes over at the first of a read it refuses."""
        first = at = self._parsed
        heads = []
        while True:
            # Only the bytes that arrived since the last search are searched (and the 3 before them, where
            # an empty line may have begun): a head that comes in many pieces is searched once.
            end = self._pending.find(b"\r\n\r\n", max(at, self._searched))
            if end < 0:
                if BARE_LF.search(self._pending, max(at, self._searched)):
                    # A line ended by a bare LF: no head the lane takes, and one aiohttp refuses already,
                    # while the lane would wait for an empty line that may never come.
                    self._refused = first
                    return
                self._searched = max(at, len(self._pending) - 3)
                break
            read = recognize(bytes(self._pending[at:end]), self.lanes.max_line)
            if read is None or (read.close and end + 4 < len(self._pending)):
                self._refused = first
                return
            heads.append((end + 4 - at, read))
            at = end + 4
        if len(self._pending) - at > self.lanes.max_line * (MAX_HEADERS + 1) or (
            # A read that completed heads and began another that aiohttp may refuse already: none of them.
            heads and at < len(self._pending) and not possible(bytes(self._pending[at:]), self.lanes.max_line)
        ):
            self._refused = first  # (and a head past its bounds)
            return
        self._heads.extend(heads)
        self._parsed = at

    def _consume(self, n: int) -> None:
        del self._pending[:n]
        self._let_go += n
        self._parsed -= n
        self._searched = max(0, self._searched - n)
        if self._refused is not None:
            self._refused -= n
        while self._segments and self._segments[0] <= self._let_go:
            self._segments.popleft()

    def _next(self) -> None:
        while self._open and not self._close and self.idle:
            assert self.transport is not None
            if self._heads:
                length, read = self._heads.popleft()
                self._consume(length)
                self._close = read.close or self.lanes.closing
                self._answer(read)
            elif self._refused is not None:
                self._hand_over()
                return
            else:
                if self._eof or self.lanes.closing:
                    self._close = True
                    self.transport.close()
                break
        if self.transport is not None:
            self._flow()

    def _flow(self) -> None:
        assert self.transport is not None
        # stop reading while too much waits behind an answer; read on while a head is incomplete (the
        # hand-over in `_next` bounds that)
        waiting = len(self._pending) > _PENDING_MAX and not (self.idle and self._open and not self._close)
        if waiting and self._reading:
            self._reading = False
            self.transport.pause_reading()
        elif not waiting and not self._reading:
            self._reading = True
            self.transport.resume_reading()

    def _answer(self, read: PlainRead) -> None:
        started = time.perf_counter()
        rid = request_id(read.request_id)
        lanes = self.lanes
        try:
            tenant = tenant_for(lanes.tokens, read.authorization) if lanes.tokens else ""
        except Unauthorized as e:
            self._failed(e, read, rid, started, None)
            return
        revalidate = bool(read.if_none_match) and etag_matches(read.if_none_match or "", f'"{read.ref}"')
        if not revalidate:
            hit = lanes.store.read_remembered(read.ref, tenant, lanes.mapped)
            if hit is not None and self._send(read, rid, started, tenant, *hit):
                return
        self._task = self._loop.create_task(self._answer_later(read, rid, started, tenant, revalidate))

    async def _answer_later(
        self, read: PlainRead, rid: str, started: float, tenant: str, revalidate: bool
    ) -> None:
        try:
            if revalidate:
                await self.lanes.store.meta(read.ref, tenant)
                sent = self._write(304, not_modified_headers(f'"{read.ref}"'), rid)
                self._record(read, rid, started, tenant, 304 if sent else CLIENT_GONE)
            else:
                found = await self._read(read, tenant, self.lanes.mapped)
                if not self._send(read, rid, started, tenant, *found):
                    self._release()  # claimed by the read of the mapping: claimed again by the next
                    found = await self._read(read, tenant, False)
                    self._send(read, rid, started, tenant, *found)
        except AttachstoreError as e:
            self._failed(e, read, rid, started, tenant)
        except asyncio.CancelledError:  # the client left: nobody is answered
            self._record(read, rid, started, tenant, CLIENT_GONE)
            raise
        except Exception:
            log.exception("unhandled error in GET %s", ENDPOINT)
            self._failed(AttachstoreError("internal error"), read, rid, started, tenant)
        finally:
            self._task = None
        self._next()

    async def _read(
        self, read: PlainRead, tenant: str, mapped: bool
    ) -> tuple[ImageRef, bytes | bytearray | Mapped]:
        return await self.lanes.store.read(read.ref, tenant, lambda n: self._claim(tenant, n), mapped)

    def _claim(self, tenant: str, n: int) -> None:
        self.lanes.budget.take(tenant, n, 0)
        self._held = (tenant, n)

    def _send(
        self,
        read: PlainRead,
        rid: str,
        started: float,
        tenant: str,
        found: ImageRef,
        data: bytes | bytearray | Mapped,
    ) -> bool:
        """False (nothing sent) for a mapping whose file someone asked to write to since its lease was
        granted: the caller reads again."""
        if isinstance(data, Mapped) and not data.intact():
            data.release()
            return False
        # Read in a task: claimed before its bytes were read. Recalled (on this stack, from the check to the
        # write): counted only if part of it is still in the transport once written.
        claimed = self._held is not None
        if not claimed:
            try:
                self.lanes.budget.check(tenant, len(data), 0)
            except AttachstoreError as e:
                if isinstance(data, Mapped):
                    data.served()  # verified, and not sent: kept for the next read all the same
                self._failed(e, read, rid, started, tenant)
                return True
        sent = self._send_head(verified_head(found, rid, len(data), self._close), data)
        if not self._paused:  # all of it is with the kernel, or within the transport's low-water mark
            self._release()
        elif not claimed:
            self._claim(tenant, len(data))
        self._record(read, rid, started, tenant, 200 if sent else CLIENT_GONE)
        return True

    def _failed(
        self, e: AttachstoreError, read: PlainRead, rid: str, started: float, tenant: str | None
    ) -> None:
        self._release()  # what a read claimed before it failed
        if e.status >= 500:
            log.error("GET /v1/attachments/%s: %s %s", read.ref[:140], e.code, e.message)
        answer = error_response(e)
        body = answer.body
        assert isinstance(body, bytes)
        headers = {name: value for name, value in answer.headers.items() if name != "Content-Length"}
        headers["Content-Type"] = "application/json"  # as aiohttp writes json_response's
        if self._write(e.status, headers, rid, body):
            self._record(read, rid, started, tenant, e.status, e.code)
        else:
            self._record(read, rid, started, tenant, CLIENT_GONE)

    def _write(self, status: int, headers: dict[str, str], rid: str, body: bytes | bytearray = b"") -> bool:
        headers["X-Request-Id"] = rid
        return self._send_head(head(status, headers, len(body), self._close), body)

    def _send_head(self, head_: bytes, body: bytes | bytearray | Mapped) -> bool:
        transport = self.transport
        if transport is None or transport.is_closing():
            if isinstance(body, Mapped):
                body.served()
            return False
        if isinstance(body, Mapped):
            self._send_mapped(transport, head_, body)
        else:
            transport.writelines([head_, body])
        if transport.is_closing():
            return False  # a reset connection's write fails and closes the transport (nginx's 499)
        if self._close:
            transport.close()  # once what is buffered is sent
        self.since = self._loop.time()
        return True

    def _send_mapped(self, transport: asyncio.Transport, head_: bytes, body: Mapped) -> None:
        """Called on `intact()`'s stack: the bytes written are the ones hashed (`docs/design.md`, "Mapped
        reads"). The mapping goes straight to the socket while nothing is unsent, so it is let go at once."""
        try:
            sent = 0
            if self._fd >= 0 and not transport.get_write_buffer_size():
                try:
                    sent = os.writev(self._fd, [head_, body])
                except OSError:  # full (EAGAIN), or broken: the transport finds out as it writes the rest
                    sent = 0
            if sent < len(head_):
                transport.writelines([head_[sent:], bytes(body)])
            elif sent < len(head_) + len(body):
                transport.write(body[sent - len(head_) :])
        finally:
            body.served()

    def _record(
        self,
        read: PlainRead,
        rid: str,
        started: float,
        tenant: str | None,
        status: int,
        code: str | None = None,
    ) -> None:
        record(
            self.lanes.store.metrics,
            rid,
            "GET",
            ENDPOINT,
            status,
            time.perf_counter() - started,
            code=code,
            tenant=tenant,
            ref=read.ref[:140],
        )

    def _release(self) -> None:
        if self._held is not None:
            self.lanes.budget.give(*self._held)
            self._held = None

    def _hand_over(self) -> None:
        transport = self.transport
        assert transport is not None
        assert self.idle
        self.lanes.connections.discard(self)
        inner = self.lanes.server()
        transport.set_protocol(inner)
        inner.connection_made(transport)
        if not self._reading:
            transport.resume_reading()
        # Each read as it came (aiohttp refuses what it refuses read by read, and its 400 names the read).
        start = 0
        for end in self._segments:
            inner.data_received(bytes(self._pending[start : end - self._let_go]))
            start = end - self._let_go
        self._pending = bytearray()
        self._segments.clear()
        if self._eof:
            inner.eof_received()
        self.transport = None
