"""`attachstore mcp --url` against a daemon older than session lifetimes: that daemon refuses the unknown
field `ttl` when the session is created (400 INVALID_REQUEST, in its words). The session is then made
without a lifetime, as that daemon makes every session, and the log says so; any other refusal stands. The
daemon is played by a small app that answers as the older release did."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from attachstore.errors import AttachstoreError
from attachstore.mcp import Remote

# What a daemon before lifetimes answered to PUT /v1/sessions/{id} with a `ttl`.
OLD_REFUSAL = "invalid request at $: Object contains unknown field `ttl`"


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


def older_daemon(bodies: list[dict[str, Any]], refusal: str = OLD_REFUSAL) -> web.Application:
    async def get(request: web.Request) -> web.Response:
        return _error(404, "SESSION_NOT_FOUND", f"no session {request.match_info['id']!r}")

    async def put(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        if set(body) - {"route"}:
            return _error(400, "INVALID_REQUEST", refusal)
        answer = {"session": request.match_info["id"], "route": body.get("route"), "holds": []}
        return web.json_response(answer | {"created": "2026-12-01T00:00:00.000Z"}, status=201)

    app = web.Application()
    app.router.add_get("/v1/sessions/{id}", get)
    app.router.add_put("/v1/sessions/{id}", put)
    return app


async def test_the_session_is_made_without_a_lifetime(
    aiohttp_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bodies: list[dict[str, Any]] = []
    server: TestServer = await aiohttp_server(older_daemon(bodies))
    remote = Remote(str(server.make_url("/")), None, "mcp-0123456789abcdef", None, ttl=2592000)
    try:
        with caplog.at_level(logging.WARNING, logger="attachstore.mcp.backends"):
            await remote._create()
    finally:
        await remote.close()
    assert bodies == [{"route": None, "ttl": 2592000}, {"route": None}]
    assert "keeps no session lifetimes" in caplog.text
    assert "mcp-0123456789abcdef" in caplog.text


async def test_another_refusal_stands(aiohttp_server: Any) -> None:
    bodies: list[dict[str, Any]] = []
    server: TestServer = await aiohttp_server(older_daemon(bodies, "invalid request at $.route: too long"))
    remote = Remote(str(server.make_url("/")), None, "s", None, ttl=60)
    try:
        with pytest.raises(AttachstoreError) as caught:
            await remote._create()
    finally:
        await remote.close()
    assert caught.value.code == "INVALID_REQUEST"
    assert bodies == [{"route": None, "ttl": 60}]
