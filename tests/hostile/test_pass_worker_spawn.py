"""A decode worker is started when an admission needs one (the first, or after one died) and that takes
descriptors: a socket pair, the child's pipes. A client who holds connections open until the daemon is a few
descriptors short of its RLIMIT_NOFILE makes that start fail: the admission is `503 SERVER_BUSY`, a moment's
trouble like any other lack of descriptors, never `500 INTERNAL`; a failed start keeps no descriptor (each
would be lost for good); and once the connections go, the next admission starts a worker and is stored."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
from typing import Any

import pytest

from tests.support.images import png
from tests.support.waiting import until

from .conftest import Daemon

NOFILE = 64  # the daemon's RLIMIT_NOFILE in this test


@pytest.fixture
def daemon(start_daemon: Any) -> Daemon:
    """A daemon whose open-file limit is NOFILE, with one decode worker, started on the first admission."""
    daemon: Daemon = start_daemon(nofile=NOFILE)
    return daemon


def _open(daemon: Daemon) -> int:
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def test_a_worker_that_cannot_start_for_want_of_descriptors_is_503(daemon: Daemon) -> None:
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(png(8, 8)).decode()}]}).encode()
    port = int(daemon.url.rsplit(":", 1)[1])
    before = _open(daemon)
    answers: dict[int, tuple[int, object]] = {}
    kept: dict[int, int] = {}  # descriptors the daemon still holds after a refused admission
    # From no descriptor spare up to a few more than a worker's start takes; the admission's own
    # connection takes one of them. Until a worker starts, every admission must start one.
    for spare in range(1, 12):
        held: list[socket.socket] = []
        try:
            while _open(daemon) < NOFILE - spare - 1:
                held.append(socket.create_connection(("127.0.0.1", port)))
            try:
                status, answer = daemon.post("mallory", "/v1/attachments", body)
            except ConnectionError:  # no descriptor even for the connection: the kernel's answer, not ours
                continue
        finally:
            for s in held:
                s.close()
        answers[spare] = (status, answer)
        until(lambda: _open(daemon) < NOFILE // 2, "the daemon to close the connections")
        if status == 201:
            break
        with contextlib.suppress(AssertionError):  # what is still held after a while is asserted below
            until(lambda: _open(daemon) <= before, "the daemon to let go of the descriptors", seconds=5)
        kept[spare] = _open(daemon) - before
    assert all(status in (201, 503) for status, _ in answers.values()), answers
    assert all(a["error"]["code"] == "SERVER_BUSY" for s, a in answers.values() if s == 503), answers  # type: ignore[index]
    assert all(n <= 0 for n in kept.values()), f"descriptors kept after each refusal: {kept}"
    assert "Traceback" not in daemon.log.read_text()
    status, answer = daemon.post("alice", "/v1/attachments", body)
    assert status == 201, answer
