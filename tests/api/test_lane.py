"""The read lane's recognizer: what it answers itself, and what it leaves to aiohttp."""

from __future__ import annotations

import asyncio

import pytest

from attachstore.api.lane import MAX_HEADERS, Get, Lane, Lanes, head, recognize
from attachstore.errors import NotFound
from attachstore.metrics import Metrics

REF = "sha256:" + "ab" * 32
PLAIN = f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\nAccept: */*".encode()


def test_a_plain_read_is_recognized() -> None:
    assert recognize(PLAIN, 8190) == Get(REF, "", None, None, False)


def test_the_headers_it_uses_are_read() -> None:
    got = recognize(
        PLAIN + b'\r\nAuthorization: Bearer t\r\nIf-None-Match: "x"\r\nX-Request-Id: r-1\r\n'
        b"Connection: keep-alive, Close",
        8190,
    )
    assert got == Get(REF, "Bearer t", '"x"', "r-1", True)


def test_a_mistyped_ref_is_still_the_lane_s() -> None:
    # The service answers INVALID_ATTACHMENT_REF for it, as it does behind aiohttp.
    assert recognize(b"GET /v1/attachments/sha256:abc HTTP/1.1", 8190) == Get(
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
    ],
)
def test_anything_else_is_left_to_aiohttp(head_: str) -> None:
    assert recognize(head_.encode(), 8190) is None


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


class _Store:
    """A read that takes until `done` is set, so that the requests behind it wait."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    def recalled(self, text: str, tenant: str) -> None:
        return None

    async def read(self, text: str, tenant: str) -> object:
        await self.done.wait()
        raise NotFound(f"no attachment {text}")

    metrics = Metrics()


async def test_reading_pauses_while_requests_pile_up_behind_a_slow_answer() -> None:
    lanes = Lanes.__new__(Lanes)
    lanes.store, lanes.tokens, lanes.max_line, lanes.closing = _Store(), {}, 8190, False  # type: ignore[assignment]
    lanes.connections = set()
    lane = Lane(lanes)
    transport = _Transport()
    lane.connection_made(transport)  # type: ignore[arg-type]
    request = f"GET /v1/attachments/{REF} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
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
