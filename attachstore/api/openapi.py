"""GET /openapi.json: the OpenAPI 3.1 description, generated from the structs that decode requests and encode
answers (no hand-kept copy of a shape). tests/interop/openapi/ generates a TypeScript client from it and
type-checks it under tsc --strict: what a generator needs to type the API right is said here."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import __version__
from ..gate import MEDIA_TYPES, SOURCE_TYPES
from ..render import Rendered, RenderRequest
from ..service import PREVIEW_SIZES, SESSION_ID_PATTERN, SOURCES
from . import listdoc, mcpschema, wire
from .docparts import answer as _answer
from .docparts import answers as _answers
from .docparts import body as _body
from .docparts import op as _op
from .docparts import path_param as _path_param
from .docparts import ref as _ref

_SHAPES: list[Any] = [
    wire.AdmitRequest,
    wire.AdmitAnswer,
    wire.Attachment,
    wire.SessionCreate,
    wire.RouteSwitch,
    wire.Fork,
    wire.Holds,
    wire.Session,
    wire.Released,
    wire.Routes,
    wire.RouteResolution,
    wire.ErrorAnswer,
    wire.McpResults,
    wire.McpAnswer,
    RenderRequest,
    Rendered,
    *listdoc.SHAPES,
]
# The shapes of answers; those encoded without omit_defaults carry every field (see _always_present).
_ANSWERS: list[Any] = [
    wire.AdmitAnswer,
    wire.Attachment,
    wire.Session,
    wire.Released,
    wire.Routes,
    wire.RouteResolution,
    wire.ErrorAnswer,
    wire.McpAnswer,
    Rendered,
    *listdoc.SHAPES,
]
REF = {"type": "string", "maxLength": 256, "description": "sha256:<64 hex> or blake3:<64 hex>"}
SESSION_ID = {"type": "string", "pattern": SESSION_ID_PATTERN}
BINARY = {"type": "string", "format": "binary", "contentMediaType": "application/octet-stream"}
# Stable names for generated functions: a generator names them after these, not after the path.
OPERATIONS = {
    ("/v1/attachments", "post"): "admit",
    ("/v1/attachments/{ref}", "get"): "readAttachment",
    ("/v1/attachments/{ref}", "head"): "headAttachment",
    ("/v1/attachments/{ref}/meta", "get"): "getMeta",
    ("/v1/attachments/{ref}/preview", "get"): "getPreview",
    ("/v1/mcp/results", "post"): "admitMcpResult",
    ("/v1/render", "post"): "render",
    ("/v1/sessions/{id}", "put"): "createSession",
    ("/v1/sessions/{id}", "get"): "getSession",
    ("/v1/sessions/{id}", "delete"): "deleteSession",
    ("/v1/sessions/{id}/route", "post"): "switchRoute",
    ("/v1/sessions/{id}/fork", "post"): "forkSession",
    ("/v1/sessions/{id}/holds", "post"): "holdRefs",
    ("/v1/routes", "get"): "listRoutes",
    ("/v1/routes/{model}", "get"): "resolveRoute",
    ("/healthz", "get"): "healthz",
    ("/readyz", "get"): "readyz",
    ("/metrics", "get"): "metrics",
    ("/openapi.json", "get"): "openapi",
    **listdoc.OPERATIONS,
}


_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "an ETag of these bytes: 304 without them",
    "schema": {"type": "string"},
}
_ETAG = {"ETag": {"description": "the ref of the bytes, quoted", "schema": {"type": "string"}}}


def _bytes(description: str) -> dict[str, Any]:
    binary = {"schema": {"type": "string", "format": "binary"}}
    return {
        "200": {"description": description, "headers": _ETAG, "content": dict.fromkeys(MEDIA_TYPES, binary)},
        "304": {"description": "unchanged: the caller holds these bytes", "headers": _ETAG},
    }


def _status(*values: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"status": {"enum": list(values)}}, "required": ["status"]}
    return {"content": {"application/json": {"schema": schema}}}


def _free_form(node: Any) -> None:
    """Every object schema that names neither properties nor additionalProperties (msgspec writes
    dict[str, Any] as a bare {"type": "object"}) says that it takes any: generators otherwise type it as
    an object with no fields (Record<string, never>)."""
    if isinstance(node, list):
        for item in node:
            _free_form(item)
    elif isinstance(node, dict):
        if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node:
            node["additionalProperties"] = True
        for value in node.values():
            _free_form(value)


def _always_present(shapes: list[Any]) -> set[str]:
    """The answer structs and dataclasses whose every field is on the wire: msgspec leaves a field with a
    default out of `required`, which is right only where the encoder omits defaults (omit_defaults)."""
    names: set[str] = set()
    seen: set[int] = set()
    stack: list[Any] = list(msgspec.inspect.multi_type_info(shapes))
    while stack:
        info = stack.pop()
        if id(info) in seen:
            continue
        seen.add(id(info))
        if isinstance(info, msgspec.inspect.StructType | msgspec.inspect.DataclassType):
            config = getattr(info.cls, "__struct_config__", None)
            if config is None or not config.omit_defaults:
                names.add(info.cls.__name__)
            stack.extend(f.type for f in info.fields)
        elif isinstance(info, msgspec.inspect.UnionType):
            stack.extend(info.types)
        elif isinstance(info, msgspec.inspect.ListType):
            stack.append(info.item_type)
        elif isinstance(info, msgspec.inspect.DictType):
            stack.append(info.value_type)
    return names


def _finished(doc: dict[str, Any]) -> dict[str, Any]:
    schemas = doc["components"]["schemas"]
    for name in _always_present(_ANSWERS):
        schema = schemas[name]
        schema["required"] = list(schema["properties"])
    for (path, method), operation_id in OPERATIONS.items():
        doc["paths"][path][method]["operationId"] = operation_id
    # The decoder lets `source` be absent so that the service answers a JSON body and a form without it in
    # the same words; the contract still requires it, and a generated client must too.
    admit = schemas["AdmitRequest"]
    admit["properties"]["source"] = {"enum": list(SOURCES), "type": "string"}
    admit["required"] = sorted({*admit.get("required", ()), "source"})
    _free_form(doc)
    return doc


def _open(summary: str, description: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"get": _op(summary, {"200": {"description": description, **content}}, security=[])}


_MULTIPART = {
    "type": "object",
    "description": "Text fields source, route and session; every part with a filename is an image, "
    "whatever its field name (image is the conventional one), in order.",
    "properties": {
        "source": {"type": "string", "enum": ["user", "tool", "mcp", "command"]},
        "route": {"type": "string"},
        "session": SESSION_ID,
        # The file parts as a named, repeated binary field, so that a generator types them as files.
        "image": {"type": "array", "minItems": 1, "items": BINARY},
    },
    "required": ["source", "image"],
}


# What a multipart image part may declare: the stored types, the sources the gate converts, or nothing.
_UPLOADED = ", ".join([*MEDIA_TYPES, *SOURCE_TYPES, "application/octet-stream"])


def _attachments() -> dict[str, Any]:
    ref = _path_param("ref", REF)
    admit = _answers(
        {
            "201": _answer("admitted, refs in input order", "AdmitAnswer"),
            "200": _answer("tool/mcp: degraded, nothing stored", "AdmitAnswer"),
        },
        *(400, 404, 408, 409, 413, 415, 422, 507),
    )
    forms = {
        "application/json": {"schema": _ref("AdmitRequest")},
        "multipart/form-data": {
            "schema": _MULTIPART,
            "encoding": {
                "image": {"contentType": ", ".join([*MEDIA_TYPES, *SOURCE_TYPES, "application/octet-stream"])}
            },
        },
    }
    headers = {
        "200": {"description": "the headers", "headers": _ETAG},
        "304": {"description": "unchanged", "headers": _ETAG},
    }
    size = {
        "name": "size",
        "in": "query",
        "required": True,
        "description": "the longer side's bound, in pixels",
        "schema": {"type": "integer", "enum": list(PREVIEW_SIZES)},
    }
    return {
        "/v1/attachments": {
            "post": _op(
                "Admit a batch of images (all or nothing)",
                admit,
                requestBody={"required": True, "content": forms},
            )
        },
        "/v1/attachments/{ref}": {
            "parameters": ref,
            "get": _op(
                "Verified bytes", _answers(_bytes("the bytes"), 400, 404), parameters=[_IF_NONE_MATCH]
            ),
            "head": _op("Verified headers", _answers(headers, 400, 404), parameters=[_IF_NONE_MATCH]),
        },
        "/v1/attachments/{ref}/meta": {
            "parameters": ref,
            "get": _op("Metadata", _answers({"200": _answer("the ImageRef", "Attachment")}, 400, 404)),
        },
        "/v1/attachments/{ref}/preview": {
            "parameters": ref,
            "get": _op(
                "A small still rendition for host UIs, verified",
                _answers(_bytes("the preview's bytes"), 400, 404, 422),
                parameters=[_IF_NONE_MATCH, size],
            ),
        },
    }


def _mcp_and_render() -> dict[str, Any]:
    results = _answers(
        {
            "201": _answer("admitted: each image a ref", "McpAnswer"),
            "200": _answer("no image, or degraded: the images are the text for the model", "McpAnswer"),
        },
        *(400, 404, 408, 413, 415, 507),
    )
    either = {"schema": {"anyOf": [_ref("McpResults"), _ref("CallToolResult")]}}
    return {
        "/v1/mcp/results": {
            "post": _op(
                "Admit the images of an MCP tool result; the result with refs in their place",
                results,
                parameters=[
                    {"name": "route", "in": "query", "required": False, "schema": {"type": "string"}},
                    {"name": "session", "in": "query", "required": False, "schema": SESSION_ID},
                ],
                requestBody={"required": True, "content": {"application/json": either}},
            )
        },
        "/v1/render": {
            "post": _op(
                "Refs to a provider-ready request",
                _answers({"200": _answer("the body to merge", "Rendered")}, 400, 404, 408, 413, 415, 422),
                requestBody=_body("RenderRequest"),
            )
        },
    }


def _sessions() -> dict[str, Any]:
    id_ = _path_param("id", SESSION_ID)
    session = {"200": _answer("the session", "Session")}
    created = {"201": _answer("created", "Session"), "200": _answer("existed", "Session")}
    changed = (400, 404, 408, 409, 413, 415)
    return {
        "/v1/sessions/{id}": {
            "parameters": id_,
            "put": _op(
                "Create (the same body again is a no-op)",
                _answers(created, 400, 408, 409, 413, 415),
                requestBody=_body("SessionCreate"),
            ),
            "get": _op("Route, holds, created", _answers(session, 400, 404)),
            "delete": _op("Release the holds", _answers({"200": _answer("released", "Released")}, 400, 404)),
        },
        "/v1/sessions/{id}/route": {
            "parameters": id_,
            "post": _op(
                "Switch route (the switch guard applies)",
                _answers({"200": _answer("switched", "Session")}, *changed),
                requestBody=_body("RouteSwitch"),
            ),
        },
        "/v1/sessions/{id}/fork": {
            "parameters": id_,
            "post": _op(
                "Copy the session and its holds",
                _answers({"201": _answer("the fork", "Session")}, *changed),
                requestBody=_body("Fork"),
            ),
        },
        "/v1/sessions/{id}/holds": {
            "parameters": id_,
            "post": _op(
                "Hold existing refs",
                _answers(session, 400, 404, 408, 413, 415, 422),
                requestBody=_body("Holds"),
            ),
        },
    }


def _routes() -> dict[str, Any]:
    model = {
        "name": "model",
        "in": "path",
        "required": True,
        "description": "a model id as hosts name it in `route`; it may hold slashes",
        "schema": {"type": "string", "minLength": 1, "maxLength": 256},
    }
    return {
        "/v1/routes": {
            "get": _op(
                "Every model declaration: the configured routes, then the built-in catalog's entries",
                _answers({"200": _answer("routes", "Routes")}),
            )
        },
        "/v1/routes/{model}": {
            "parameters": [model],
            "get": _op(
                "How a model id resolves: its configured route, else its catalog entry, else unknown",
                _answers({"200": _answer("the resolution", "RouteResolution")}, 400),
            ),
        },
    }


def _unauthenticated() -> dict[str, Any]:
    ready = {"200": {"description": "ready", **_status("ready")}, "503": _answer("not ready", "ErrorAnswer")}
    return {
        "/healthz": _open("Liveness", "alive", _status("ok")),
        "/readyz": {"get": _op("Readiness", ready, security=[])},
        "/metrics": _open(
            "Prometheus metrics",
            "text exposition format",
            {"content": {"text/plain": {"schema": {"type": "string"}}}},
        ),
        "/openapi.json": _open(
            "This document", "OpenAPI 3.1", {"content": {"application/json": {"schema": {"type": "object"}}}}
        ),
    }


def document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_SHAPES, ref_template="#/components/schemas/{name}")
    # MCP's shapes, which the handler takes and answers as free JSON.
    components["CallToolResult"] = mcpschema.CALL_TOOL_RESULT
    components["AdmittedResult"] = mcpschema.ADMITTED_RESULT
    components["McpResults"]["properties"]["result"] = _ref("CallToolResult")
    components["McpAnswer"]["properties"]["result"] = _ref("AdmittedResult")
    doc = {
        "openapi": "3.1.0",
        "info": {
            "title": "attachstore",
            "version": __version__,
            "description": "A verified, content-addressed attachment store for LLM agent hosts.",
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # Without configured tokens the daemon is open; with them, every endpoint but health needs one.
        "security": [{}, {"bearer": []}],
        "paths": {
            **_attachments(),
            **_mcp_and_render(),
            **_sessions(),
            **listdoc.paths(),
            **_routes(),
            **_unauthenticated(),
        },
    }
    return _finished(doc)
