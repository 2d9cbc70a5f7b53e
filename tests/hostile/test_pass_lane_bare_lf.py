"""A request head whose lines end in a bare LF (`\\n`, not `\\r\\n`) is refused by aiohttp at once with a 400.
The read lane, which every connection starts in, waited for a `\\r\\n\\r\\n` that never came and closed the
connection at the keep-alive timeout without an answer: for a read, and for any other request (the lane
sees every connection first). A head that cannot become one the lane takes is handed to aiohttp as soon as
that shows, so the client gets aiohttp's answer, the same as with the lane off."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from tests.support.images import png

from .conftest import TOKENS


def _first_line(url: str, request: bytes) -> bytes:
    """The status line answered to `request` (b"" if the connection closes without one)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(request)
        return s.makefile("rb").readline().strip()


@pytest.mark.parametrize(
    "ending", ["\n", "\r\n|\n"], ids=["every line bare LF", "CRLF lines, bare LF empty line"]
)
@pytest.mark.parametrize("what", ["read", "healthz"])
def test_a_head_with_bare_line_feeds_is_answered_as_aiohttp_answers_it(
    start_daemon: Any, ending: str, what: str
) -> None:
    # A short keep-alive timeout, so that a head left waiting fails the test in seconds.
    lane = start_daemon(http={"keepalive_timeout": "2s"})
    aiohttp_only = start_daemon(http={"keepalive_timeout": "2s", "read_lane": False})
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(png(8, 8)).decode()}]}).encode()
    refs = set()
    for daemon in (lane, aiohttp_only):
        status, answer = daemon.post("mallory", "/v1/attachments", body)
        assert status == 201, answer
        refs.add(answer["attachments"][0]["ref"])
    [ref] = refs
    path = f"/v1/attachments/{ref}" if what == "read" else "/healthz"
    lines = [f"GET {path} HTTP/1.1", "Host: a", f"Authorization: Bearer {TOKENS['mallory']}"]
    if "|" in ending:
        inner, last = ending.split("|")
        request = (inner.join(lines) + inner + last).encode()
    else:
        request = (ending.join(lines) + ending + ending).encode()
    expected = _first_line(aiohttp_only.url, request)
    assert expected.split()[1:2] == [b"400"], expected
    assert _first_line(lane.url, request).split()[1:2] == expected.split()[1:2]
