"""A HEIC from an iPhone through every entry besides an upload (tests/api/test_sources.py has those):
`read_image` of a `.heic` in the workspace, an MCP tool result that carries one (POST /v1/mcp/results), the
Python client, and the preview of what was stored. Each stores the same JPEG, converted."""

from __future__ import annotations

import base64
from pathlib import Path

from mcp import Client

from attachstore.client import AsyncClient, Image
from attachstore.mcp import Local, Options, Roots, build
from tests.conftest import MakeClient, MakeConfig
from tests.support.http import post_json
from tests.support.images import opened

HEIC = (Path(__file__).parent / "gate" / "corpus" / "sources" / "heic" / "arrow.heic").read_bytes()
ROUTES = {"vision": {"input_modalities": ["text", "image"]}}


async def _stored(make_client: MakeClient) -> tuple[str, bytes]:
    """The ref and bytes an upload of the HEIC is stored as, for the others to match."""
    client = await make_client(routes=ROUTES)
    answer = await post_json(client, "/v1/attachments", {"source": "user", "images": [_block()]})
    assert answer.status == 201, await answer.text()
    [attachment] = (await answer.json())["attachments"]
    read = await client.get(f"/v1/attachments/{attachment['ref']}")
    return attachment["ref"], await read.read()


def _block() -> dict[str, str]:
    return {"data": base64.b64encode(HEIC).decode(), "media_type": "image/heic"}


async def test_read_image_of_a_heic_in_the_workspace_shows_the_stored_jpeg(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "IMG_0042.HEIC").write_bytes(HEIC)
    backend = Local(make_config(routes=ROUTES), "mcp-heic", "vision")
    try:
        async with Client(build(backend, Roots([ws], cache=True, env={}), Options())) as c:
            result = await c.call_tool("read_image", {"path": "IMG_0042.HEIC"})
    finally:
        await backend.close()
    assert not result.is_error
    image, text = result.content
    assert image.type == "image"
    assert image.mime_type == "image/jpeg"
    assert opened(base64.b64decode(image.data)).format == "JPEG"
    assert text.type == "text"
    assert "image/heic" in text.text  # the text says what the file was


async def test_an_mcp_result_carrying_a_heic_gets_the_stored_jpegs_ref(make_client: MakeClient) -> None:
    ref, _ = await _stored(make_client)
    client = await make_client(routes=ROUTES)
    block = {"type": "image", "data": base64.b64encode(HEIC).decode(), "mimeType": "image/heic"}
    answer = await post_json(client, "/v1/mcp/results", {"result": {"content": [block]}, "route": "vision"})
    assert answer.status == 201, await answer.text()
    body = await answer.json()
    assert body["result"]["content"] == [{"type": "image", "ref": ref}]
    [attachment] = body["attachments"]
    assert attachment["media_type"] == "image/jpeg"
    assert attachment["normalized"]["original"]["media_type"] == "image/heic"


async def test_the_python_client_admits_a_heic_and_reads_its_preview(make_client: MakeClient) -> None:
    ref, stored = await _stored(make_client)
    server = await make_client(routes=ROUTES)
    async with AsyncClient(str(server.make_url(""))) as c:
        admitted = await c.admit(Image(HEIC, None, "IMG_0042.HEIC"), source="user")
        [attachment] = admitted.attachments
        assert (attachment.ref, attachment.media_type, attachment.name) == (ref, "image/jpeg", "IMG_0042.jpg")
        assert (await c.read(ref)) == stored
    preview = await server.get(f"/v1/attachments/{ref}/preview?size=256")
    assert preview.status == 200
    with opened(await preview.read()) as small:
        assert max(small.size) == 256
