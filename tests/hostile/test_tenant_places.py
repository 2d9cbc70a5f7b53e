"""One tenant holding admission places with bodies it never finishes sending: it gets at most its share of
the places (three quarters of `max_concurrent` with several tenants), and another tenant is still admitted."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

from tests.hostile.conftest import TOKENS
from tests.support.images import png
from tests.support.waiting import until


def trickle(url: str, tenant: str) -> socket.socket:
    """An admission whose chunked body has begun and never ends: its place stays taken until read_timeout."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/attachments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {TOKENS[tenant]}\r\n".encode()
        + b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"sou\r\n'
    )
    return sock


def small_admission() -> bytes:
    image = base64.b64encode(png(8, 8)).decode()
    return json.dumps({"source": "user", "images": [{"data": image}]}).encode()


def test_one_tenant_cannot_take_every_admission_place(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"max_concurrent": 4}, http={"read_timeout": "60s"})
    held = [trickle(daemon.url, "mallory") for _ in range(3)]
    try:
        # Once the three bodies hold their places, mallory's next admission is refused as hers alone.
        answers = []

        def refused() -> bool:
            answers.append(daemon.post("mallory", "/v1/attachments", small_admission()))
            return answers[-1][0] == 503

        until(refused, "mallory's next admission to be refused")
        status, answer = answers[-1]
        assert (status, answer["error"]["code"]) == (503, "SERVER_BUSY")
        assert "admissions of this tenant are in progress" in answer["error"]["message"]
        # The fourth place stays alice's.
        status, answer = daemon.post("alice", "/v1/attachments", small_admission())
        assert status == 201, answer
        daemon.assert_alice_is_served()
    finally:
        for sock in held:
            sock.close()
