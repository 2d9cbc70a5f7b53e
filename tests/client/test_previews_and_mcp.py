"""The client's `preview` and `admit_mcp_result` (docs/clients.md): the AsyncClient against the real app, the
blocking Client against a real daemon."""

from __future__ import annotations

import base64
import hashlib
from io import BytesIO
from typing import Any

import pytest
from aiohttp import web
from PIL import Image as PILImage

from attachstore.client import AsyncClient, AttachstoreClientError, Client, McpResult
from tests.client.test_client import AiohttpServer, MakeAsync, daemon, fails, make_async  # noqa: F401
from tests.support.images import jpeg


def _size(data: bytes) -> tuple[int, int]:
    with PILImage.open(BytesIO(data)) as im:
        return im.size


def _result(*images: bytes) -> dict[str, Any]:
    blocks = [
        {"type": "image", "data": base64.b64encode(i).decode(), "mimeType": "image/jpeg"} for i in images
    ]
    return {"content": [{"type": "text", "text": "screenshots"}, *blocks], "isError": False}


async def test_preview_is_verified_and_conditional(make_async: MakeAsync) -> None:  # noqa: F811
    ac = await make_async()
    ref = (await ac.admit(jpeg(800, 600), source="user")).refs[0]
    blob = await ac.preview(ref, 128)
    assert blob.data is not None
    assert _size(blob.data) == (128, 96)
    assert blob.media_type == "image/jpeg"
    assert blob.ref == f"sha256:{hashlib.sha256(blob.data).hexdigest()}"  # the preview's own ref
    assert blob.etag == f'"{blob.ref}"'
    again = await ac.preview(ref, 128, if_none_match=blob.etag)
    assert again.not_modified
    assert _size((await ac.preview(ref)).data or b"") == (256, 192)  # the default size
    assert (await fails(ac.preview(ref, 100))).code == "INVALID_REQUEST"
    assert (await fails(ac.preview("sha256:" + "0" * 64, 64))).code == "ATTACHMENT_NOT_FOUND"


async def test_a_preview_that_does_not_hash_to_its_etag_is_bad_response(
    aiohttp_server: AiohttpServer,
) -> None:
    async def lying(request: web.Request) -> web.Response:
        return web.Response(
            body=b"not it", content_type="image/png", headers={"ETag": f'"sha256:{"1" * 64}"'}
        )

    app = web.Application()
    app.router.add_get("/v1/attachments/{ref}/preview", lying)
    server = await aiohttp_server(app)
    async with AsyncClient(str(server.make_url(""))) as c:
        assert (await fails(c.preview("sha256:" + "2" * 64, 64))).code == "BAD_RESPONSE"
    async with AsyncClient(str(server.make_url("")), verify_reads=False) as c:
        assert (await c.preview("sha256:" + "2" * 64, 64)).data == b"not it"


async def test_admit_mcp_result(make_async: MakeAsync) -> None:  # noqa: F811
    ac = await make_async()
    shot = jpeg(40, 30)
    answer = await ac.admit_mcp_result(_result(shot), route="vision")
    assert isinstance(answer, McpResult)
    ref = f"sha256:{hashlib.sha256(shot).hexdigest()}"
    assert answer.refs == [ref]
    assert answer.result == {
        "content": [{"type": "text", "text": "screenshots"}, {"type": "image", "ref": ref}],
        "isError": False,
    }
    assert not answer.degraded
    await ac.create_session("m-1", "text-only")
    refused = await ac.admit_mcp_result(_result(shot), session="m-1")
    assert (refused.degraded, refused.refs) == (True, [])
    assert refused.result["content"][1] == {"type": "text", "text": refused.text}
    assert refused.diagnostics[0].code == "MODALITY_UNSUPPORTED"
    with pytest.raises(AttachstoreClientError) as caught:
        await ac.admit_mcp_result({"content": "no"})
    assert caught.value.code == "INVALID_REQUEST"


def test_the_blocking_client_has_both(daemon: str) -> None:  # noqa: F811
    with Client(daemon) as c:
        answer = c.admit_mcp_result(_result(jpeg(300, 200)), route="vision")
        [ref] = answer.refs
        blob = c.preview(ref, 64)
        assert blob.data is not None
        assert _size(blob.data) == (64, 43)
        assert c.preview(ref, 64, if_none_match=blob.etag).not_modified
