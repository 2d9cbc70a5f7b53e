"""Answers nobody reads: sockets with a tiny receive buffer ask for large reads and renders and never read
them. Each such connection is aborted once it has taken no byte for `write_timeout`; the answers that are
waiting for their clients hold at most `max_sending_bytes` per tenant (past it: 503 SERVER_BUSY at once); a
render's budget cannot be raised past the route's, so its answer is bounded; and alice is served meanwhile."""

from __future__ import annotations

import base64
import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.hostile.conftest import Daemon
from tests.support.images import png
from tests.support.waiting import until

MiB = 1 << 20
BUDGET = 16 * MiB  # [http] max_sending_bytes in these tests
ROUTE = {"input_modalities": ["text", "image"], "provider": "openai-chat"}
# The cut-off is on the daemon's clock: 2 s in the tests of it, whose clients never read; 60 s in the others,
# so that nothing is cut off before a test has seen what it counts, and a pause of this process (a loaded
# machine) while it reads an answer larger than the kernel's buffers is not taken for a stalled client. Where
# the cut-off is tested, this process reads no answer larger than those buffers.
CAPS = {"http": {"write_timeout": "2s", "max_sending_bytes": BUDGET}, 'routes."vision"': ROUTE}
PATIENT = {"http": {"write_timeout": "60s", "max_sending_bytes": BUDGET}, 'routes."vision"': ROUTE}
READ = "/v1/attachments/{ref}"
SLACK = 40 * MiB  # the interpreter's own growth while it serves: buffers, allocator arenas, the index


def big(seed: int) -> bytes:
    """Noise PNGs of 3.45 MB, just under the default max_image_bytes."""
    return png(1000, 1150, seed=seed)


# A read larger than what the kernel's socket buffers can take (net.ipv4.tcp_wmem's maximum is 4 MiB), so
# that its answer waits in the daemon, not in the kernel, whatever the kernel's tuning.
LARGE = {"limits": {"max_image_bytes": 6 * MiB}}


def larger() -> bytes:
    return png(1300, 1300)  # 5.07 MB


def call(
    daemon: Daemon, tenant: str, method: str, path: str, body: Any = None, most: int = 64 * MiB
) -> tuple[int, bytes]:
    """The status and body of one request; an answer longer than `most` fails the test unread."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {**daemon.headers(tenant), "Content-Type": "application/json"}
    request = urllib.request.Request(daemon.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            length = int(answer.headers["Content-Length"])
            assert length <= most, f"an answer of {length} bytes"
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def admit(daemon: Daemon, tenant: str, *images: bytes) -> list[str]:
    body = {"source": "user", "images": [{"data": base64.b64encode(i).decode()} for i in images]}
    status, answer = call(daemon, tenant, "POST", "/v1/attachments", body)
    assert status == 201, answer
    return [a["ref"] for a in json.loads(answer)["attachments"]]


def metric(daemon: Daemon, name: str, **labels: str) -> float:
    """The sum of a metric's samples that carry these labels (0 when there is none)."""
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        sample = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if sample and all(f'{k}="{v}"' in (sample.group(1) or "") for k, v in labels.items()):
            total += float(sample.group(2))
    return total


def answered(daemon: Daemon, endpoint: str) -> float:
    """Requests to `endpoint` whose handler has returned (its answer may still be on its way)."""
    return metric(daemon, "attachstore_request_duration_seconds_count", endpoint=endpoint)


@contextmanager
def unread(daemon: Daemon, requests: list[bytes]) -> Iterator[list[socket.socket]]:
    """One socket per request, with a 4 KB receive buffer, that sends the request and reads nothing."""
    host, port = daemon.url.removeprefix("http://").split(":")
    sockets = []
    try:
        for request in requests:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((host, int(port)))
            s.sendall(request)
            sockets.append(s)
        yield sockets
    finally:
        for s in sockets:
            s.close()


