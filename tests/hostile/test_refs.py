"""Malformed refs on every route that takes one: in the path (a newline, an empty ref, escapes) and in JSON
bodies (render, holds). Each is 400 INVALID_ATTACHMENT_REF, never a generic 404 or a 400 of another code."""

from __future__ import annotations

import json
from typing import Any

REF = "sha256:" + "a" * 64
IN_PATHS = [
    f"{REF}%0A",  # a trailing newline: the route's pattern did not match it, a generic 404
    f"%0A{REF}",
    f"sha256:{'a' * 32}%0A{'a' * 32}",
    f"{REF}%0D%0A",
    f"{REF}%0A/meta",
]
IN_BODIES = [
    f"{REF}\n",
    "sha256:" + "a" * 200,  # longer than a ref may be: it was INVALID_REQUEST
    "x" * 10_000,
]


def is_invalid_ref(status: int, answer: Any, what: str) -> None:
    assert (status, answer["error"]["code"] if answer else None) == (400, "INVALID_ATTACHMENT_REF"), what


def test_malformed_refs_on_every_route(start_daemon: Any) -> None:
    daemon = start_daemon()
    before = daemon.peak_rss()
    status, _ = daemon.request("mallory", "PUT", "/v1/sessions/s", json.dumps({}).encode())
    assert status == 201
    paths = ["/v1/attachments/"]  # no ref at all
    paths += [f"/v1/attachments/{ref}{suffix}" for ref in IN_PATHS for suffix in ("", "/meta")]
    for path in paths:
        is_invalid_ref(*daemon.request("mallory", "GET", path), path)
        assert daemon.request("mallory", "HEAD", path)[0] == 400, path
    for ref in IN_BODIES:
        image = {"role": "user", "content": [{"type": "image", "ref": ref}]}
        render = {"provider": "anthropic", "route": "claude-sonnet-4", "messages": [image]}
        is_invalid_ref(*daemon.post("mallory", "/v1/render", json.dumps(render).encode()), f"render {ref!r}")
        holds = json.dumps({"refs": [ref]}).encode()
        is_invalid_ref(*daemon.post("mallory", "/v1/sessions/s/holds", holds), f"holds {ref!r}")
    assert daemon.peak_rss() - before < 16 * 1024 * 1024  # nothing was read, decoded or kept
    daemon.assert_alice_is_served()
