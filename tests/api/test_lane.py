"""The read lane's recognizer: what it answers itself, and what it leaves to aiohttp."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from attachstore.api.common import STORE
from attachstore.api.headers import head, verified_head, verified_headers
from attachstore.api.heads import _NOT_HERE, _ONCE, MAX_HEADERS, PlainRead, parse_head, recognize
from attachstore.api.lane import Lane
from attachstore.api.lanes import LANES, Lanes
from attachstore.api.sending import Budget
from attachstore.errors import NotFound
from attachstore.metrics import Metrics
from attachstore.refs import Ref
from attachstore.service import ImageRef
from attachstore.storage import mapped
from attachstore.storage.mapped import Mapped, map_resident
from tests.conftest import MakeClient
from tests.support.http import admit_ok
from tests.support.images import png
from tests.support.waiting import eventually, jumping_clock

REF = "sha256:" + "ab" * 32
PLAIN = f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nAccept: */*".encode()


def test_a_plain_read_is_recognized() -> None:
    assert recognize(PLAIN, 8190) == PlainRead(REF, "", None, None, False)


def test_the_headers_it_uses_are_read() -> None:
    got = recognize(
        PLAIN + b'\r\nAuthorization: Bearer t\r\nIf-None-Match: "x"\r\nX-Request-Id: r-1\r\n'
        b"Connection: keep-alive, Close",
        8190,
    )
    assert got == PlainRead(REF, "Bearer t", '"x"', "r-1", True)


def test_a_mistyped_ref_is_still_the_lane_s() -> None:
    # The service answers INVALID_ATTACHMENT_REF for it, as it does behind aiohttp.
    assert recognize(b"GET /v1/attachments/sha256:abc HTTP/1.1\r\nHost: x", 8190) == PlainRead(
        "sha256:abc", "", None, None, False
    )


@pytest.mark.parametrize(
    "head_",
    [
        f"HEAD /v1/attachments/{REF} HTTP/1.1",
        f"get /v1/attachments/{REF} HTTP/1.1",
        f"GET /v1/attachments/{REF} HTTP/1.0",
        f"GET /v1/attachments/{REF}?x=1 HTTP/1.1",
        f"GET /v1/attachments/sha256%3A{'ab' * 32} HTTP/1.1",
        f"GET /v1/attachments/{REF}/meta HTTP/1.1",
        "GET /v1/attachments/ HTTP/1.1",
        "GET /v1/attachments/.. HTTP/1.1",
        "GET /v1/attachments/. HTTP/1.1",
        f"GET  /v1/attachments/{REF} HTTP/1.1",
        f"\r\nGET /v1/attachments/{REF} HTTP/1.1",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nContent-Length: 0",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nTransfer-Encoding: chunked",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nExpect: 100-continue",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nUpgrade: websocket",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nAuthorization: a\r\nauthorization: b",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nIf-None-Match: a\r\nIf-None-Match: b",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\n folded",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost x",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHo st: x",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\ny",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: caf\u00e9",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: a\x00b",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nX-Long: {'a' * 9000}",
        f"GET /v1/attachments/{REF} HTTP/1.1" + "\r\nX: y" * (MAX_HEADERS + 1),
        # What aiohttp refuses: an HTTP/1.1 request without a Host, and two of a field allowed once.
        f"GET /v1/attachments/{REF} HTTP/1.1",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nAccept: */*",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nHost: x",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nhost: y",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nAuthorization: a\r\nHOST: y",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nUser-Agent: a\r\nuser-agent: a",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nContent-Type: a\r\nContent-Type: a",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nETag: a\r\nETag: a",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nServer: a\r\nServer: a",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nMax-Forwards: 1\r\nMax-Forwards: 1",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nContent-Location: a\r\nContent-Location: a",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nContent-Range: a\r\nContent-Range: a",
        # llhttp reads Proxy-Connection as Connection; aiohttp's Python parser takes 62 fields at most.
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nProxy-Connection: close",
        f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x" + "\r\nX: y" * (MAX_HEADERS - 2),
    ],
)
def test_anything_else_is_left_to_aiohttp(head_: str) -> None:
    assert recognize(head_.encode(), 8190) is None


def test_every_field_aiohttp_refuses_twice_is_one_the_lane_takes_once_at_most() -> None:
    # An aiohttp that refuses another field twice fails here first (and in test_lane_differential.py).
    from aiohttp.http_parser import SINGLETON_HEADERS

    assert {name.encode() for name in SINGLETON_HEADERS} <= _ONCE | _NOT_HERE


# Heads the one-match path takes, heads it leaves to `parse_head` (a header the lane reads or refuses, a byte
# or a line out of bounds), and heads neither takes.
_HEADS = [
    PLAIN,
    PLAIN + b"\r\nUser-Agent: wrk/4.2\r\nAccept-Encoding: gzip, br\r\nX-Requested-With:",
    PLAIN + b"\r\nx-request-id: r-2",
    PLAIN + b"\r\nCONNECTION: close",
    PLAIN + b"\r\nAuthorization: Bearer t",
    PLAIN + b"\r\nIf-None-Match: *",
    PLAIN + b"\r\nContent-Length: 0",
    PLAIN + b"\r\ncontent-length: 0",
    PLAIN + b"\r\nConnection : close",
    PLAIN + b"\r\nX-Connection: close\r\nX-Request-Id-Of: a",
    PLAIN + b"\r\nHost: a\rb",
    PLAIN + b"\r\n folded",
    PLAIN + b"\r\nX: " + b"a" * 8190,
    PLAIN + b"\r\nX: y" * MAX_HEADERS,
    PLAIN + b"\r\nX: y" * (MAX_HEADERS - 1),
    b"GET /v1/attachments/.. HTTP/1.1\r\nHost: x",
    b"GET /v1/attachments/sha256:abc HTTP/1.1\r\nHost: x",
    b"GET /v1/attachments/sha256:abc HTTP/1.1\r\nHost: x\r\n",
    b"GET /v1/attachments/sha256:abc HTTP/1.1",
    PLAIN + b"\r\nHost: y",
    PLAIN + b"\r\nUser-Agent: a\r\nuser-agent: b",
    PLAIN + b"\r\nUser-Agent: a\r\nX-User-Agent: b\r\nX-Host: c",
    PLAIN + b"\r\nServer: a",
    b"GET /v1/attachments/sha256:abc HTTP/1.1\r\nUser-Agent: a",
]


@pytest.mark.parametrize("head_", _HEADS, ids=range(len(_HEADS)))
def test_the_one_match_path_answers_what_the_walk_answers(head_: bytes) -> None:
    assert recognize(head_, 8190) == parse_head(head_, 8190)


@pytest.mark.parametrize("close", [False, True])
def test_a_verified_answer_s_head_is_the_one_head_makes_for_it(close: bool) -> None:
    found = ImageRef(REF, "image/webp", 1234, 10, 20, 1, None)
    headers = {**verified_headers(found), "X-Request-Id": "r-1"}
    assert verified_head(found, "r-1", 1234, close) == head(200, headers, 1234, close)


def test_an_answer_s_head_carries_the_security_headers_unless_it_sets_its_own() -> None:
    text = head(200, {"Cache-Control": "private", "ETag": '"e"'}, 3, close=True).decode()
    assert text.startswith("HTTP/1.1 200 OK\r\n")
    assert text.endswith("\r\n\r\n")
    fields = dict(line.split(": ", 1) for line in text.split("\r\n")[1:-2])
    assert fields["Cache-Control"] == "private"
    assert fields["X-Frame-Options"] == "DENY"
    assert fields["Content-Length"] == "3"
    assert fields["Connection"] == "close"


class _Transport:
    """What a Lane asks of its transport, recorded."""

    def __init__(self) -> None:
        self.reading = True
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def writelines(self, pieces: list[bytes]) -> None:
        self.written.append(b"".join(pieces))

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> None:
        return None


class _Store:
    """A read that takes until `done` is set (or, for a ref in `slow`, its own event), so that the
    requests behind it wait."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.slow: dict[str, asyncio.Event] = {}

    def read_remembered(self, text: str, tenant: str, mapped: bool = False) -> None:
        return None

    async def read(self, text: str, tenant: str, claim: object = None, mapped: bool = False) -> object:
        await self.slow.get(text, self.done).wait()
        raise NotFound(f"no attachment {text}")

    metrics = Metrics()


