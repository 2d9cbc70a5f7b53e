"""Talking to the real app in tests: JSON admissions, error bodies, and where an object's file lies."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def post_json(client: Client, path: str, body: Any) -> aiohttp.ClientResponse:
    # A stream, not bytes: aiohttp warns (an error here) about large in-memory bodies.
    data = io.BytesIO(json.dumps(body).encode())
    return await client.post(path, data=data, headers={"Content-Type": "application/json"})


async def admit(
    client: Client,
    *images: bytes,
    source: str = "user",
    route: str | None = None,
    session: str | None = None,
    **image_fields: Any,
) -> aiohttp.ClientResponse:
    """POST one JSON batch; `image_fields` (media_type, name) go into every image."""
    body: dict[str, Any] = {"source": source, "images": [{"data": b64(i), **image_fields} for i in images]}
    body |= {k: v for k, v in (("route", route), ("session", session)) if v is not None}
    return await post_json(client, "/v1/attachments", body)


async def admit_ok(client: Client, *images: bytes, **extra: Any) -> list[dict[str, Any]]:
    response = await admit(client, *images, **extra)
    assert response.status == 201, await response.text()
    attachments: list[dict[str, Any]] = (await response.json())["attachments"]
    return attachments


async def error_of(response: aiohttp.ClientResponse) -> dict[str, Any]:
    assert response.content_type == "application/json"
    error: dict[str, Any] = (await response.json())["error"]
    return error


def object_path(data_dir: Path, ref: str) -> Path:
    alg, hexd = ref.split(":")
    return data_dir / "objects" / alg / hexd[:2] / hexd[2:4] / hexd
