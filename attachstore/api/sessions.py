"""The session endpoints (PUT/GET/DELETE /v1/sessions/{id}, route, fork, holds)."""

from __future__ import annotations

import msgspec
from aiohttp import web

from ..index import SessionRow
from ..text import rfc3339
from . import wire
from .common import STORE, json_response, read_json, tenant_of

create_decoder = msgspec.json.Decoder(wire.SessionCreate)
route_decoder = msgspec.json.Decoder(wire.RouteSwitch)
fork_decoder = msgspec.json.Decoder(wire.Fork)
holds_decoder = msgspec.json.Decoder(wire.Holds)


def _key(request: web.Request) -> tuple[str, str]:
    return tenant_of(request), request.match_info["id"]


def session_answer(s: SessionRow, status: int = 200) -> web.Response:
    expires = None if s.expires_at is None else rfc3339(s.expires_at)
    shown = wire.Session(
        s.id, s.route, list(s.holds), rfc3339(s.created_at), s.ttl, rfc3339(s.used_at), expires
    )
    return json_response(shown, status)


async def create(request: web.Request) -> web.Response:
    body = await read_json(request, create_decoder)
    session, created = await request.app[STORE].sessions.create(_key(request), body.route, body.ttl)
    return session_answer(session, 201 if created else 200)


async def show(request: web.Request) -> web.Response:
    return session_answer(await request.app[STORE].sessions.get(_key(request)))


async def switch_route(request: web.Request) -> web.Response:
    body = await read_json(request, route_decoder)
    return session_answer(await request.app[STORE].sessions.switch_route(_key(request), body.route))


async def fork(request: web.Request) -> web.Response:
    body = await read_json(request, fork_decoder)
    return session_answer(await request.app[STORE].sessions.fork(_key(request), body.session), 201)


async def hold(request: web.Request) -> web.Response:
    body = await read_json(request, holds_decoder)
    return session_answer(await request.app[STORE].sessions.hold(_key(request), body.refs))


async def delete(request: web.Request) -> web.Response:
    released = await request.app[STORE].sessions.delete(_key(request))
    return json_response(wire.Released(request.match_info["id"], released))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_put("/v1/sessions/{id}", create)
    router.add_get("/v1/sessions/{id}", show)
    router.add_delete("/v1/sessions/{id}", delete)
    router.add_post("/v1/sessions/{id}/route", switch_route)
    router.add_post("/v1/sessions/{id}/fork", fork)
    router.add_post("/v1/sessions/{id}/holds", hold)
