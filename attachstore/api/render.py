"""POST /v1/render."""

from __future__ import annotations

import msgspec
from aiohttp import web

from ..render import RenderRequest, render
from .common import STORE, json_response, read_json, tenant_of

RENDER_BODY = 16 * 1024 * 1024  # a long conversation is text; the images are refs
render_decoder = msgspec.json.Decoder(RenderRequest)


async def handle(request: web.Request) -> web.Response:
    body = await read_json(request, render_decoder, RENDER_BODY, "send a shorter conversation")
    return json_response(await render(request.app[STORE], body, tenant=tenant_of(request)))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v1/render", handle)
