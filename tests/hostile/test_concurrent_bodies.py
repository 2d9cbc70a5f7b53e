"""Many large admission bodies at once: what the daemon holds must stay within what its caps allow, whatever
the number of connections, with the bodies' lengths declared or sent chunked."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from attachstore.config import Http, Limits
from tests.hostile.conftest import Daemon

CAP = Http().body_cap(Limits())  # the default admission body cap, 45,787,818 bytes
# What one admission in progress holds at most, per byte of its body: the body, the base64 text decoded from
# it, and the images decoded from that (docs/operations.md#memory).
PER_BODY_BYTE = 2.5
SLACK = 16 * 1024 * 1024  # the allocator's and the interpreter's own growth under load
CLIENTS = 8


def big_admission() -> bytes:
    """36 MB of JSON: eight base64 'images' of 3.4 MB of noise, each refused by the gate once decoded."""
    data = base64.b64encode(os.urandom(3_400_000)).decode()
    return json.dumps({"source": "user", "images": [{"data": data}] * 8}).encode()


def pieces(body: bytes) -> Iterator[bytes]:
    for at in range(0, len(body), 65536):
        yield body[at : at + 65536]


def send_at_once(daemon: Daemon, body: bytes, chunked: bool) -> list[tuple[int, Any]]:
    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(
            pool.map(
                lambda _: daemon.post("mallory", "/v1/attachments", pieces(body) if chunked else body),
                range(CLIENTS),
            )
        )


def only_gate_answers_or_busy(answers: list[tuple[int, Any]]) -> None:
    codes = [(status, answer["error"]["code"]) for status, answer in answers]
    assert set(codes) <= {(422, "UNSUPPORTED_IMAGE_TYPE"), (503, "SERVER_BUSY")}, codes
    assert (422, "UNSUPPORTED_IMAGE_TYPE") in codes  # someone got through


def test_one_place_holds_one_body(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"max_concurrent": 1})
    before = daemon.peak_rss()
    body = big_admission()
    size = len(body)
    answers = send_at_once(daemon, body, chunked=False)
    only_gate_answers_or_busy(answers)
    # Before: every body was read, and only then did seven of them find the one place taken (+350 MB).
    assert daemon.peak_rss() - before < PER_BODY_BYTE * size + SLACK
    daemon.assert_alice_is_served()


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_the_bodies_in_memory_are_bounded_by_the_budget(start_daemon: Any, chunked: bool) -> None:
    daemon = start_daemon()  # max_concurrent 64; max_buffered_bytes unset: twice the body cap
    before = daemon.peak_rss()
    answers = send_at_once(daemon, big_admission(), chunked)
    only_gate_answers_or_busy(answers)
    assert daemon.peak_rss() - before < PER_BODY_BYTE * 2 * CAP + SLACK
    daemon.assert_alice_is_served()
