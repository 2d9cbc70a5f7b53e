"""The read lane against a real daemon: it answers what aiohttp answers, in order, and never damaged bytes.

Each comparison sends the same read twice: as a plain read (the lane answers it) and with an empty query
string, which the lane leaves to aiohttp (the route ignores the query)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import launch
from tests.support.images import png

from .conftest import TOKENS, Daemon, serve

_VARYING = {"date", "x-request-id"}


def _admit(daemon: Daemon, tenant: str, image: bytes) -> str:
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]})
    status, answer = daemon.post(tenant, "/v1/attachments", body.encode())
    assert status == 201, answer
    ref: str = answer["attachments"][0]["ref"]
    return ref


def _exchange(daemon: Daemon, requests: bytes, answers: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Send `requests` in one write on one connection and read `answers` answers off it."""
    host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(requests)
        stream = s.makefile("rb")
        out = []
        for _ in range(answers):
            status = int(stream.readline().split()[1])
            headers: dict[str, str] = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            out.append((status, headers, stream.read(int(headers.get("content-length", "0")))))
        return out


def _get(target: str, *extra: str) -> bytes:
    return (f"GET {target} HTTP/1.1\r\nHost: t\r\n" + "".join(f"{e}\r\n" for e in extra) + "\r\n").encode()


def _same(daemon: Daemon, target: str, *extra: str) -> tuple[int, dict[str, str], bytes]:
    lane, aiohttp = _exchange(daemon, _get(target, *extra) + _get(target + "?", *extra), 2)
    # The same headers in the same order, but for the date and the request id.
    strip = lambda a: (a[0], [(k, v) for k, v in a[1].items() if k not in _VARYING], a[2])  # noqa: E731
    assert strip(lane) == strip(aiohttp)
    return lane


MAPPED = pytest.mark.parametrize("mapped", [False, True], ids=["copied", "mapped"])


@MAPPED
def test_every_answer_of_the_lane_is_aiohttp_s(start_daemon: Any, mapped: bool) -> None:
    daemon = start_daemon(http={"mapped_reads": mapped})
    image = png(64, 48)
    ref = _admit(daemon, "alice", image)
    auth = f"Authorization: Bearer {TOKENS['alice']}"
    for _ in range(2):  # the first read looks the row up, the second is served from the remembered row
        status, headers, body = _same(daemon, f"/v1/attachments/{ref}", auth)
        assert (status, body, headers["etag"]) == (200, image, f'"{ref}"')
    assert _same(daemon, f"/v1/attachments/{ref}", auth, f'If-None-Match: "{ref}"')[0] == 304
    assert _same(daemon, f"/v1/attachments/{ref}", auth, 'If-None-Match: "other"')[2] == image
    assert _same(daemon, f"/v1/attachments/{ref}")[0] == 401
    assert _same(daemon, f"/v1/attachments/{ref}", f"Authorization: Bearer {TOKENS['mallory']}")[0] == 404
    assert _same(daemon, "/v1/attachments/sha256:abc", auth)[0] == 400
    status, headers, _ = _same(daemon, f"/v1/attachments/{ref}", auth, "X-Request-Id: mine-1")
    assert headers["x-request-id"] == "mine-1"
    lines = daemon.access("/v1/attachments/{ref}", 16)
    assert {(x["status"], x.get("tenant")) for x in lines} >= {(200, "alice"), (304, "alice"), (401, None)}


def test_pipelined_requests_are_answered_in_order_across_the_hand_over(start_daemon: Any) -> None:
    daemon = start_daemon()
    first, second = png(20, 20), png(30, 30)
    a, b = _admit(daemon, "alice", first), _admit(daemon, "alice", second)
    auth = f"Authorization: Bearer {TOKENS['alice']}"
    admission = json.dumps({"source": "user", "images": [{"data": base64.b64encode(png(40, 40)).decode()}]})
    post = (
        f"POST /v1/attachments HTTP/1.1\r\nHost: t\r\n{auth}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(admission)}\r\n\r\n{admission}"
    ).encode()
    answers = _exchange(
        daemon,
        _get(f"/v1/attachments/{a}", auth)
        + _get(f"/v1/attachments/{b}", auth)
        + post
        + _get(f"/v1/attachments/{a}", auth)
        + _get(f"/v1/attachments/{b}", auth, "Connection: close"),
        5,
    )
    assert [s for s, _, _ in answers] == [200, 200, 201, 200, 200]
    assert [answers[i][2] for i in (0, 1, 3, 4)] == [first, second, first, second]
    assert json.loads(answers[2][2])["attachments"][0]["width"] == 40


