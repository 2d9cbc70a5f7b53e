"""Multipart admissions shaped to cost the daemon more than its caps allow: empty parts by the tens of
thousands (under the body cap or far past it), and part headers that aiohttp cannot decode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.hostile.conftest import Daemon

BOUNDARY = "hostile-boundary"
FORM = f"multipart/form-data; boundary={BOUNDARY}"
IMAGES = 4  # [limits] max_batch_images
CAP = 8_000_000  # [http] max_body_bytes
PARTS = IMAGES + 3  # the most parts an admission has: its images and the text fields source, route, session


def part(headers: str, content: bytes = b"") -> bytes:
    return f"--{BOUNDARY}\r\n{headers}\r\n\r\n".encode() + content + b"\r\n"


def empty_parts(count: int, filename: str) -> Iterator[bytes]:
    """`source`, then `count` empty file parts, sent in pieces of about 64 KB."""
    yield part('Content-Disposition: form-data; name="source"', b"user")
    one = part(f'Content-Disposition: form-data; name="f"; filename="{filename}"')
    per_piece = max(1, 65536 // len(one))
    for _ in range(count // per_piece):
        yield one * per_piece
    yield f"--{BOUNDARY}--\r\n".encode()


def the_attack_stopped_early(daemon: Daemon, before: int) -> None:
    # Nothing of the attack is kept: what one admission under these caps may hold (a body and its decoding).
    assert daemon.peak_rss() - before < 2 * CAP
    [line] = daemon.access("/v1/attachments")
    assert line["parts"] == PARTS + 1  # refused at the first part no admission has
    assert line["body_bytes"] < 64 * 1024
    daemon.assert_alice_is_served()


def test_empty_parts_past_the_cap_are_refused_without_reading_them(start_daemon: Any) -> None:
    daemon = start_daemon(limits={"max_batch_images": IMAGES}, http={"max_body_bytes": CAP})
    before = daemon.peak_rss()
    # 20,000 empty file parts, each with a 4,000-character filename: 82 MB, ten times the cap, undeclared.
    status, answer = daemon.post("mallory", "/v1/attachments", empty_parts(20_000, "n" * 4000), FORM)
    assert (status, answer["error"]["code"]) == (422, "TOO_MANY_IMAGES")
    the_attack_stopped_early(daemon, before)


def test_empty_parts_under_the_cap_are_refused_at_the_first_part_too_many(start_daemon: Any) -> None:
    daemon = start_daemon(limits={"max_batch_images": IMAGES}, http={"max_body_bytes": CAP})
    before = daemon.peak_rss()
    # 100,000 empty file parts in 7.5 MB, under the cap: each one cost the event loop some 120 µs.
    body = b"".join(empty_parts(100_000, "a"))
    assert len(body) < CAP
    status, answer = daemon.post("mallory", "/v1/attachments", body, FORM)
    assert (status, answer["error"]["code"]) == (422, "TOO_MANY_IMAGES")
    the_attack_stopped_early(daemon, before)


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


def test_a_json_body_of_a_million_empty_images_is_refused_as_it_is_decoded(start_daemon: Any) -> None:
    """Under the body cap, 45 MB of `{"data": ""}` is two million images: each a struct, and for a tool's
    batch a diagnostic in the answer. Past 1,024 the body is refused while it is decoded."""
    daemon = start_daemon()
    images = b",".join([b'{"data":""}'] * 2_000_000)
    body = b'{"source":"tool","route":"gpt-4o","images":[' + images + b"]}"
    before = daemon.rss()
    status, answer = daemon.post("mallory", "/v1/attachments", body)
    assert (status, answer["error"]["code"]) == (400, "INVALID_REQUEST")
    assert "$.images" in answer["error"]["message"]
    assert daemon.rss() - before < 3 * len(body)  # the body and its decoding, no struct per image
    daemon.assert_alice_is_served()
