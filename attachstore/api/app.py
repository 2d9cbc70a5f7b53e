"""The aiohttp application: one factory for the server, the tests and the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from ..config import Config
from ..errors import AttachstoreError, ServerBusy, StorageUnavailable
from ..service import Store
from ..storage import FileOps
from . import attachments, listings, mcp, observe, openapi, render, routes, sessions, ui, wire
from .common import CONFIG, STORE, TENANT, TOKENS, error_response, json_response, tenant_for
from .drain import DRAIN, Drain, close_when_stopping, refuse_when_stopping
from .headers import add_security_headers
from .heads import MAX_HEADERS
from .lanes import LANES, Lanes
from .observe import ERROR_CODE
from .sending import ANSWERING, BUDGET, Answering, Budget, Stalls

log = logging.getLogger("attachstore.api")

FILE_OPS = web.AppKey("file_ops", FileOps)
OPENAPI = web.AppKey("openapi", bytes)  # the encoded description, made once
REPLACE_POLICY = web.AppKey("replace_policy", bool)  # serve --replace-policy
_HTTP_CODES = {
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as the JSON envelope of SPEC section 9; no stack trace reaches a client."""
    try:
        return await handler(request)
    except AttachstoreError as e:
        request[ERROR_CODE] = e.code
        if e.status >= 500:
            log.error("%s %s: %s %s", request.method, request.path, e.code, e.message)
        return error_response(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "INVALID_REQUEST" if e.status < 500 else "INTERNAL")
        request[ERROR_CODE] = code
        answer = error_response(AttachstoreError(e.reason, code=code))
        answer.set_status(e.status)
        if "Allow" in e.headers:
            answer.headers["Allow"] = e.headers["Allow"]
        return answer
    except Exception as e:
        if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
            # Out of descriptors, in this process or the system: a moment's trouble, answered as such.
            log.warning("%s %s: out of descriptors: %s", request.method, request.path, e)
            busy = ServerBusy("the daemon has no descriptor left for this request", hint="retry later")
            request[ERROR_CODE] = busy.code
            return error_response(busy)
        log.exception("unhandled error in %s %s", request.method, request.path)
        request[ERROR_CODE] = AttachstoreError.code
        return error_response(AttachstoreError("internal error"))


# Liveness, readiness and metrics say nothing about anyone's data.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if ui.under_ui(request.path):  # the operator page authorizes by its cookie (api/ui/auth.py)
        return await handler(request)
    tokens = request.app[TOKENS]
    if not tokens or request.path in OPEN_PATHS:
        request[TENANT] = ""
        return await handler(request)
    request[TENANT] = tenant_for(tokens, request.headers.get("Authorization", ""))
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        await request.app[STORE].ready()
    except Exception as e:  # any failure here means "not ready", which is the answer, not an error
        log.warning("not ready: %s", e)
        return error_response(StorageUnavailable("the store is not ready"))
    return json_response({"status": "ready"})


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    store = await Store.open(
        app[CONFIG], app.get(FILE_OPS), policy="serve", replace_policy=app.get(REPLACE_POLICY, False)
    )
    app[STORE] = store
    app[BUDGET] = Budget(app[CONFIG].http.max_sending_bytes, store.metrics.sending_bytes)
    try:
        yield
    finally:
        await store.close()


async def _watch_writes(app: web.Application) -> AsyncIterator[None]:
    stalls = Stalls(app[CONFIG].http.write_timeout_seconds, app[STORE].metrics.write_stalls)
    lanes = app.get(LANES)
    watching = asyncio.create_task(stalls.run(app[ANSWERING], *([lanes] if lanes is not None else [])))
    try:
        yield
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching


def make_app(
    config: Config, *, file_ops: FileOps | None = None, replace_policy: bool = False
) -> web.Application:
    """Its store takes the configuration's policy as the store's, or refuses to open while another node
    enforces another, unless `replace_policy` (docs/configuration.md)."""
    app = web.Application(
        client_max_size=config.http.body_cap(config.limits),
        middlewares=[observe.access, error_envelope, refuse_when_stopping, authenticate],
        handler_args={
            "keepalive_timeout": config.http.keepalive_timeout_seconds,
            "max_line_size": config.http.max_header_bytes,
            "max_field_size": config.http.max_header_bytes,
            "max_headers": MAX_HEADERS,
        },
    )
    app[CONFIG] = config
    app[TOKENS] = {t.token_sha256: t.name for t in config.tenants}
    app[REPLACE_POLICY] = replace_policy
    app[DRAIN] = Drain()
    app[ANSWERING] = Answering()
    app.on_response_prepare.append(add_security_headers)
    app.on_response_prepare.append(close_when_stopping)
    app.on_response_prepare.append(app[ANSWERING].prepared)
    if file_ops is not None:
        app[FILE_OPS] = file_ops
    app.cleanup_ctx.append(_store_ctx)
    if config.http.read_lane:  # plain reads of an object's bytes answered in front of aiohttp (api/lane.py)
        lanes = app[LANES] = Lanes(config, app[TOKENS])
        app.cleanup_ctx.append(lanes.running)
        app[DRAIN].also(lanes.shutdown)
    app.cleanup_ctx.append(_watch_writes)
    attachments.add_routes(app.router)
    sessions.add_routes(app.router)
    listings.add_routes(app.router)  # issue 38: the listings and the totals
    routes.add_routes(app.router)
    render.add_routes(app.router)
    mcp.add_routes(app.router)
    ui.add_routes(app.router)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", observe.metrics)
    app[OPENAPI] = wire.encoder.encode(openapi.document())
    app.router.add_get("/openapi.json", openapi_json)
    return app
