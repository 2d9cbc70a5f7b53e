"""Bearer tokens that are not UTF-8: a byte such as 0xff in `Authorization` is a wrong token like any other,
answered `401 UNAUTHORIZED` before anything is read, on every authenticated route, through the read lane and
through aiohttp alike, with no traceback in the log."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from tests.support.images import png

from .conftest import TOKENS, Daemon

# The raw bytes of header values as a client may send them: invalid UTF-8, a lone continuation byte, a byte
# of a longer sequence cut short, and a valid token with a stray byte after it.
BAD_TOKENS = [b"tok\xffen", b"\x80", b"mallory-token\xc3", TOKENS["mallory"].encode() + b"\xfe"]


def _exchange(daemon: Daemon, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request's raw bytes on a fresh connection, and its answer."""
    host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(request)
        stream = s.makefile("rb")
        status = int(stream.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if request.startswith(b"HEAD "):
            return status, headers, b""
        return status, headers, stream.read(int(headers.get("content-length", "0")))


def _request(method: str, target: str, token: bytes, body: bytes = b"") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: t\r\n".encode() + b"Authorization: Bearer " + token + b"\r\n"
    if method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
    return head + b"Connection: close\r\n\r\n" + body


def _admit(daemon: Daemon) -> tuple[str, bytes]:
    image = png(24, 24)
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]})
    status, answer = daemon.post("mallory", "/v1/attachments", body.encode())
    assert status == 201, answer
    return answer["attachments"][0]["ref"], image


@pytest.mark.parametrize("read_lane", [True, False], ids=["lane", "aiohttp"])
def test_a_token_that_is_not_utf8_is_unauthorized(start_daemon: Any, read_lane: bool) -> None:
    daemon = start_daemon(http={"read_lane": read_lane})
    ref, image = _admit(daemon)
    admission = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]})
    requests = [
        ("GET", f"/v1/attachments/{ref}", b""),  # the lane's own kind of request, when it is on
        ("GET", f"/v1/attachments/{ref}?", b""),  # aiohttp's, always
        ("HEAD", f"/v1/attachments/{ref}", b""),
        ("GET", f"/v1/attachments/{ref}/meta", b""),
        ("POST", "/v1/attachments", admission.encode()),
        ("POST", "/v1/sessions", b"{}"),
        ("POST", "/v1/mcp/results", b'{"content": []}'),
        ("GET", "/v1/routes", b""),
    ]
    for token in BAD_TOKENS:
        for method, target, body in requests:
            status, headers, answer = _exchange(daemon, _request(method, target, token, body))
            assert status == 401, (method, target, token, status, answer[:300])
            if method != "HEAD":
                assert json.loads(answer)["error"]["code"] == "UNAUTHORIZED", answer
            assert headers.get("www-authenticate", "").startswith("Bearer"), headers
    log = daemon.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert "UnicodeEncodeError" not in log, log[-3000:]
    # The right token still reads the bytes.
    status, _, answer = _exchange(
        daemon, _request("GET", f"/v1/attachments/{ref}", TOKENS["mallory"].encode())
    )
    assert (status, answer) == (200, image)
    daemon.assert_alice_is_served()