def _lanes() -> Lanes:
    lanes = Lanes.__new__(Lanes)
    lanes.store, lanes.tokens, lanes.max_line, lanes.closing = _Store(), {}, 8190, False  # type: ignore[assignment]
    lanes.mapped = True
    lanes.connections = set()
    return lanes


def _read(ref: str) -> bytes:
    return f"GET /v1/attachments/{ref} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def test_reading_pauses_while_requests_pile_up_behind_a_slow_answer() -> None:
    lanes = _lanes()
    lane = Lane(lanes)
    transport = _Transport()
    lane.connection_made(transport)  # type: ignore[arg-type]
    request = _read(REF)
    for _ in range(2000):  # about 160 KB of pipelined reads
        lane.data_received(request)
    assert not transport.reading
    lanes.store.done.set()  # type: ignore[attr-defined]
    for _ in range(5000):
        if transport.reading:
            break
        await asyncio.sleep(0)
    assert transport.reading  # the waiting requests were answered, down past the bound
    assert all(w.startswith(b"HTTP/1.1 404 ") for w in transport.written)


TOKEN = "t0ken"


async def test_reading_resumes_once_the_requests_behind_an_answer_are_answered_on_the_spot() -> None:
    lanes = _lanes()
    lanes.tokens = {hashlib.sha256(TOKEN.encode()).hexdigest(): "alice"}
    lane = Lane(lanes)
    transport = _Transport()
    lane.connection_made(transport)  # type: ignore[arg-type]
    # The first read waits for the store; the 2,000 behind it (about 160 KB) carry no token: each is a 401
    # on the spot once it is their turn. The last head is cut in two, as a segment may end anywhere.
    last = _read(REF)
    lane.data_received(_read(REF).replace(b"\r\n\r\n", f"\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()))
    for _ in range(2000):
        lane.data_received(_read(REF))
    lane.data_received(last[:20])
    assert not transport.reading
    lanes.store.done.set()  # type: ignore[attr-defined]
    await eventually(lambda: len(transport.written) == 2001, "the answers of the waiting requests")
    assert transport.reading  # else the rest of the last head is never read
    lane.data_received(last[20:])
    assert [w.split(b" ", 2)[1] for w in transport.written] == [b"404"] + [b"401"] * 2001


class _Searched(bytearray):
    """Received bytes that count how many bytes their searches went through."""

    searched = 0

    def find(self, sub: Any, start: Any = 0, *rest: Any) -> int:
        self.searched += len(self) - start
        return super().find(sub, start, *rest)


async def test_a_head_that_comes_in_many_pieces_is_searched_once() -> None:
    lane = Lane(_lanes())
    transport = _Transport()
    lane.connection_made(transport)  # type: ignore[arg-type]
    lane._pending = received = _Searched()
    head_ = PLAIN + b"".join(b"\r\nX-Pad-%d: %s" % (i, b"p" * 8000) for i in range(50)) + b"\r\n\r\n"
    pieces = [head_[i : i + 400] for i in range(0, len(head_), 400)]  # about 1,000 of them
    for piece in pieces[:-1]:
        lane.data_received(piece)
    assert received.searched <= len(head_) + 3 * len(pieces)  # not about len(head_) * len(pieces) / 2
    assert not transport.written


class _Reset(_Transport):
    """A transport whose client reset the connection: its first write finds out, and it is closing."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def writelines(self, pieces: list[bytes]) -> None:
        self.closing = True  # nothing sent

    def is_closing(self) -> bool:
        return self.closing


async def test_a_connection_a_write_finds_reset_is_answered_no_further() -> None:
    lanes, _ = _recalling(1000, cap=10_000)
    store = lanes.store
    recalls: list[str] = []
    remembered = store.read_remembered
    store.read_remembered = lambda *args: recalls.append(args[0]) or remembered(*args)  # type: ignore[method-assign]
    lane = Lane(lanes)
    lane.connection_made(_Reset())  # type: ignore[arg-type]
    lane.data_received(_read(REF) * 50)
    assert len(recalls) == 1  # no other request read and hashed
    registry = store.metrics.registry
    count = "attachstore_request_duration_seconds_count"
    labels = {"method": "GET", "endpoint": "/v1/attachments/{ref}"}
    assert registry.get_sample_value(count, {**labels, "status": "499"}) == 1
    assert registry.get_sample_value(count, {**labels, "status": "200"}) is None


class _Ending(_Transport):
    """A transport whose close and abort end its connection on the loop's next turn, as the loop's own do."""

    def __init__(self, lane: Lane) -> None:
        super().__init__()
        self.lane = lane
        self.ended: str | None = None
        lane.connection_made(self)  # type: ignore[arg-type]

    def close(self) -> None:
        self._end("closed")

    def abort(self) -> None:
        self._end("aborted")

    def is_closing(self) -> bool:
        return self.ended is not None

    def _end(self, how: str) -> None:
        if self.ended is None:
            self.ended = how
            asyncio.get_running_loop().call_soon(self.lane.connection_lost, None)


async def test_a_shutdown_closes_idle_connections_now_busy_ones_after_their_answer_and_aborts_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shutdown's time runs out when the test says so, not when the machine is slow: the loop's clock,
    # which the shutdown's deadline is on, jumps past the deadline once `expired` is set, and only then.
    within = 3600.0
    expired = jumping_clock(monkeypatch, 2 * within)
    lanes = _lanes()
    store: _Store = lanes.store  # type: ignore[assignment]
    answered, stuck_ref = "sha256:" + "01" * 32, "sha256:" + "02" * 32
    store.slow = {answered: asyncio.Event(), stuck_ref: asyncio.Event()}
    idle, busy, stuck = (_Ending(Lane(lanes)) for _ in range(3))
    busy.lane.data_received(_read(answered))
    stuck.lane.data_received(_read(stuck_ref))
    shutdown = asyncio.create_task(lanes.shutdown(within=within))
    await eventually(lambda: idle.ended is not None)
    assert idle.ended == "closed"
    assert (busy.ended, stuck.ended) == (None, None)  # both still answering
    store.slow[answered].set()
    await eventually(lambda: busy.ended is not None)
    assert busy.ended == "closed"
    assert [w.split(b"\r\n")[0] for w in busy.written] == [
        b"HTTP/1.1 404 Not Found"
    ]  # its answer, then the close
    assert stuck.ended is None
    late = _Ending(Lane(lanes))  # a connection accepted while stopping is closed at once
    assert late.ended == "closed"
    assert not shutdown.done()  # its time has not run out
    expired.set()
    await shutdown
    assert stuck.ended == "aborted"  # its answer never came within the shutdown's time
    assert stuck.written == []
    await asyncio.sleep(0)
    assert not lanes.connections


class _Recalled:
    """A store whose every read is recalled: `size` bytes, on the caller's stack."""

    def __init__(self, size: int) -> None:
        self.found = ImageRef(REF, "image/png", size, 1, 1, 1, None)
        self.data = bytearray(size)
        self.metrics = Metrics()

    def read_remembered(self, text: str, tenant: str, mapped: bool = False) -> tuple[ImageRef, bytearray]:
        return self.found, self.data


class _Backed(_Transport):
    """A transport whose buffer passes its high-water mark on a write of more than `room` bytes."""

    def __init__(self, lane: Lane, room: int) -> None:
        super().__init__()
        self.lane, self.room = lane, room

    def writelines(self, pieces: list[bytes]) -> None:
        super().writelines(pieces)
        if len(self.written[-1]) > self.room:
            self.lane.pause_writing()


def _recalling(size: int, cap: int) -> tuple[Lanes, Gauge]:
    lanes = _lanes()
    lanes.store = _Recalled(size)  # type: ignore[assignment]
    gauge = Gauge("sending", "test", registry=CollectorRegistry())
    lanes.budget = Budget(cap, gauge)
    return lanes, gauge


def _gauge(g: Gauge) -> float:
    return next(iter(g.collect())).samples[0].value


async def test_a_recalled_answer_taken_whole_by_the_kernel_counts_nothing() -> None:
    lanes, gauge = _recalling(1000, cap=10_000)
    lane = Lane(lanes)
    transport = _Backed(lane, room=1 << 20)
    lane.connection_made(transport)  # type: ignore[arg-type]
    lane.data_received(_read(REF) * 3)
    assert [w.split(b"\r\n")[0] for w in transport.written] == [b"HTTP/1.1 200 OK"] * 3
    assert lanes.budget.held("") == 0
    assert _gauge(gauge) == 0


async def test_a_recalled_answer_left_in_the_transport_counts_until_it_drains() -> None:
    lanes, gauge = _recalling(6000, cap=10_000)
    lane, other = Lane(lanes), Lane(lanes)
    transport, others = _Backed(lane, room=100), _Backed(other, room=1 << 20)
    lane.connection_made(transport)  # type: ignore[arg-type]
    other.connection_made(others)  # type: ignore[arg-type]
    lane.data_received(_read(REF) * 2)  # the second waits for the first to drain
    assert len(transport.written) == 1
    assert lanes.budget.held("") == 6000
    assert _gauge(gauge) == 6000
    other.data_received(_read(REF))  # 6,000 more would pass the cap while another answer holds 6,000
    assert others.written[0].startswith(b"HTTP/1.1 503 ")
    assert b'"SERVER_BUSY"' in others.written[0]
    transport.room = 1 << 20
    lane.resume_writing()  # drained: given back, and the next request answered
    assert [w.split(b"\r\n")[0] for w in transport.written] == [b"HTTP/1.1 200 OK"] * 2
    assert lanes.budget.held("") == 0
    assert _gauge(gauge) == 0


def _mapped(path: Path) -> Mapped:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    view = map_resident(fd, path.stat().st_size)
    if view is None:
        os.close(fd)
        pytest.skip("this kernel grants no read leases or has no cachestat (Linux 6.5)")
    return view


class _Mapping:
    """A store whose mapped read is a mapping someone has asked to write to meanwhile, and whose other
    read is a copy."""

    def __init__(self, view: Mapped, copy: bytes) -> None:
        self.view, self.copy = view, copy
        self.found = ImageRef(REF, "image/png", len(copy), 1, 1, 1, None)
        self.asked: list[bool] = []
        self.metrics = Metrics()

    def read_remembered(self, text: str, tenant: str, mapped: bool = False) -> None:
        return None

    async def read(
        self, text: str, tenant: str, claim: Callable[[int], None], mapped: bool = False
    ) -> object:
        self.asked.append(mapped)
        claim(len(self.copy))
        return self.found, self.view if mapped else self.copy


async def test_a_mapping_someone_asked_to_write_to_is_not_sent_but_read_again(tmp_path: Path) -> None:
    path = tmp_path / "object"
    path.write_bytes(b"the bytes that were hashed")
    view = _mapped(path)
    opened = threading.Event()
    writer = threading.Thread(target=lambda: (os.close(os.open(path, os.O_WRONLY)), opened.set()))
    writer.start()
    await eventually(lambda: not view.intact())  # the writer has asked, and waits
    lanes = _lanes()
    lanes.store = store = _Mapping(view, b"read again")  # type: ignore[assignment]
    lanes.budget = Budget(1 << 20, Gauge("sending", "test", registry=CollectorRegistry()))
    lane = Lane(lanes)
    transport = _Transport()
    lane.connection_made(transport)  # type: ignore[arg-type]
    lane.data_received(_read(REF))
    assert lane._task is not None
    await lane._task
    assert store.asked == [True, False]
    assert len(transport.written) == 1
    assert transport.written[0].endswith(b"\r\n\r\nread again")
    assert lanes.budget.held("") == 0  # the first claim given back before the second
    assert await asyncio.to_thread(opened.wait, 10)  # let go at once
    writer.join()


class _Sent(_Transport):
    def __init__(self, unsent: int = 0) -> None:
        super().__init__()
        self.unsent = unsent

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def write(self, piece: bytes) -> None:
        self.written.append(piece)


@pytest.mark.parametrize("unsent", [0, 1], ids=["straight to the socket", "behind the transport's bytes"])
async def test_what_the_socket_does_not_take_is_copied_out_of_the_mapping(
    tmp_path: Path, unsent: int
) -> None:
    body = os.urandom(3_000_000)
    path = tmp_path / "object"
    path.write_bytes(body)
    view = _mapped(path)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        ours.setblocking(False)
        lane = Lane(_lanes())
        lane._fd = ours.fileno()
        transport = _Sent(unsent)
        lane._send_mapped(transport, b"HEAD\r\n\r\n", view)  # type: ignore[arg-type]
        assert not view.intact()  # let go on return
        straight = b""
        theirs.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while chunk := theirs.recv(1 << 20):
                straight += chunk
    assert all(type(piece) is bytes for piece in transport.written)
    assert straight + b"".join(transport.written) == b"HEAD\r\n\r\n" + body
    assert (len(straight) > 0) == (unsent == 0)
    assert len(straight) < len(body)  # some of it was left to the transport


@pytest.mark.parametrize("lane", [True, False])
async def test_an_in_process_client_s_read_takes_the_daemon_s_path(
    make_client: MakeClient, lane: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API tests serve the app as the daemon does (tests/conftest.py, api.DaemonSite): a plain read is the
    # lane's, and only aiohttp's with [http] read_lane = false.
    answered: list[int] = []
    record = Lane._record
    monkeypatch.setattr(Lane, "_record", lambda self, *args: answered.append(args[4]) or record(self, *args))
    client = await make_client(http={"read_lane": lane})
    [found] = await admit_ok(client, png(8, 8))
    response = await client.get(f"/v1/attachments/{found['ref']}")
    assert response.status == 200
    assert await response.read() == png(8, 8)
    assert answered == ([200] if lane else [])
    assert (LANES in client.app) == lane


async def test_the_app_lets_go_of_a_mapped_read_as_soon_as_a_writer_asks(make_client: MakeClient) -> None:
    # The lanes' life in the app (a cleanup context) handles the lease-break signal and sweeps the kept
    # mappings: a writer of an object file the lane keeps mapped waits for the loop, not for the kernel's
    # lease-break time (45 s by default).
    if not mapped.available():
        pytest.skip("this kernel grants no read leases or has no cachestat (Linux 6.5)")
    client = await make_client()
    [found] = await admit_ok(client, png(64, 64))
    store = client.app[STORE]
    for _ in range(2):  # the first read may find its pages just written; either way one is kept
        response = await client.get(f"/v1/attachments/{found['ref']}")
        assert response.status == 200
    mappings = store.resident.mappings if store.resident is not None else None
    if mappings is None or not len(mappings):
        pytest.skip("this file system kept no mapping of the object (its pages not in the page cache)")
    path = store.local.path(Ref.parse(found["ref"])) if store.local is not None else None
    assert path is not None
    writer = asyncio.to_thread(lambda: os.close(os.open(path, os.O_WRONLY)))
    await asyncio.wait_for(writer, 30)  # under the kernel's 45 s, as in tests/storage/test_mapped.py
    assert len(mappings) == 0
