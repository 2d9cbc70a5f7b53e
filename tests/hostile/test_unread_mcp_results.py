"""MCP results whose answers nobody reads: `POST /v1/mcp/results` echoes the result it is given, so a client
that posts large texts and never reads holds an answer as large in the daemon per connection. Those answers
count against the tenant's `[http] max_sending_bytes` as reads and renders do: past it the next result is `503
SERVER_BUSY` (before any of its images is admitted), the daemon's memory stays within the budget, and another
tenant is served meanwhile."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

from tests.hostile.conftest import Daemon
from tests.hostile.test_unread_answers import answer_head, answered, metric, unread
from tests.support.images import png
from tests.support.waiting import until

MiB = 1 << 20
BUDGET = 16 * MiB  # [http] max_sending_bytes
TEXT = 6 * MiB  # each result's text: larger than the kernel's socket buffers take (4 MiB), so it waits here
POSTS = 20
PATIENT = {"http": {"write_timeout": "60s", "max_sending_bytes": BUDGET}}
SLACK = 40 * MiB  # the interpreter's own growth while it serves: buffers, allocator arenas, the index
RESULTS = "/v1/mcp/results"


def result(seed: int, *images: bytes) -> bytes:
    """A CallToolResult with `TEXT` bytes of text (different for each seed) and these images."""
    content: list[dict[str, Any]] = [{"type": "text", "text": f"{seed:08d}" * (TEXT // 8)}]
    content += [
        {"type": "image", "data": base64.b64encode(i).decode(), "mimeType": "image/png"} for i in images
    ]
    return json.dumps({"content": content}).encode()


def post(daemon: Daemon, body: bytes) -> bytes:
    token = daemon.headers("mallory")["Authorization"]
    head = (
        f"POST {RESULTS} HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def test_unread_results_hold_at_most_the_budget(start_daemon: Any) -> None:
    daemon = start_daemon(**PATIENT)
    before = daemon.rss()
    done = answered(daemon, RESULTS)
    heads = []
    with contextlib.ExitStack() as stack:
        # One at a time, each answered before the next is sent: what the daemon holds is what the answers
        # hold, not bodies that happen to be read at the same time. Every connection stays open, unread.
        for seed in range(POSTS):
            (s,) = stack.enter_context(unread(daemon, [post(daemon, result(seed))]))
            until(lambda n=seed: answered(daemon, RESULTS) == done + n + 1, f"result {seed} to be answered")
            heads.append(answer_head(s))
        statuses = [status for status, _, _ in heads]
        # alice has her own budget, and is served while mallory's answers wait.
        daemon.assert_alice_is_served()
        status, answer = daemon.post("alice", RESULTS, json.dumps({"content": [{"type": "text"}]}).encode())
        assert status == 200, answer

    held = statuses.count(200)
    # The budget takes two answers of 6 MiB, a third only if it came when nothing else was waiting.
    assert 1 <= held <= BUDGET // TEXT + 1, statuses
    assert held + statuses.count(503) == POSTS, statuses
    busy = [(headers, rest) for status, headers, rest in heads if status == 503]
    headers, rest = busy[0]
    assert headers["retry-after"] == "1"
    assert json.loads(rest[: int(headers["content-length"])])["error"]["code"] == "SERVER_BUSY"
    # Besides the budget: the one answer a tenant may get past it, and the body, text and answer of the one
    # result being handled.
    assert daemon.peak_rss() - before <= BUDGET + 4 * TEXT + SLACK
    # Their connections closed, the answers are let go of, and mallory is served again.
    until(lambda: metric(daemon, "attachstore_sending_bytes") == 0, "the answers to be let go of")
    status, answer = daemon.post("mallory", RESULTS, result(POSTS))
    assert status == 200, answer


def test_a_result_that_would_not_fit_admits_nothing(start_daemon: Any) -> None:
    daemon = start_daemon(**PATIENT)
    done = answered(daemon, RESULTS)
    # Three unread texts: the budget is full whichever of them it took.
    with unread(daemon, [post(daemon, result(seed)) for seed in range(3)]) as sockets:
        until(lambda: answered(daemon, RESULTS) == done + 3, "the three results answered")
        assert metric(daemon, "attachstore_sending_bytes") > BUDGET - TEXT
        admitted = metric(daemon, "attachstore_images_admitted_total")
        image = png(40, 40, seed=7)
        with unread(daemon, [post(daemon, result(3, image))]) as (s,):
            until(lambda: answered(daemon, RESULTS) == done + 4, "the result with an image answered")
            status, _, _ = answer_head(s)
        assert status == 503
        # Refused before its image was admitted.
        assert metric(daemon, "attachstore_images_admitted_total") == admitted
        assert len(sockets) == 3
