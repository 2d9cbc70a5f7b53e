"""The pieces the OpenAPI document (openapi.py, listdoc.py) is written with: references to the components,
JSON bodies and answers, and the error answers every operation may give."""

from __future__ import annotations

from typing import Any


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": ref(name)}}}


def answer(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, **json_content(schema)}


def answers(ok: dict[str, Any], *errors: int) -> dict[str, Any]:
    failed = answer("an error: see docs/errors.md", "ErrorAnswer")
    return ok | {str(status): failed for status in sorted({*errors, 401, 500, 503})}


def body(name: str) -> dict[str, Any]:
    return {"required": True, **json_content(name)}


def op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": responses, **extra}


def path_param(name: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": schema}]


def query_param(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}
