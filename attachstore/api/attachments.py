"""POST /v1/attachments, GET/HEAD /v1/attachments/{ref}, GET /v1/attachments/{ref}/meta and /preview."""

from __future__ import annotations

import msgspec
from aiohttp import web

from ..errors import InvalidRequest, UnsupportedMediaType
from ..service import PREVIEW_SIZES, PREVIEW_SIZES_HINT, Admission, ImageRef, Upload
from . import wire
from .bodies import IMAGES_HINT, close_uploads, read_multipart
from .common import CONFIG, STORE, json_response, read_json, tenant_of
from .headers import not_modified_headers, verified_headers
from .sending import Sending, View, sending

admit_decoder = msgspec.json.Decoder(wire.AdmitRequest)
_PREVIEW_SIZES = frozenset(map(str, PREVIEW_SIZES))  # exactly as written: not "064", "+64" or " 64"


def attachment(r: ImageRef) -> wire.Attachment:
    normalized = None
    if r.normalized is not None:
        o = r.normalized.original
        original = wire.OriginalImage(o.media_type, o.bytes, o.width, o.height)
        normalized = wire.Normalized(original, list(r.normalized.steps))
    return wire.Attachment(r.ref, r.media_type, r.bytes, r.width, r.height, r.frames, r.name, normalized)


def diagnostics(result: Admission) -> list[wire.Diagnostic]:
    return [
        wire.Diagnostic(d.index, d.media_type, d.name, d.code, d.message, d.hint) for d in result.diagnostics
    ]


def admit_answer(result: Admission) -> web.Response:
    if result.degraded:
        # Soft rejection: the tool call still succeeds; the text tells the model what was dropped and why.
        return json_response(wire.AdmitAnswer([], True, diagnostics(result), result.text), 200)
    return json_response(wire.AdmitAnswer([attachment(r) for r in result.attachments]), 201)


async def admit(request: web.Request) -> web.Response:
    store, config = request.app[STORE], request.app[CONFIG]
    if request.content_type not in ("application/json", "multipart/form-data"):
        raise UnsupportedMediaType(
            "POST /v1/attachments takes application/json or multipart/form-data, "
            f"not {request.content_type!r}",
            hint="send Content-Type: application/json with the images as base64, or multipart/form-data "
            "with one file part per image",
        )
    # The place is taken before a byte of the body is read, and holds the body's bytes as they come: what
    # admissions hold in memory is bounded by max_concurrent and max_buffered_bytes, not by the clients.
    with store.admission_slot(tenant_of(request)) as slot:
        if request.content_type == "application/json":
            cap = config.http.body_cap(config.limits)
            body = await read_json(request, admit_decoder, cap, IMAGES_HINT, slot.hold)
            fields: dict[str, str | None] = {
                "source": body.source,
                "route": body.route,
                "session": body.session,
            }
            uploads = [Upload.of_base64(i.data, i.media_type, i.name) for i in body.images]
        else:
            text_fields, uploads = await read_multipart(request, config, slot.hold)
            fields = {k: text_fields.get(k) or None for k in ("source", "route", "session")}
        try:
            result = await store.admit(
                uploads,
                fields["source"],
                route=fields["route"],
                session=fields["session"],
                tenant=tenant_of(request),
                slot=slot,
            )
        finally:
            close_uploads(uploads)
    return admit_answer(result)


def etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def _not_modified(etag: str) -> web.Response:
    return web.Response(status=304, headers=not_modified_headers(etag))


def _verified(share: Sending, found: ImageRef, data: bytes | bytearray) -> web.Response:
    """Counted once against the sending budget: `share` has claimed the bytes already, unless the read was a
    remembered one or a preview."""
    if not share.held:
        share.claim(len(data))
    return web.Response(body=View(data, found.media_type), headers=verified_headers(found))


async def read(request: web.Request) -> web.Response:
    store = request.app[STORE]
    text = request.match_info["ref"]
    etag = f'"{text}"'
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match and etag_matches(if_none_match, etag):
        # The client holds these exact bytes already (the ETag is their hash): say so without reading them.
        await store.meta(text, tenant_of(request))
        return _not_modified(etag)
    share = sending(request)
    return _verified(share, *await store.read(text, tenant_of(request), share.claim))


def _preview_size(request: web.Request) -> int:
    sizes = request.query.getall("size", [])
    if len(sizes) != 1 or sizes[0] not in _PREVIEW_SIZES:
        given = "no size" if not sizes else f"size={sizes[0][:20]!r}" if len(sizes) == 1 else "several sizes"
        raise InvalidRequest(f"size: {given} is not a preview size", hint=PREVIEW_SIZES_HINT)
    return int(sizes[0])


async def preview(request: web.Request) -> web.Response:
    store, tenant = request.app[STORE], tenant_of(request)
    text, size = request.match_info["ref"], _preview_size(request)
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match:
        current = await store.preview_ref(text, size, tenant)
        if current is not None and etag_matches(if_none_match, f'"{current}"'):
            return _not_modified(f'"{current}"')
    return _verified(sending(request), *await store.preview(text, size, tenant))


async def meta(request: web.Request) -> web.Response:
    found = await request.app[STORE].meta(request.match_info["ref"], tenant_of(request))
    return json_response(attachment(found))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v1/attachments", admit)
    router.add_get("/v1/attachments/{ref:[^/]+}/meta", meta)
    router.add_get("/v1/attachments/{ref:[^/]+}/preview", preview)
    # Any tail, empty or with slashes or newlines, reaches the handler: a malformed ref is
    # INVALID_ATTACHMENT_REF, never the generic 404 of a path no route matches.
    router.add_get("/v1/attachments/{ref:(?s:.*)}", read)
