"""GET /openapi.json: the OpenAPI 3.1 description, generated from the structs that decode requests and encode
answers (no hand-kept copy of a shape)."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import __version__
from ..render import Rendered, RenderRequest
from ..service import SESSION_ID_PATTERN
from . import wire

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
    RenderRequest,
    Rendered,
]
REF = {"type": "string", "maxLength": 256, "description": "sha256:<64 hex> or blake3:<64 hex>"}
SESSION_ID = {"type": "string", "pattern": SESSION_ID_PATTERN}


def _json(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def _answers(ok: dict[str, Any], *errors: int) -> dict[str, Any]:
    answers = dict(ok)
    for status in sorted({*errors, 401, 500, 503}):
        answers[str(status)] = {"description": "an error: see docs/errors.md", **_json("ErrorAnswer")}
    return answers


def _body(name: str) -> dict[str, Any]:
    return {"required": True, **_json(name)}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": responses, **extra}


def _path_param(name: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": schema}]


def document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_SHAPES, ref_template="#/components/schemas/{name}")
    multipart = {
        "type": "object",
        "properties": {
            "source": {"type": "string", "enum": ["user", "tool", "mcp", "command"]},
            "route": {"type": "string"},
            "session": SESSION_ID,
        },
        "required": ["source"],
        "additionalProperties": {"type": "string", "contentMediaType": "application/octet-stream"},
    }
    image = {"content": {"image/*": {"schema": {"type": "string", "contentMediaType": "image/*"}}}}
    session_ops = _path_param("id", SESSION_ID)
    return {
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
            "/v1/attachments": {
                "post": _op(
                    "Admit a batch of images (all or nothing)",
                    _answers(
                        {
                            "201": {"description": "admitted, refs in input order", **_json("AdmitAnswer")},
                            "200": {
                                "description": "tool/mcp: degraded, nothing stored",
                                **_json("AdmitAnswer"),
                            },
                        },
                        400,
                        404,
                        408,
                        409,
                        413,
                        415,
                        422,
                        507,
                    ),
                    requestBody={
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/AdmitRequest"}},
                            "multipart/form-data": {"schema": multipart},
                        },
                    },
                )
            },
            "/v1/attachments/{ref}": {
                "parameters": _path_param("ref", REF),
                "get": _op(
                    "Verified bytes",
                    _answers(
                        {"200": {"description": "the bytes", **image}, "304": {"description": "unchanged"}},
                        400,
                        404,
                    ),
                ),
                "head": _op(
                    "Verified headers",
                    _answers(
                        {"200": {"description": "the headers"}, "304": {"description": "unchanged"}}, 400, 404
                    ),
                ),
            },
            "/v1/attachments/{ref}/meta": {
                "parameters": _path_param("ref", REF),
                "get": _op(
                    "Metadata",
                    _answers({"200": {"description": "the ImageRef", **_json("Attachment")}}, 400, 404),
                ),
            },
            "/v1/render": {
                "post": _op(
                    "Refs to a provider-ready request",
                    _answers(
                        {"200": {"description": "the body to merge", **_json("Rendered")}},
                        400,
                        404,
                        408,
                        413,
                        415,
                        422,
                    ),
                    requestBody=_body("RenderRequest"),
                )
            },
            "/v1/sessions/{id}": {
                "parameters": session_ops,
                "put": _op(
                    "Create (the same body again is a no-op)",
                    _answers(
                        {
                            "201": {"description": "created", **_json("Session")},
                            "200": {"description": "existed", **_json("Session")},
                        },
                        400,
                        408,
                        409,
                        413,
                        415,
                    ),
                    requestBody=_body("SessionCreate"),
                ),
                "get": _op(
                    "Route, holds, created",
                    _answers({"200": {"description": "the session", **_json("Session")}}, 400, 404),
                ),
                "delete": _op(
                    "Release the holds",
                    _answers({"200": {"description": "released", **_json("Released")}}, 400, 404),
                ),
            },
            "/v1/sessions/{id}/route": {
                "parameters": session_ops,
                "post": _op(
                    "Switch route (the switch guard applies)",
                    _answers(
                        {"200": {"description": "switched", **_json("Session")}}, 400, 404, 408, 409, 413, 415
                    ),
                    requestBody=_body("RouteSwitch"),
                ),
            },
            "/v1/sessions/{id}/fork": {
                "parameters": session_ops,
                "post": _op(
                    "Copy the session and its holds",
                    _answers(
                        {"201": {"description": "the fork", **_json("Session")}}, 400, 404, 408, 409, 413, 415
                    ),
                    requestBody=_body("Fork"),
                ),
            },
            "/v1/sessions/{id}/holds": {
                "parameters": session_ops,
                "post": _op(
                    "Hold existing refs",
                    _answers(
                        {"200": {"description": "the session", **_json("Session")}},
                        400,
                        404,
                        408,
                        413,
                        415,
                        422,
                    ),
                    requestBody=_body("Holds"),
                ),
            },
            "/v1/routes": {
                "get": _op(
                    "Every model declaration: the configured routes, then the built-in catalog's entries",
                    _answers({"200": {"description": "routes", **_json("Routes")}}),
                )
            },
            "/v1/routes/{model}": {
                "parameters": [
                    {
                        "name": "model",
                        "in": "path",
                        "required": True,
                        "description": "a model id as hosts name it in `route`; it may hold slashes",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 256},
                    }
                ],
                "get": _op(
                    "How a model id resolves: its configured route, else its catalog entry, else unknown",
                    _answers({"200": {"description": "the resolution", **_json("RouteResolution")}}, 400),
                ),
            },
            "/healthz": {"get": _op("Liveness", {"200": {"description": "alive"}}, security=[])},
            "/readyz": {
                "get": _op(
                    "Readiness",
                    {
                        "200": {"description": "ready"},
                        "503": {"description": "not ready", **_json("ErrorAnswer")},
                    },
                    security=[],
                )
            },
            "/metrics": {
                "get": _op(
                    "Prometheus metrics",
                    {
                        "200": {
                            "description": "text exposition format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                    security=[],
                )
            },
            "/openapi.json": {
                "get": _op(
                    "This document",
                    {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                    security=[],
                )
            },
        },
    }
