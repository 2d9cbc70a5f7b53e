"""POST /v1/mcp/results (docs/api.md): an MCP `CallToolResult` as its server sent it, its images admitted as
one `mcp` batch and answered as ref blocks. Only the image blocks and the embedded image resources are
looked at; every other block and field is answered as it came."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web
from multidict import MultiMapping

from ..errors import InvalidRequest
from ..mcpimages import Malformed, block_image, refused
from ..render.neutral import MAX_NESTING, nested_deeper
from ..service import Admission, Upload
from . import wire
from .attachments import attachment, diagnostics
from .bodies import BODY_BYTES, IMAGES_HINT
from .common import CONFIG, STORE, decode_error, read_json, tenant_of
from .sending import Sending, View, sending

# Content blocks in one result: as many as the images one JSON admission may list.
MAX_BLOCKS = wire.MAX_IMAGES
_decoder = msgspec.json.Decoder(dict[str, Any])
_QUERY: dict[str, Any] = {"route": wire.RouteId, "session": wire.SessionId}


def _from_query(query: MultiMapping[str]) -> dict[str, str | None]:
    unknown = [name for name in query if name not in _QUERY]
    if unknown:
        raise InvalidRequest(
            f"unknown query parameter {unknown[0][:40]!r}: route and session are the only ones"
        )
    given: dict[str, str | None] = {}
    for name, kind in _QUERY.items():
        values = query.getall(name, [])
        if len(values) > 1:
            raise InvalidRequest(f"query parameter {name!r} is given more than once")
        try:
            given[name] = msgspec.convert(values[0], kind) if values else None
        except msgspec.ValidationError as e:
            raise InvalidRequest(f"invalid query parameter {name}: {e}") from None
    return given


def _unwrap(
    body: dict[str, Any], query: MultiMapping[str]
) -> tuple[dict[str, Any], str, dict[str, str | None]]:
    # The wrapped form {"result", "route", "session"} is told from a bare result by having `result` and no
    # `content`.
    given = _from_query(query)
    if "result" not in body or "content" in body:
        return body, "$", given
    try:
        wrapped = msgspec.convert(body, wire.McpResults)
    except msgspec.ValidationError as e:
        raise decode_error(e) from None
    for name, value in (("route", wrapped.route), ("session", wrapped.session)):
        if value is not None:
            if given[name] is not None:
                raise InvalidRequest(f"{name} is given in the body and in the query: give it once")
            given[name] = value
    return wrapped.result, "$.result", given


# The fields of a CallToolResult besides its content, and what each must be when present.
_FIELDS: dict[str, tuple[type, str]] = {
    "structuredContent": (dict, "object"),
    "isError": (bool, "bool"),
    "_meta": (dict, "object"),
}


def images_of(result: dict[str, Any], where: str = "$") -> dict[int, Upload]:
    """The images of a CallToolResult by their position in `content` (mcpimages.py). Of the rest,
    only the result's own fields are checked: the blocks are answered as they came."""
    content = result.get("content")
    if not isinstance(content, list):
        raise InvalidRequest(f"invalid request at {where}.content: a CallToolResult has a `content` array")
    for key, (kind, name) in _FIELDS.items():
        if key in result and not isinstance(result[key], kind):
            got = type(result[key]).__name__
            raise InvalidRequest(f"invalid request at {where}.{key}: Expected `{name}`, got `{got}`")
    if len(content) > MAX_BLOCKS:
        raise InvalidRequest(
            f"invalid request at {where}.content: {len(content)} content blocks, more than {MAX_BLOCKS}",
            hint="send the result of one tool call",
        )
    images: dict[int, Upload] = {}
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(
                f"invalid request at {at}: a content block is an object with a string `type`"
            )
        found = block_image(block, at)
        if isinstance(found, Malformed):
            raise InvalidRequest(f"invalid request at {found.where}: {found.message}")
        if found is not None:
            images[i] = Upload.of_base64(found.data, found.declared, found.name)
    return images


def answered(result: dict[str, Any], images: dict[int, Upload], admission: Admission) -> dict[str, Any]:
    # Degraded, the first image becomes the text for the model and the others go.
    content: list[Any] = list(result["content"])
    positions = list(images)
    if admission.degraded:
        content = refused(content, positions, admission.text or "")
    else:
        for i, found in zip(positions, admission.attachments, strict=True):
            content[i] = {"type": "image", "ref": found.ref}
    return {**result, "content": content}


async def results(request: web.Request) -> web.Response:
    store, config, tenant = request.app[STORE], request.app[CONFIG], tenant_of(request)
    share = sending(request)
    # An admission: its place is taken, and the body counted against the admissions' bytes, before a byte
    # of it is read; the cap is an admission's.
    with store.admission_slot(tenant) as slot:
        cap = config.http.body_cap(config.limits)
        body = await read_json(request, _decoder, cap, IMAGES_HINT, slot.hold)
        result, where, fields = _unwrap(body, request.query)
        if nested_deeper(result, MAX_NESTING):
            raise InvalidRequest(f"invalid request at {where}: nested more than {MAX_NESTING} levels deep")
        images = images_of(result, where)
        # The answer echoes the result, which may be as large as the body: it is claimed against the tenant's
        # answers in flight before any image is admitted, so that one that would not fit is refused with
        # nothing stored.
        share.claim(echoed_bytes(request.get(BODY_BYTES, 0), images))
        if not images:  # nothing to admit: the result as it came
            return _answer(share, wire.McpAnswer(result, []))
        admission = await store.admit(
            list(images.values()),
            "mcp",
            route=fields["route"],
            session=fields["session"],
            tenant=tenant,
            slot=slot,
        )
    out = answered(result, images, admission)
    if admission.degraded:
        return _answer(share, wire.McpAnswer(out, [], True, diagnostics(admission), admission.text))
    return _answer(share, wire.McpAnswer(out, [attachment(a) for a in admission.attachments]), 201)


# What an answer may add for each image besides what its body held: the ref block, its attachment entry or
# diagnostic, the text for the model.
_PER_IMAGE = 2048


def echoed_bytes(body_bytes: int, images: dict[int, Upload]) -> int:
    """What the answer to a result of `body_bytes` will hold, as near as is known before its images are
    admitted: the body, less each image's base64 (which becomes a ref), plus what each image adds."""
    base64 = sum(len(u.payload) for u in images.values() if isinstance(u.payload, str))
    return body_bytes - base64 + _PER_IMAGE * len(images)


def _answer(share: Sending, value: wire.McpAnswer, status: int = 200) -> web.Response:
    # Its bytes counted against the budget beyond what was claimed for it (ServerBusy if they do not
    # fit), and written without a copy.
    encoded = wire.encoder.encode(value)
    share.claim(len(encoded) - share.held)
    return web.Response(body=View(encoded, "application/json"), status=status)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v1/mcp/results", results)
