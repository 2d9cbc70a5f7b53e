"""Multipart admissions shaped to cost the daemon more than its caps allow: part headers that aiohttp
cannot decode."""

from __future__ import annotations

from typing import Any

BOUNDARY = "hostile-boundary"
FORM = f"multipart/form-data; boundary={BOUNDARY}"
IMAGES = 4  # [limits] max_batch_images
CAP = 8_000_000  # [http] max_body_bytes


def part(headers: str, content: bytes = b"") -> bytes:
    return f"--{BOUNDARY}\r\n{headers}\r\n\r\n".encode() + content + b"\r\n"


def test_an_unknown_transfer_encoding_is_a_bad_request(start_daemon: Any) -> None:
    daemon = start_daemon(limits={"max_batch_images": IMAGES}, http={"max_body_bytes": CAP})
    before = daemon.peak_rss()
    body = (
        part('Content-Disposition: form-data; name="source"\r\nContent-Transfer-Encoding: x-rot13', b"hfre")
        + f"--{BOUNDARY}--\r\n".encode()
    )
    status, answer = daemon.post("mallory", "/v1/attachments", body, FORM)
    assert (status, answer["error"]["code"]) == (400, "INVALID_REQUEST")
    assert "x-rot13" in answer["error"]["message"]
    assert "Traceback" not in daemon.log.read_text()
    assert daemon.peak_rss() - before < 2 * CAP
    daemon.assert_alice_is_served()