def http_request(daemon: Daemon, method: str, path: str, body: bytes = b"") -> bytes:
    token = daemon.headers("mallory")["Authorization"]
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def answer_head(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """What the socket received first: the status, the headers, and the start of the body (a socket whose
    connection was aborted may hold nothing)."""
    s.settimeout(60)  # a guard against a hang: a live connection's answer is on its way
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            piece = s.recv(65536)
            if not piece:
                break
            received += piece
    except (ConnectionResetError, TimeoutError):
        pass
    head, _, rest = received.partition(b"\r\n\r\n")
    if not head:
        return 0, {}, b""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, rest


def test_unread_reads_are_cut_off(start_daemon: Any) -> None:
    daemon = start_daemon(**CAPS, **LARGE)
    image = larger()
    (ref,) = admit(daemon, "mallory", image)
    before, stalls = daemon.rss(), metric(daemon, "attachstore_write_stalls_total")
    reads = answered(daemon, READ)

    with unread(daemon, [http_request(daemon, "GET", f"/v1/attachments/{ref}")] * 40) as sockets:
        until(lambda: answered(daemon, READ) == reads + 40, "the forty reads to be answered")
        until(lambda: metric(daemon, "attachstore_sending_bytes") == 0, "the answers to be dropped")
        daemon.assert_alice_is_served()
        statuses = [answer_head(s)[0] for s in sockets]

    held = statuses.count(200)
    assert held >= 1, statuses
    assert held + statuses.count(503) + statuses.count(0) == 40, statuses
    assert metric(daemon, "attachstore_write_stalls_total") - stalls >= held
    # What an answer cut off held is let go of: however many were held and cut off one after another, the
    # memory is that of the budget and the one answer a tenant may get past it at most, and the object read.
    assert daemon.peak_rss() - before <= BUDGET + 2 * len(image) + SLACK


def test_unread_reads_hold_at_most_the_budget(start_daemon: Any) -> None:
    daemon = start_daemon(**PATIENT, **LARGE)
    image = larger()
    (ref,) = admit(daemon, "mallory", image)
    assert admit(daemon, "alice", image) == [ref]  # the same bytes: one object, seen by both
    assert call(daemon, "mallory", "GET", f"/v1/attachments/{ref}") == (200, image)
    before = daemon.rss()
    reads = answered(daemon, READ)

    with unread(daemon, [http_request(daemon, "GET", f"/v1/attachments/{ref}")] * 40) as sockets:
        until(lambda: answered(daemon, READ) == reads + 40, "the forty reads to be answered")
        statuses = [answer_head(s)[0] for s in sockets]
        # alice has her own budget: she is served while mallory's answers wait.
        assert call(daemon, "alice", "GET", f"/v1/attachments/{ref}") == (200, image)

    held = statuses.count(200)
    # The budget takes three 5 MB answers, a fourth only if it came when nothing else was waiting.
    assert 1 <= held <= BUDGET // len(image) + 1, statuses
    assert held + statuses.count(503) == 40, statuses
    # A read is claimed before its bytes are read (docs/operations.md#memory): the reads refused read
    # nothing, so besides the budget there is only the one answer a tenant may get past it, and alice's.
    assert daemon.peak_rss() - before <= BUDGET + 2 * len(image) + SLACK
    # Their connections closed, the answers are let go of, and mallory is served again.
    until(lambda: metric(daemon, "attachstore_sending_bytes") == 0, "the answers to be let go of")
    assert call(daemon, "mallory", "GET", f"/v1/attachments/{ref}") == (200, image)


def test_a_busy_answer_names_its_code(start_daemon: Any) -> None:
    daemon = start_daemon(**PATIENT, **LARGE)
    image = larger()
    (ref,) = admit(daemon, "mallory", image)
    with unread(daemon, [http_request(daemon, "GET", f"/v1/attachments/{ref}")] * 8) as sockets:
        heads = [answer_head(s) for s in sockets]
    busy = [(headers, rest) for status, headers, rest in heads if status == 503]
    assert busy, [h[0] for h in heads]
    headers, rest = busy[0]
    assert headers["retry-after"] == "1"
    assert json.loads(rest[: int(headers["content-length"])])["error"]["code"] == "SERVER_BUSY"


def test_unread_renders_are_clamped_to_the_route_and_bounded(start_daemon: Any) -> None:
    daemon = start_daemon(**CAPS)
    images = [big(seed) for seed in range(10)]
    refs = admit(daemon, "mallory", *images[:5]) + admit(daemon, "mallory", *images[5:])
    (alices,) = admit(daemon, "alice", png(16, 16))  # an answer the kernel takes whole: never cut off
    blocks = [{"type": "image", "ref": ref} for ref in refs]
    body = {"route": "vision", "max_image_bytes": 10**12, "messages": [{"role": "user", "content": blocks}]}
    request = http_request(daemon, "POST", "/v1/render", json.dumps(body).encode())
    before, stalls = daemon.rss(), metric(daemon, "attachstore_write_stalls_total")

    with unread(daemon, [request] * 5) as sockets:
        until(lambda: answered(daemon, "/v1/render") == 5, "the five renders to be answered")
        until(lambda: metric(daemon, "attachstore_sending_bytes") == 0, "the answers to be dropped")
        heads = [answer_head(s) for s in sockets]
        mine = {
            "route": "vision",
            "messages": [{"role": "user", "content": [{"type": "image", "ref": alices}]}],
        }
        status, answer = call(daemon, "alice", "POST", "/v1/render", mine)
        assert status == 200
        assert json.loads(answer)["summary"]["included"] == 1

    held = [headers for status, headers, _ in heads if status == 200]
    assert held, [h[0] for h in heads]
    # The route sets no budget: 20 MiB of base64 at most, four of the ten images, whatever was asked.
    for headers in held:
        assert int(headers["content-length"]) <= 20 * MiB + 65536
    assert metric(daemon, "attachstore_write_stalls_total") - stalls >= len(held)
    assert daemon.peak_rss() - before <= BUDGET + 4 * len(images[0]) + SLACK


def test_a_repeated_ref_cannot_inflate_the_answer(start_daemon: Any) -> None:
    daemon = start_daemon(**PATIENT)
    image = big(0)
    (ref,) = admit(daemon, "mallory", image)
    blocks = [{"type": "image", "ref": ref}] * 200  # about 20 KB of request
    body = {"route": "vision", "max_image_bytes": 10**12, "messages": [{"role": "user", "content": blocks}]}
    assert len(json.dumps(body)) < 25_000
    before = daemon.rss()
    status, answer = call(daemon, "mallory", "POST", "/v1/render", body, most=20 * MiB + 65536)
    assert status == 200
    summary = json.loads(answer)["summary"]
    assert (summary["included"], summary["omitted"]) == (4, 196)
    assert daemon.peak_rss() - before <= 2 * len(answer) + SLACK
    status, _ = call(daemon, "alice", "GET", "/healthz")
    assert status == 200
