"""The MCP server's tools and resources through the SDK's Client, in memory, on a local store: what a model
gets for each file, each refusal, each host, and each way of naming the workspace."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError
from PIL import Image

from attachstore.mcp import Options
from attachstore.service import Store
from tests.mcp.conftest import Connect, shot_metadata
from tests.support.images import png, png_damaged_idat

pytestmark = pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28, and 2025-11-25


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_and_text(result: types.CallToolResult) -> tuple[bytes, str, str]:
    assert not result.is_error, result
    image, text = result.content
    assert isinstance(image, types.ImageContent)
    assert isinstance(text, types.TextContent)
    return base64.b64decode(image.data), image.mime_type, text.text


def refusal(result: types.CallToolResult) -> str:
    assert result.is_error is True, result
    assert result.structured_content is None
    [text] = result.content
    assert isinstance(text, types.TextContent)
    return text.text


async def test_read_image_returns_the_image_its_metadata_and_holds_it(
    connect: Connect, ws: Path, mode: str
) -> None:
    shot = (ws / "shot.png").read_bytes()
    async with connect(mode=mode) as c:
        [read_image, read_attachment] = (await c.list_tools()).tools
        assert (read_image.name, read_attachment.name) == ("read_image", "read_attachment")
        assert read_image.output_schema is not None
        assert read_attachment.output_schema is None
        result = await c.call_tool("read_image", {"path": "shot.png"})
        data, media_type, text = image_and_text(result)
        assert (data, media_type) == (shot, "image/png")
        metadata = shot_metadata(ws)
        assert result.structured_content == metadata
        line, js = text.split("\n")
        assert json.loads(js) == metadata
        assert line.startswith(
            f"{sha256(shot)} from {ws / 'shot.png'}: image/png, 40x30, {len(shot):,} bytes."
        )
        assert f'read_attachment {{"ref": "{sha256(shot)}"}}' in line
        assert not any(isinstance(b, types.ResourceLink) for b in result.content)
        [held] = (await c.list_resources()).resources
        assert (str(held.uri), held.mime_type, held.size, held.name) == (
            f"attachstore://sha256/{sha256(shot)[7:]}",
            "image/png",
            len(shot),
            "shot.png",
        )


async def test_the_bytes_decide_the_type_not_the_extension(connect: Connect, ws: Path, mode: str) -> None:
    async with connect(mode=mode) as c:
        result = await c.call_tool("read_image", {"path": "png-named.jpg"})
        data, media_type, _ = image_and_text(result)
        assert (data, media_type) == ((ws / "png-named.jpg").read_bytes(), "image/png")
        assert (result.structured_content or {})["media_type"] == "image/png"


async def test_a_route_with_request_limits_is_shown_its_variant(
    connect: Connect, ws: Path, mode: str
) -> None:
    photo = (ws / "photo.jpg").read_bytes()
    async with connect(route="small", mode=mode) as c:
        result = await c.call_tool("read_image", {"path": "photo.jpg"})
        data, _, text = image_and_text(result)
        with Image.open(io.BytesIO(data)) as im:
            assert im.size == (64, 43)
        # The metadata is the stored image's; the text says what the model sees.
        assert result.structured_content is not None
        assert (result.structured_content["ref"], result.structured_content["width"]) == (sha256(photo), 300)
        assert "Shown here at 64x43, within the model's request limits." in text
        again = await c.call_tool("read_attachment", {"ref": sha256(photo)})
        assert image_and_text(again)[0] == data  # the same variant, found again


async def test_an_oversized_image_is_stored_fitted_and_says_so(connect: Connect, ws: Path, mode: str) -> None:
    (ws / "wide.png").write_bytes(png(300, 100))
    config = {"limits": {"max_side": 150}, "admission": {"oversize": "fit", "decode_workers": 1}}
    async with connect(config=config, mode=mode) as c:
        result = await c.call_tool("read_image", {"path": "wide.png"})
        _, _, text = image_and_text(result)
        assert (result.structured_content or {})["width"] == 150
        assert "Stored normalized; the file was image/png 300x100" in text


async def test_every_bad_file_is_a_tool_error_written_for_the_model(
    connect: Connect, ws: Path, mode: str
) -> None:
    (ws / "damaged.png").write_bytes(png_damaged_idat(png(20, 20)))
    (ws / "sub").mkdir()
    cases = {
        "notes.txt": "The tool result contained an image, but it was not attached: the bytes are",
        "damaged.png": "(INVALID_IMAGE)",
        "../outside.png": "is outside the workspace; only files under",
        "/etc/hostname": "is outside the workspace",
        "missing.png": "'missing.png' does not exist in the workspace",
        "sub": "'sub' is a directory, not an image file",
    }
    async with connect(mode=mode) as c:
        for path, said in cases.items():
            assert said in refusal(await c.call_tool("read_image", {"path": path})), path
        assert (await c.list_resources()).resources == []  # nothing was admitted


async def test_a_file_over_the_source_bound_is_refused_as_the_gate_would(
    connect: Connect, ws: Path, mode: str
) -> None:
    (ws / "big.png").write_bytes(png(200, 200))
    bound = {"limits": {"max_image_bytes": 1000}, "admission": {"fit_max_bytes": 1000}}
    async with connect(config=bound, mode=mode) as c:
        text = refusal(await c.call_tool("read_image", {"path": "big.png"}))
    assert text.startswith(
        "The tool result contained an image, but it was not attached: the limit is 1,000 bytes"
    )
    assert text.endswith("shrink it to at most 1,000 bytes and read it again (IMAGE_TOO_LARGE).")


@pytest.mark.parametrize(
    ("route", "said", "told"),
    [
        (
            "text-only",
            "the model 'text-only' does not accept images (declared by [routes.\"text-only\"] in",
            "Tell the user that the current model cannot see images",
        ),
        (
            None,
            "no model is named for these images (MODALITY_UNSUPPORTED)",
            "the host names the model with the session's route",
        ),
        (
            "unknown-model",
            "the model 'unknown-model' is not declared as accepting images",
            'declare it in the attachstore configuration: [routes."unknown-model"]',
        ),
    ],
)
async def test_a_route_without_images_refuses_tool_images(
    connect: Connect, mode: str, route: str | None, said: str, told: str
) -> None:
    """The text states the true cause, and what the one who can fix it should do."""
    async with connect(route=route, mode=mode) as c:
        text = refusal(await c.call_tool("read_image", {"path": "shot.png"}))
    assert said in text
    assert told in text


async def test_bad_arguments_and_unknown_tools_are_tool_errors(connect: Connect, mode: str) -> None:
    async with connect(mode=mode) as c:
        for arguments in ({}, {"path": ""}, {"path": 7}, {"path": "shot.png", "extra": 1}):
            assert 'read_image takes one argument, {"path"' in refusal(
                await c.call_tool("read_image", arguments)
            )
        assert "there is no tool 'write_image'" in refusal(await c.call_tool("write_image", {"path": "x"}))
        assert "is not a reference" in refusal(await c.call_tool("read_attachment", {"ref": "../etc"}))
        missing = "sha256:" + "0" * 64
        assert f"there is no attachment '{missing}'" in refusal(
            await c.call_tool("read_attachment", {"ref": missing})
        )


async def test_read_attachment_shows_a_stored_image_for_the_sessions_route(
    connect: Connect, ws: Path, mode: str
) -> None:
    shot = (ws / "shot.png").read_bytes()
    async with connect(mode=mode) as c:
        await c.call_tool("read_image", {"path": "shot.png"})
        result = await c.call_tool("read_attachment", {"ref": sha256(shot)})
        data, media_type, text = image_and_text(result)
        assert (data, media_type, result.structured_content) == (shot, "image/png", None)
        assert text.startswith(f"{sha256(shot)}: image/png, 40x30")
    # The same store, a session on a text-only model: stored, but not shown.
    async with connect(route="text-only", session="other", mode=mode) as c:
        text = refusal(await c.call_tool("read_attachment", {"ref": sha256(shot)}))
        omitted = "[image omitted: this model does not accept images]"
        assert text == f"{sha256(shot)} is stored but cannot be shown: {omitted}"


@pytest.mark.parametrize("name", ["claude-code", "codex-mcp-client"])
async def test_hosts_that_drop_content_for_structured_content_get_none(
    connect: Connect, ws: Path, mode: str, name: str
) -> None:
    info = types.Implementation(name=name, version="1.0")
    async with connect(mode=mode, client_info=info) as c:
        [read_image, _] = (await c.list_tools()).tools
        assert read_image.output_schema is None  # else the host's SDK would want structuredContent
        result = await c.call_tool("read_image", {"path": "shot.png"})
        _, _, text = image_and_text(result)
        assert result.structured_content is None
        assert json.loads(text.split("\n")[1])["path"] == str(ws / "shot.png")


async def test_structured_content_can_be_forced_either_way(connect: Connect, mode: str) -> None:
    claude = types.Implementation(name="claude-code", version="1.0")
    async with connect(mode=mode, client_info=claude, options=Options("always")) as c:
        assert (await c.call_tool("read_image", {"path": "shot.png"})).structured_content is not None
    gemini = types.Implementation(name="gemini-cli-mcp-client", version="1.0")
    async with connect(mode=mode, client_info=gemini) as c:
        assert (await c.call_tool("read_image", {"path": "shot.png"})).structured_content is not None
    async with connect(mode=mode, client_info=gemini, options=Options("never")) as c:
        assert (await c.list_tools()).tools[0].output_schema is None
        assert (await c.call_tool("read_image", {"path": "shot.png"})).structured_content is None


async def test_resource_links_only_when_asked(connect: Connect, ws: Path, mode: str) -> None:
    shot = (ws / "shot.png").read_bytes()
    async with connect(mode=mode, options=Options(resource_links=True)) as c:
        result = await c.call_tool("read_image", {"path": "shot.png"})
        link = result.content[2]
        assert isinstance(link, types.ResourceLink)
        assert (str(link.uri), link.mime_type) == (f"attachstore://sha256/{sha256(shot)[7:]}", "image/png")


async def test_resources_are_the_sessions_images_as_verified_blobs(
    connect: Connect, ws: Path, mode: str
) -> None:
    shot, photo = (ws / "shot.png").read_bytes(), (ws / "photo.jpg").read_bytes()
    async with connect(mode=mode) as c:
        [template] = (await c.list_resource_templates()).resource_templates
        assert template.uri_template == "attachstore://{alg}/{hex}"
        assert (await c.list_resources()).resources == []  # the session does not exist yet
        await c.call_tool("read_image", {"path": "shot.png"})
        await c.call_tool("read_image", {"path": "photo.jpg"})
        listed = (await c.list_resources()).resources
        assert [r.mime_type for r in listed] == ["image/png", "image/jpeg"]
        for resource, data in zip(listed, [shot, photo], strict=True):
            [blob] = (await c.read_resource(str(resource.uri))).contents
            assert isinstance(blob, types.BlobResourceContents)
            assert (base64.b64decode(blob.blob), blob.mime_type) == (data, resource.mime_type)
        for uri in ("attachstore://sha256/" + "0" * 64, "attachstore://md5/abc", "file:///etc/passwd"):
            with pytest.raises(MCPError) as e:
                await c.read_resource(uri)
            assert (e.value.code, e.value.data) == (types.INVALID_PARAMS, {"uri": uri})


async def test_resources_are_listed_in_pages(connect: Connect, ws: Path, mode: str) -> None:
    for i in range(103):
        (ws / f"n{i}.png").write_bytes(png(2, 2, seed=i))
    async with connect(mode=mode) as c:
        for i in range(103):
            assert not (await c.call_tool("read_image", {"path": f"n{i}.png"})).is_error
        first = await c.list_resources()
        second = await c.list_resources(cursor=first.next_cursor)
        assert (len(first.resources), len(second.resources), second.next_cursor) == (100, 3, None)
        assert second.resources[-1].name == "n102.png"


async def test_without_workspace_the_clients_roots_are_the_workspace(
    connect: Connect, ws: Path, tmp_path: Path, mode: str
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "there.png").write_bytes(png(6, 6))
    asked: list[int] = []
    current = [ws]

    async def list_roots(context: Any) -> types.ListRootsResult:
        asked.append(1)
        return types.ListRootsResult(roots=[types.Root(uri=r.as_uri()) for r in current])

    async with connect(workspaces=[], mode=mode, list_roots_callback=list_roots) as c:
        assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error
        assert "does not exist in the workspace" in refusal(
            await c.call_tool("read_image", {"path": "there.png"})
        )
        current[:] = [ws, other]
        if mode == "legacy":  # kept until the client says its roots changed
            await c.session.send_notification(types.RootsListChangedNotification())
        assert not (await c.call_tool("read_image", {"path": "there.png"})).is_error
        assert "outside the workspace" in refusal(await c.call_tool("read_image", {"path": "../secret.png"}))
    # Modern clients are asked on each call (in the call's answer); legacy ones once, and after the change.
    assert len(asked) == (4 if mode == "auto" else 2)


async def test_workspace_flags_win_over_the_clients_roots(
    connect: Connect, ws: Path, tmp_path: Path, mode: str
) -> None:
    async def list_roots(context: Any) -> types.ListRootsResult:
        raise AssertionError("not asked")

    async with connect(workspaces=[tmp_path / "ws"], mode=mode, list_roots_callback=list_roots) as c:
        assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error


async def test_without_roots_the_project_dir_then_the_cwd(
    connect: Connect, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    async with connect(workspaces=[], env={"CLAUDE_PROJECT_DIR": str(ws)}, mode=mode) as c:
        assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error
    monkeypatch.chdir(ws)
    async with connect(workspaces=[], env={"CLAUDE_PROJECT_DIR": str(tmp_path / "gone")}, mode=mode) as c:
        assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error
    monkeypatch.chdir(tmp_path)
    async with connect(workspaces=[], mode=mode) as c:
        assert "does not exist" in refusal(await c.call_tool("read_image", {"path": "shot.png"}))
        assert not (await c.call_tool("read_image", {"path": "ws/shot.png"})).is_error


async def test_a_store_that_cannot_open_is_a_tool_error(connect: Connect, tmp_path: Path, mode: str) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    async with connect(config={"data_dir": str(blocked / "data")}, mode=mode) as c:
        # Listed as empty, not a protocol error (on which hosts drop the server's tools); the tools say why.
        assert (await c.list_resources()).resources == []
        assert len((await c.list_resource_templates()).resource_templates) == 1
        text = refusal(await c.call_tool("read_image", {"path": "shot.png"}))
    assert text == (
        "read_image: attachstore answered STORAGE_UNAVAILABLE: "
        "storage I/O error while creating the data dir: Not a directory. Tell the user."
    )


async def test_a_damaged_stored_copy_is_never_shown(
    connect: Connect, ws: Path, data_dir: Path, mode: str
) -> None:
    shot = (ws / "shot.png").read_bytes()
    ref = sha256(shot)
    async with connect(mode=mode) as c:
        await c.call_tool("read_image", {"path": "shot.png"})
        stored = data_dir / "objects" / "sha256" / ref[7:9] / ref[9:11] / ref[7:]
        stored.chmod(0o644)
        stored.write_bytes(shot[:-1] + bytes([shot[-1] ^ 1]))
        text = refusal(await c.call_tool("read_attachment", {"ref": ref}))
        assert text.startswith(f"{ref} is stored but cannot be shown: [image unavailable: its stored copy is")
        with pytest.raises(MCPError) as e:
            await c.read_resource(f"attachstore://sha256/{ref[7:]}")
        assert e.value.code == types.INTERNAL_ERROR
        assert e.value.message.startswith("ATTACHMENT_CORRUPT: ")
        # Reading the file again heals the stored copy.
        assert image_and_text(await c.call_tool("read_image", {"path": "shot.png"}))[0] == shot


async def test_a_session_deleted_meanwhile_is_made_again(
    connect: Connect, make_config: Any, mode: str
) -> None:
    async with connect(mode=mode) as c:
        assert not (await c.call_tool("read_image", {"path": "shot.png"})).is_error
        beside = await Store.open(make_config(), workers=1)
        try:
            assert await beside.sessions.delete(("", "mcp-test")) == 1  # e.g. `attachstore session delete`
            assert not (await c.call_tool("read_image", {"path": "photo.jpg"})).is_error
            again = await beside.sessions.get(("", "mcp-test"))
        finally:
            await beside.close()
        assert (again.route, len(again.holds)) == ("vision", 1)
