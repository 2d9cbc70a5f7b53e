"""Descriptors: each image of an admission in progress holds one (its bytes in shared memory, a memfd), so a
multipart admission of many parts, or many admissions at once, could take every descriptor the daemon may
open (a 1024 limit is common) and make everything else fail. The uploads in progress hold at most a quarter
of the process's RLIMIT_NOFILE together: past it an admission is `503 SERVER_BUSY`, with no traceback, and
the daemon goes on serving."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.support.images import png

from .conftest import Daemon

NOFILE = 256  # the daemon's RLIMIT_NOFILE in these tests
PARTS = 300  # images in one multipart body: more than the daemon may open


@pytest.fixture
def daemon(start_daemon: Any) -> Daemon:
    """A daemon whose open-file limit is NOFILE, that takes up to PARTS images in one admission."""
    daemon: Daemon = start_daemon(limits={"max_batch_images": PARTS}, nofile=NOFILE)
    return daemon


def multipart(images: list[bytes]) -> tuple[bytes, str]:
    boundary = "attachstore-descriptors"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="source"\r\n\r\nuser\r\n'.encode()]
    for n, image in enumerate(images):
        parts.append(
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{n}.png"\r\n'
                "Content-Type: image/png\r\n\r\n"
            ).encode()
            + image
            + b"\r\n"
        )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def test_an_admission_of_more_parts_than_descriptors_is_busy_and_the_daemon_serves_on(daemon: Daemon) -> None:
    body, content_type = multipart([png(2, 2, seed=n) for n in range(PARTS)])
    status, answer = daemon.post("mallory", "/v1/attachments", body, content_type)
    assert status == 503, (status, answer)
    assert answer["error"]["code"] == "SERVER_BUSY", answer
    assert "RLIMIT_NOFILE" in answer["error"]["message"], answer
    log = daemon.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    # Its descriptors are let go of: the same admission, within the bound, is stored.
    body, content_type = multipart([png(2, 2, seed=n) for n in range(NOFILE // 8)])
    status, answer = daemon.post("mallory", "/v1/attachments", body, content_type)
    assert status == 201, (status, answer)
    assert len(answer["attachments"]) == NOFILE // 8
    # And as JSON, whose images are decoded into shared memory too.
    images = [{"data": base64.b64encode(png(2, 2, seed=n)).decode()} for n in range(PARTS)]
    status, answer = daemon.post(
        "mallory", "/v1/attachments", json.dumps({"source": "user", "images": images}).encode()
    )
    assert status == 503, (status, answer)
    assert answer["error"]["code"] == "SERVER_BUSY", answer
    body, content_type = multipart([png(2, 2, seed=n) for n in range(NOFILE // 8, NOFILE // 4)])
    status, answer = daemon.post("mallory", "/v1/attachments", body, content_type)
    assert status == 201, (status, answer)
    daemon.assert_alice_is_served()
    assert "Traceback" not in daemon.log.read_text()
