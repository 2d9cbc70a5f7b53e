"""GET /v1/routes (every declaration: the configured routes, then the catalog's entries) and
GET /v1/routes/{model} (how one model id resolves)."""

from __future__ import annotations

from aiohttp import web

from ..errors import InvalidRequest
from ..service import Declaration, RouteTable
from . import wire
from .common import STORE, json_response

MAX_MODEL = 256  # as a route id anywhere else (wire.RouteId)


def route_info(d: Declaration) -> wire.RouteInfo:
    r = d.route
    return wire.RouteInfo(
        id=d.entry,
        declared_by=d.by,
        input_modalities=list(r.input_modalities),
        provider=r.provider,
        max_request_image_bytes=r.max_request_image_bytes,
        max_request_images=r.max_request_images,
        max_request_side=r.max_request_side,
        max_request_pixels=r.max_request_pixels,
        max_request_bytes=r.max_request_bytes,
        source=d.source,
        replaces=d.replaces,
    )


def listing(routes: RouteTable, fingerprint: str) -> wire.Routes:
    return wire.Routes(routes.catalog.version, fingerprint, [route_info(d) for d in routes.listing()])


def resolution(routes: RouteTable, model: str) -> wire.RouteResolution:
    found = routes.declaration(model)
    if found is None:
        return wire.RouteResolution(model, None, None, None)
    return wire.RouteResolution(model, found.accepts_images, route_info(found), found.matched)


async def routes(request: web.Request) -> web.Response:
    store = request.app[STORE]
    return json_response(listing(store.routes, store.policy.fingerprint if store.policy else ""))


async def resolve(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    if len(model) > MAX_MODEL:
        raise InvalidRequest(f"a model id is at most {MAX_MODEL} characters")
    return json_response(resolution(request.app[STORE].routes, model))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/v1/routes", routes)
    # Model ids may hold slashes ("openai/gpt-4o"): the rest of the path is the id.
    router.add_get("/v1/routes/{model:.+}", resolve)
