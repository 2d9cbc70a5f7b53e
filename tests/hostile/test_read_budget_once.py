"""A read is counted once against the sending budget on every path: with `[http] max_sending_bytes` below
one object's size, a lone read of it is served (one answer alone may be larger than the cap) through the
read lane, through aiohttp, and for a HEAD, and a second read while the first is held is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.images import png

from .conftest import TOKENS, Daemon

MiB = 1 << 20


def _status_and_length(daemon: Daemon, method: str, target: str) -> tuple[int, int]:
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKENS['alice']}\r\n"
        "Connection: close\r\n\r\n"
    )
    with daemon.connect() as s:
        s.sendall(head.encode())
        received = b""
        while piece := s.recv(1 << 20):
            received += piece
    status_line, _, rest = received.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), len(body)


@pytest.mark.parametrize(
    ("lane", "method", "query"),
    [
        (True, "GET", ""),  # the lane
        (True, "GET", "?"),  # aiohttp, beside the lane
        (True, "HEAD", ""),  # aiohttp: the lane answers GETs only
        (False, "GET", ""),
        (False, "HEAD", ""),
    ],
    ids=["lane", "aiohttp beside the lane", "HEAD", "lane off", "HEAD, lane off"],
)
def test_a_lone_read_larger_than_the_budget_is_served(
    start_daemon: Any, lane: bool, method: str, query: str
) -> None:
    daemon = start_daemon(http={"max_sending_bytes": MiB, "read_lane": lane})
    image = png(900, 1000, seed=7)  # noise: about 2.7 MB
    assert len(image) > 2 * MiB
    ref = daemon.admit("alice", image)
    status, length = _status_and_length(daemon, method, f"/v1/attachments/{ref}{query}")
    assert (status, length) == (200, len(image) if method == "GET" else 0)
