"""The listings' part of GET /openapi.json (openapi.py assembles the document): their shapes, operation ids
and paths."""

from __future__ import annotations

from typing import Any

from ..service import SESSION_ID_PATTERN
from ..service.listings import DEFAULT_LIMIT, MAX_CURSOR, MAX_LIMIT
from . import listwire
from .docparts import answer, answers, op, path_param, query_param

SHAPES: list[Any] = [listwire.SessionPage, listwire.AttachmentPage, listwire.Stats]
OPERATIONS = {
    ("/v1/sessions", "get"): "listSessions",
    ("/v1/sessions/{id}/attachments", "get"): "listSessionAttachments",
    ("/v1/stats", "get"): "getStats",
}
_LIMIT = query_param(
    "limit",
    f"the most items on the page (default {DEFAULT_LIMIT})",
    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
)
_CURSOR = query_param(
    "cursor",
    "`next` of the previous page, as it came: the page after it",
    {"type": "string", "maxLength": MAX_CURSOR},
)


def paths() -> dict[str, Any]:
    prefix = query_param(
        "prefix",
        "only the sessions whose id starts with it",
        {"type": "string", "pattern": "^[A-Za-z0-9._:-]{0,128}$"},
    )
    expired = query_param(
        "expired",
        "true: only the sessions whose lifetime has run out; false: only the others",
        {"type": "string", "enum": ["true", "false"]},
    )
    return {
        "/v1/sessions": {
            "get": op(
                "The tenant's sessions, newest used first, a page at a time",
                answers({"200": answer("a page of sessions", "SessionPage")}, 400),
                parameters=[prefix, expired, _LIMIT, _CURSOR],
            )
        },
        "/v1/sessions/{id}/attachments": {
            "parameters": path_param("id", {"type": "string", "pattern": SESSION_ID_PATTERN}),
            "get": op(
                "What a session holds, oldest held first, with each attachment's metadata, a page at a time",
                answers({"200": answer("a page of attachments", "AttachmentPage")}, 400, 404),
                parameters=[_LIMIT, _CURSOR],
            ),
        },
        "/v1/stats": {
            "get": op(
                "The totals of what the caller may see: objects, bytes, sessions, gc and audit, free space",
                answers({"200": answer("the figures", "Stats")}),
            )
        },
    }
