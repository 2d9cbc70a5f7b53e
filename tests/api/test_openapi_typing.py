"""What a client generator needs from /openapi.json to type the API right (the defects that
tests/interop/openapi/ found with openapi-typescript: docs/clients.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from attachstore.api.openapi import document

METHODS = ("get", "head", "put", "post", "delete")


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for item in node:
            yield from objects(item)
    elif isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from objects(value)


def test_every_operation_has_a_stable_unique_id() -> None:
    ids = [op.get("operationId") for _, _, op in operations(document())]
    assert None not in ids
    assert len(ids) == len(set(ids))


def test_free_form_objects_say_they_take_anything() -> None:
    """Else openapi-typescript types them Record<string, never>: no tool call arguments, no render body."""
    doc = document()
    for schema in objects(doc):
        assert "properties" in schema or "additionalProperties" in schema, schema
    schemas = doc["components"]["schemas"]
    assert schemas["Rendered"]["properties"]["body"]["additionalProperties"] is True
    assert schemas["ToolCallIn"]["properties"]["arguments"]["additionalProperties"] is True


def test_fields_always_answered_are_required() -> None:
    schemas = document()["components"]["schemas"]
    assert set(schemas["RouteInfo"]["required"]) >= {"max_request_side", "max_request_pixels"}
    assert "resized" in schemas["Summary"]["required"]
    # Answers that omit their defaults keep them optional.
    assert "normalized" not in schemas["Attachment"]["required"]
    assert "degraded" not in schemas["AdmitAnswer"].get("required", [])


def test_multipart_file_parts_are_a_named_binary_field() -> None:
    body = document()["paths"]["/v1/attachments"]["post"]["requestBody"]["content"]["multipart/form-data"]
    schema = body["schema"]
    assert "additionalProperties" not in schema
    assert schema["properties"]["image"]["items"]["format"] == "binary"
    assert "image/png" in body["encoding"]["image"]["contentType"]


def test_reads_answer_binary_in_the_gates_types_and_are_conditional() -> None:
    doc = document()
    for path in ("/v1/attachments/{ref}", "/v1/attachments/{ref}/preview"):
        get = doc["paths"][path]["get"]
        assert set(get["responses"]["200"]["content"]) == {
            "image/png",
            "image/jpeg",
            "image/gif",
            "image/webp",
        }
        assert all(c["schema"]["format"] == "binary" for c in get["responses"]["200"]["content"].values())
        assert "If-None-Match" in [p["name"] for p in get["parameters"]]
        assert "ETag" in get["responses"]["304"]["headers"]


def test_health_answers_are_json() -> None:
    paths = document()["paths"]
    for path in ("/healthz", "/readyz"):
        assert "application/json" in paths[path]["get"]["responses"]["200"]["content"]
