"""The read lane's state machine under pipelines against a real daemon: reading resumes after answers made on
the spot, a reset connection is answered no further, and what aiohttp refuses is aiohttp's to answer.

Every count here is of work done (answers received, access log lines, reads hashed), never of time."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import threading
import time
from typing import Any

import pytest

from tests.support.images import png
from tests.support.waiting import until

from .conftest import TOKENS, Daemon

ENDPOINT = "/v1/attachments/{ref}"
AUTH = f"Authorization: Bearer {TOKENS['alice']}"


def _answers(stream: Any) -> list[tuple[int, dict[str, str], bytes]]:
    """Every answer on the connection until the daemon closes it (or resets it)."""
    out = []
    try:
        while line := stream.readline():
            status = int(line.split()[1])
            headers: dict[str, str] = {}
            while (field := stream.readline()) not in (b"\r\n", b""):
                name, _, value = field.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            out.append((status, headers, stream.read(int(headers.get("content-length", "0")))))
    except ConnectionResetError:
        pass
    return out


def _read(ref: str, *extra: str) -> bytes:
    return (
        f"GET /v1/attachments/{ref} HTTP/1.1\r\nHost: t\r\n" + "".join(f"{e}\r\n" for e in extra) + "\r\n"
    ).encode()


def test_reading_resumes_after_more_than_64_kib_of_answers_made_on_the_spot(start_daemon: Any) -> None:
    # The first read waits for the index in a task, so that what arrives behind it passes the 64 KiB at which
    # the lane stops reading; every request behind it is answered on the spot (a 401), and the last one's
    # head is still partly in the kernel when they are. A lane that does not read again never answers it.
    daemon = start_daemon(http={"keepalive_timeout": "5s"})
    image = png(40, 40)
    ref = daemon.admit("alice", image)
    refused = _read(ref, "X-Pad: " + "p" * 900)  # no token: 401, on the spot
    count = 1100  # about 1.1 MB behind the first read
    requests = _read(ref, AUTH) + refused * count + _read(ref, AUTH, "Connection: close")
    with daemon.connect() as s:
        sender = threading.Thread(target=lambda: _send_all(s, requests))
        sender.start()
        answers = _answers(s.makefile("rb"))
        sender.join()
    statuses = [status for status, _, _ in answers]
    assert len(statuses) == count + 2, f"{len(statuses)} answers to {count + 2} requests"
    assert statuses == [200] + [401] * count + [200]
    assert answers[-1][2] == image


def _send_all(s: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the daemon closed the connection: the reader sees what it answered
        s.sendall(data)


def test_a_reset_connection_is_answered_no_further(start_daemon: Any) -> None:
    daemon = start_daemon()
    image = png(560, 560, seed=5)  # noise: about 940 KB, within what a read remembers (RESIDENT_MAX)
    ref = daemon.admit("alice", image)
    algorithm, digest = ref.split(":")
    path = daemon.data_dir / "objects" / algorithm / digest[:2] / digest[2:4] / digest
    # A read remembers a file changed at least 2 s before it (storage/resident.py, SETTLED_NS).
    until(lambda: time.time_ns() - path.stat().st_ctime_ns > 2_500_000_000, "the object's file to settle")
    with daemon.connect() as warm:  # read once: the next reads of this process are recalled, on the spot
        warm.sendall(_read(ref, AUTH, "Connection: close"))
        assert [a[0] for a in _answers(warm.makefile("rb"))] == [200]
    hashed = daemon.metric("attachstore_reads_total", result="ok")
    pipelined = 100
    gone = b"".join(_read(ref, AUTH, f"X-Request-Id: gone-{i:03d}") for i in range(pipelined))
    s = daemon.connect()
    # The daemon is stopped while the requests arrive and the client resets the connection: when it runs
    # again, every request is there to read, and the connection is already reset.
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        s.sendall(gone)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # a reset
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    until(lambda: _lines(daemon, "gone-"), "the first access line of the reset connection")
    # A request made afterwards is logged after everything the reset connection's reading led to.
    with daemon.connect() as after:
        after.sendall(_read(ref, AUTH, "X-Request-Id: after", "Connection: close"))
        assert [a[0] for a in _answers(after.makefile("rb"))] == [200]
    daemon.access(ENDPOINT, 1)
    until(lambda: _lines(daemon, "after"), "the access line of the request made after the reset")
    lines = _lines(daemon, "gone-")
    assert [line["status"] for line in lines] == [499], [(x["request_id"], x["status"]) for x in lines]
    # One read hashed for the reset connection (the one whose answer found it reset), and one afterwards.
    assert daemon.metric("attachstore_reads_total", result="ok") == hashed + 2


def _lines(daemon: Daemon, prefix: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in daemon.log.read_text().splitlines() if line.startswith("{")]
    return [x for x in lines if x.get("msg") == "request" and x.get("request_id", "").startswith(prefix)]


# The header fields of a read (besides its token) that aiohttp refuses: an HTTP/1.1 request without a Host,
# and two of any field RFC 9110 allows once (aiohttp's SINGLETON_HEADERS).
_REFUSED = {
    "no Host": ["User-Agent: u"],
    "two Hosts": ["Host: t", "Host: other"],
    "two Hosts, one empty": ["Host: t", "Host:"],
    **{
        f"two {name}s": ["Host: t", f"{name}: {value}", f"{name.lower()}: {value}"]
        for name, value in [
            ("User-Agent", "a"),
            ("Content-Type", "a/b"),
            ("ETag", '"a"'),
            ("Max-Forwards", "1"),
            ("Server", "a"),
            ("Content-Location", "/a"),
            ("Content-Range", "bytes 0-1/2"),
        ]
    },
}


@pytest.mark.parametrize("extra", _REFUSED.values(), ids=_REFUSED.keys())
def test_what_aiohttp_refuses_is_refused_as_aiohttp_refuses_it(start_daemon: Any, extra: list[str]) -> None:
    daemon = start_daemon()
    image = png(20, 20)
    ref = daemon.admit("alice", image)

    def answer(target: str) -> tuple[int, list[tuple[str, str]], bytes]:
        head = f"GET {target} HTTP/1.1\r\n" + "".join(f"{h}\r\n" for h in [AUTH, *extra]) + "\r\n"
        with daemon.connect() as s:
            s.sendall(head.encode())
            (status, headers, body), *_ = _answers(s.makefile("rb"))
        return status, [(k, v) for k, v in headers.items() if k not in ("date", "x-request-id")], body

    lane, aiohttp = answer(f"/v1/attachments/{ref}"), answer(f"/v1/attachments/{ref}?")
    assert aiohttp[0] == 400
    assert lane == aiohttp
