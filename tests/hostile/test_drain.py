"""SIGTERM while an upload is on its way: the daemon stops taking new requests at once (a new connection is
refused, a new request on an open one is `503 SERVER_BUSY`), and finishes the admission it has started,
whose body keeps arriving, within the shutdown bound. The object is stored: a daemon started again on the
same data dir reads it. The test paces the sender itself: part of the body, the signal, the rest."""

from __future__ import annotations

import base64
import json
import signal
import socket
import urllib.request
from typing import Any

import pytest

from tests.support.daemon import free_port, launch
from tests.support.images import png
from tests.support.waiting import until

from .conftest import TOKENS, Daemon, serve


def _head(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status and headers of the next answer on `s`, and what came after them; status 0 if the
    connection was closed before any answer."""
    received = b""
    while b"\r\n\r\n" not in received:
        try:
            piece = s.recv(65536)
        except ConnectionResetError:
            piece = b""
        if not piece:
            return 0, {}, b""
        received += piece
    head, _, rest = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, rest


def _answer(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    status, headers, body = _head(s)
    while len(body) < int(headers.get("content-length", "0")):
        piece = s.recv(65536)
        if not piece:
            break
        body += piece
    return status, headers, body


def _stopping(daemon: Daemon) -> bool:
    return "stopping: finishing in-flight requests" in daemon.log.read_text()


def test_sigterm_finishes_an_upload_under_way_and_refuses_new_requests(start_daemon: Any) -> None:
    daemon = start_daemon()
    image = png(600, 600, seed=15)
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]}).encode()
    authorization = f"Authorization: Bearer {TOKENS['mallory']}\r\n"

    # A connection kept alive from before the signal, idle when it comes.
    idle = daemon.connect()
    idle.sendall(f"GET /v1/routes HTTP/1.1\r\nHost: t\r\n{authorization}\r\n".encode())
    assert _answer(idle)[0] == 200

    upload = daemon.connect()
    upload.sendall(
        (
            f"POST /v1/attachments HTTP/1.1\r\nHost: t\r\n{authorization}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
        ).encode()
    )
    # The daemon asks for the body once the request is in its handler's hands: it has begun.
    assert _head(upload)[0] == 100
    half = len(body) // 2
    upload.sendall(body[:half])

    daemon.proc.send_signal(signal.SIGTERM)
    until(lambda: _stopping(daemon), "the daemon to log that it is stopping")

    # Nothing new is taken: a new connection is refused, a new request on the idle one is refused.
    with pytest.raises(ConnectionRefusedError):
        daemon.connect().close()
    idle.sendall(f"GET /v1/routes HTTP/1.1\r\nHost: t\r\n{authorization}\r\n".encode())
    status, _, answer = _answer(idle)
    assert status in (0, 503), (status, answer)
    if status == 503:
        assert json.loads(answer)["error"]["code"] == "SERVER_BUSY", answer
    idle.close()

    # The upload under way is finished.
    upload.sendall(body[half:])
    status, headers, answer = _answer(upload)
    upload.close()
    assert status == 201, (status, answer[:500])
    assert headers.get("connection", "").lower() == "close", sorted(headers.items())
    ref = json.loads(answer)["attachments"][0]["ref"]
    assert daemon.proc.wait(timeout=60) == 0
    log = daemon.log.read_text()
    assert "Traceback" not in log, log[-3000:]

    # A daemon started again on the same data dir has the object.
    port = free_port()
    restarted = serve(daemon.config, "--listen", f"127.0.0.1:{port}", "--workers", "1")
    again = launch(restarted, daemon.log.parent / "restarted.log", f"http://127.0.0.1:{port}")
    try:
        again.wait_ready("/healthz")
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/attachments/{ref}", headers=daemon.headers("mallory")
        )
        with urllib.request.urlopen(request, timeout=60) as read:
            assert read.read() == image
    finally:
        again.stop()
