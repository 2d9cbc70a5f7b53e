"""Sources through the real app (issue 35): a BMP, TIFF or AVIF admitted by JSON and by multipart is stored
as a PNG or a JPEG, the answer naming what it was and saying `converted`; declared types and their aliases;
what is refused, and how."""

from __future__ import annotations

import pytest

from tests.api.test_bodies import END, field, file, post_form
from tests.conftest import MakeClient
from tests.support.http import Client, admit, admit_ok, error_of
from tests.support.images import encode, photo, screenshot
from tests.support.sources import ftyp

VISION = {"vision": {"input_modalities": ["text", "image"]}}


def bmp_photo() -> bytes:
    return encode(photo(320, 240), "BMP")


def tiff_screenshot() -> bytes:
    return encode(screenshot(200, 150, alpha=True), "TIFF", compression="tiff_lzw")


def avif_photo() -> bytes:
    return encode(photo(160, 120), "AVIF")


@pytest.mark.parametrize(
    ("make", "original", "stored"),
    [
        (bmp_photo, "image/bmp", "image/jpeg"),
        (tiff_screenshot, "image/tiff", "image/png"),
        (avif_photo, "image/avif", "image/jpeg"),
    ],
)
async def test_a_source_is_stored_converted_by_json_and_by_multipart(
    client: Client, make: object, original: str, stored: str
) -> None:
    assert callable(make)
    data: bytes = make()
    [by_json] = await admit_ok(client, data)
    response = await post_form(client, field("source", b"user") + file(data, filename="IMG_0042.src") + END)
    assert response.status == 201, await response.text()
    [by_form] = (await response.json())["attachments"]
    assert by_form.pop("name") == "IMG_0042.src"
    assert by_json.pop("name") is None
    assert by_json == by_form  # the same bytes, converted alike
    assert by_json["media_type"] == stored
    normalized = by_json["normalized"]
    assert normalized["original"]["media_type"] == original
    assert normalized["original"]["bytes"] == len(data)
    assert normalized["steps"][0] == "converted"
    read = await client.get(f"/v1/attachments/{by_json['ref']}")
    assert read.status == 200
    assert read.content_type == stored


async def test_a_source_declared_under_an_alias_is_taken(client: Client) -> None:
    [by_json] = await admit_ok(client, bmp_photo(), media_type="image/x-ms-bmp")
    assert by_json["normalized"]["original"]["media_type"] == "image/bmp"
    part = file(tiff_screenshot(), "Content-Type: image/x-tiff", filename="shot.tif")
    response = await post_form(client, field("source", b"user") + part + END)
    assert response.status == 201, await response.text()
    [by_form] = (await response.json())["attachments"]
    assert by_form["normalized"]["original"]["media_type"] == "image/tiff"
    assert by_form["name"] == "shot.png"  # named for what is stored


async def test_a_declaration_that_disagrees_with_a_source_names_what_the_bytes_are(client: Client) -> None:
    error = await error_of(await admit(client, bmp_photo(), media_type="image/heic"))
    assert error == {
        "code": "IMAGE_TYPE_MISMATCH",
        "message": "the image is declared as image/heic but its bytes are BMP (image/bmp)",
        "index": 0,
        "hint": "declare it as image/bmp, or leave the media type out",
    }


async def test_what_is_no_raster_image_is_refused_saying_what_it_is(client: Client) -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'
    error = await error_of(await admit(client, svg))
    assert error["code"] == "UNSUPPORTED_IMAGE_TYPE"
    assert error["message"].startswith(
        "the bytes are text markup (SVG, XML or HTML), not a raster image a model can take"
    )
    video = ftyp(b"mp42", b"isom") + bytes(64)
    error = await error_of(await admit(client, video))
    assert "an ISO media file of no image brand" in error["message"]


async def test_a_damaged_source_is_invalid_image(client: Client) -> None:
    data = bmp_photo()
    error = await error_of(await admit(client, data[: len(data) // 3]))
    assert error["code"] == "INVALID_IMAGE"
    assert error["message"].startswith("the BMP image is damaged: ")


async def test_a_tool_gets_a_source_converted_too(make_client: MakeClient) -> None:
    client = await make_client(routes=VISION)
    response = await admit(client, avif_photo(), source="tool", route="vision")
    assert response.status == 201, await response.text()
    [attachment] = (await response.json())["attachments"]
    assert attachment["normalized"]["original"]["media_type"] == "image/avif"


async def test_with_oversize_reject_a_source_within_the_limits_is_converted(make_client: MakeClient) -> None:
    client = await make_client(admission={"oversize": "reject"})
    [attachment] = await admit_ok(client, bmp_photo())
    assert attachment["normalized"]["steps"] == ["converted", "reencoded"]