@MAPPED
def test_damaged_bytes_are_never_served_from_a_remembered_row(start_daemon: Any, mapped: bool) -> None:
    daemon = start_daemon(http={"mapped_reads": mapped})
    image = png(50, 50)
    ref = _admit(daemon, "alice", image)
    auth = f"Authorization: Bearer {TOKENS['alice']}"
    assert _exchange(daemon, _get(f"/v1/attachments/{ref}", auth) * 2, 2)[1][2] == image
    path = _path(daemon, ref)
    damaged = bytearray(path.read_bytes())
    damaged[-20] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(damaged))
    status, _, body = _exchange(daemon, _get(f"/v1/attachments/{ref}", auth), 1)[0]
    assert status == 500
    assert json.loads(body)["error"]["code"] == "ATTACHMENT_CORRUPT"
    daemon.assert_alice_is_served()


def _path(daemon: Daemon, ref: str) -> Path:
    algorithm, digest = ref.split(":")
    return Path(daemon.data_dir) / "objects" / algorithm / digest[:2] / digest[2:4] / digest


@contextlib.contextmanager
def _on_unix_socket(daemon: Daemon, path: Path) -> Iterator[None]:
    """Another `serve` of the same store, on a Unix socket: a stream socket's send buffer does not grow as
    TCP's does on loopback, so what a slow client leaves unread stays with the daemon."""
    again = launch(
        serve(daemon.config, "--unix-socket", str(path)), daemon.log, "http://localhost", unix_socket=path
    )
    try:
        again.wait_ready("/healthz")
        yield
    finally:
        again.stop()


@MAPPED
def test_a_slow_client_gets_the_bytes_hashed_though_the_file_changes_while_they_are_sent(
    start_daemon: Any, tmp_path: Path, mapped: bool
) -> None:
    daemon = start_daemon(http={"mapped_reads": mapped})
    image = png(540, 540, seed=3)  # noise: about 870 KB, read on the loop (resident.RESIDENT_MAX)
    ref = _admit(daemon, "alice", image)
    read = _get(f"/v1/attachments/{ref}", f"Authorization: Bearer {TOKENS['alice']}")
    with (
        _on_unix_socket(daemon, tmp_path / "s"),
        socket.socket(socket.AF_UNIX) as s,
    ):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(60)
        s.connect(str(tmp_path / "s"))
        s.sendall(read)
        stream = s.makefile("rb")
        assert stream.readline().split()[1] == b"200"
        while stream.readline() not in (b"\r\n", b""):
            pass
        first = stream.read(1000)
        # Damage the file in place while most of the answer is still to be sent. The open waits while a read
        # holds a lease on the file: a few microseconds here, the time the read takes to let go.
        path = _path(daemon, ref)
        path.chmod(0o644)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"\0" * (len(image) - 2000), 1000)
        finally:
            os.close(fd)
        rest = stream.read(len(image) - 1000)
    assert first + rest == image
    status, _, body = _exchange(daemon, read, 1)[0]
    assert status == 500
    assert json.loads(body)["error"]["code"] == "ATTACHMENT_CORRUPT"


def test_an_idle_connection_and_an_unfinished_head_are_closed_after_the_keep_alive(start_daemon: Any) -> None:
    daemon = start_daemon(http={"keepalive_timeout": "1s"})
    ref = _admit(daemon, "alice", png(10, 10))
    host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
    auth = f"Authorization: Bearer {TOKENS['alice']}"
    with (
        socket.create_connection((host, int(port)), timeout=30) as idle,
        socket.create_connection((host, int(port)), timeout=30) as unfinished,
    ):
        idle.sendall(_get(f"/v1/attachments/{ref}", auth))
        unfinished.sendall(_get(f"/v1/attachments/{ref}", auth)[:-2])  # no empty line: the head never ends
        stream = idle.makefile("rb")
        assert stream.readline().split()[1] == b"200"
        while stream.readline() not in (b"\r\n", b""):
            pass
        stream.read(len(png(10, 10)))
        assert stream.read() == b""  # closed by the daemon, not by the 30 s timeout of this socket
        assert unfinished.recv(1) == b""
