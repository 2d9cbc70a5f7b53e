"""The aiohttp application: one factory for the server, the tests and the CLI."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from aiohttp import web

from ..blobstore import FileOps
from ..config import Config
from ..errors import AttachstoreError, InvalidRequest, StorageUnavailable, UnsupportedMediaType
from ..service import ImageRef, Store, Upload
from . import wire
from .bodies import read_capped, read_multipart

log = logging.getLogger("attachstore.api")

STORE = web.AppKey("store", Store)
CONFIG = web.AppKey("config", Config)
FILE_OPS = web.AppKey("file_ops", FileOps)

READ_HEADERS = {
    "Cache-Control": "private, max-age=31536000, immutable",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
}
_HTTP_CODES = {
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(body=wire.encoder.encode(value), status=status, content_type="application/json")


def error_response(e: AttachstoreError) -> web.Response:
    body = wire.ErrorAnswer(wire.ErrorBody(e.code, e.message, e.index, e.hint))
    return json_response(body, e.status)


@web.middleware
async def error_envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as the JSON envelope of SPEC section 9; no stack trace reaches a client."""
    try:
        return await handler(request)
    except AttachstoreError as e:
        if e.status >= 500:
            log.error("%s %s: %s %s", request.method, request.path, e.code, e.message)
        return error_response(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "INVALID_REQUEST" if e.status < 500 else "INTERNAL")
        answer = error_response(AttachstoreError(e.reason, code=code))
        answer.set_status(e.status)
        if "Allow" in e.headers:
            answer.headers["Allow"] = e.headers["Allow"]
        return answer
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(AttachstoreError("internal error"))


def _attachment(r: ImageRef) -> wire.Attachment:
    return wire.Attachment(r.ref, r.media_type, r.bytes, r.width, r.height, r.frames, r.name)


def _decode_error(e: msgspec.DecodeError) -> InvalidRequest:
    """Name the JSON path: msgspec says '... - at `$.images[0].data`', and nothing for the top level."""
    text = str(e)
    if not isinstance(e, msgspec.ValidationError):
        return InvalidRequest(f"malformed JSON: {text}")
    what, _, where = text.partition(" - at `")
    return InvalidRequest(f"invalid request at {where.rstrip('`') or '$'}: {what}")


async def admit(request: web.Request) -> web.Response:
    store, config = request.app[STORE], request.app[CONFIG]
    cap = config.http.body_cap(config.limits)
    if request.content_type == "application/json":
        try:
            body = wire.admit_decoder.decode(await read_capped(request, cap))
        except msgspec.DecodeError as e:
            raise _decode_error(e) from None
        source: str = body.source
        uploads = [Upload.of_base64(i.data, i.media_type, i.name) for i in body.images]
    elif request.content_type == "multipart/form-data":
        fields, uploads = await read_multipart(request, cap, config.limits)
        source = fields.get("source", "")  # checked by the service, like the JSON one
    else:
        raise UnsupportedMediaType(
            "POST /v1/attachments takes application/json or multipart/form-data, "
            f"not {request.content_type!r}"
        )
    refs = await store.admit(uploads, source)
    return json_response(wire.AdmitAnswer([_attachment(r) for r in refs]), 201)


def _etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


async def read(request: web.Request) -> web.Response:
    store = request.app[STORE]
    text = request.match_info["ref"]
    etag = f'"{text}"'
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match and _etag_matches(if_none_match, etag):
        # The client holds these exact bytes already (the ETag is their hash): say so without reading them.
        await store.meta(text)
        return web.Response(status=304, headers={"ETag": etag, **READ_HEADERS})
    ref, data = await store.read(text)
    return web.Response(body=data, headers={"Content-Type": ref.media_type, "ETag": etag, **READ_HEADERS})


async def meta(request: web.Request) -> web.Response:
    return json_response(_attachment(await request.app[STORE].meta(request.match_info["ref"])))


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        await request.app[STORE].ready()
    except Exception as e:  # any failure here means "not ready", which is the answer, not an error
        log.warning("not ready: %s", e)
        return error_response(StorageUnavailable("the store is not ready"))
    return json_response({"status": "ready"})


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    store = await Store.open(app[CONFIG], app.get(FILE_OPS))
    app[STORE] = store
    try:
        yield
    finally:
        await store.close()


def make_app(config: Config, *, file_ops: FileOps | None = None) -> web.Application:
    app = web.Application(
        client_max_size=config.http.body_cap(config.limits),
        middlewares=[error_envelope],
    )
    app[CONFIG] = config
    if file_ops is not None:
        app[FILE_OPS] = file_ops
    app.cleanup_ctx.append(_store_ctx)
    app.router.add_post("/v1/attachments", admit)
    app.router.add_get("/v1/attachments/{ref:[^/]+}/meta", meta)
    # Any tail, slashes included, reaches the handler so that a malformed ref gets INVALID_ATTACHMENT_REF.
    app.router.add_get("/v1/attachments/{ref:.+}", read)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
