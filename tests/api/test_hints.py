"""Answers that lead to the fix in one step (issue 17): the same words for the same mistake by JSON and by
multipart, aliases taken as what they name, a hint that asks for the image again in the words that fit its
source, and a reference refused with what is wrong with it. Through the real app."""

from __future__ import annotations

import pytest

from tests.api.test_bodies import END, field, file, post_form
from tests.conftest import MakeClient
from tests.support.http import Client, admit, admit_ok, error_of, post_json
from tests.support.images import apng, encode, jpeg, photo, png, ui_screenshot

VISION = {"vision": {"input_modalities": ["text", "image"]}}
HEX = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


async def test_an_empty_upload_says_empty_by_json_and_by_multipart(client: Client) -> None:
    by_json = await error_of(await admit(client, b""))
    by_form = await error_of(await post_form(client, field("source", b"user") + file(b"") + END))
    assert by_json == by_form
    assert (by_json["code"], by_json["message"], by_json["index"]) == (
        "UNSUPPORTED_IMAGE_TYPE",
        "the image is empty (0 bytes)",
        0,
    )
    assert by_json["hint"].endswith("then attach it again")


async def test_a_missing_source_gets_the_same_message_by_json_and_by_multipart(client: Client) -> None:
    response = await post_json(client, "/v1/attachments", {"images": [{"data": "aGk="}]})
    by_json = await error_of(response)
    by_form = await error_of(await post_form(client, file(png(4, 4)) + END))
    assert response.status == 400
    assert by_json == by_form
    assert by_json == {
        "code": "INVALID_REQUEST",
        "message": "source: missing; say where the images come from: one of user, tool, mcp, command",
    }
    wrong = await error_of(await admit(client, png(4, 4), source="upload"))
    assert wrong["message"] == "source: must be one of user, tool, mcp, command, not 'upload'"


@pytest.mark.parametrize(
    ("declared", "image", "canonical"),
    [
        ("image/jpg", jpeg(8, 8), "image/jpeg"),
        ("image/pjpeg", jpeg(8, 8), "image/jpeg"),
        ("image/x-png", png(8, 8), "image/png"),
        ("image/apng", apng(8, 8, 2), "image/png"),
    ],
)
async def test_aliases_are_admitted_and_answered_under_the_canonical_name(
    client: Client, declared: str, image: bytes, canonical: str
) -> None:
    [by_json] = await admit_ok(client, image, media_type=declared)
    assert by_json["media_type"] == canonical
    response = await post_form(
        client, field("source", b"user") + file(image, f"Content-Type: {declared}") + END
    )
    assert response.status == 201, await response.text()
    assert (await response.json())["attachments"][0]["media_type"] == canonical


async def test_a_declared_type_that_is_wrong_names_the_type_of_the_bytes(client: Client) -> None:
    error = await error_of(await admit(client, png(8, 8), media_type="image/jpg"))
    assert error["code"] == "IMAGE_TYPE_MISMATCH"
    assert error["message"] == "the image is declared as image/jpg but its bytes are PNG (image/png)"
    assert error["hint"] == "declare it as image/png, or leave the media type out"
    await admit_ok(client, png(8, 8), media_type="image/png")  # the hint, followed, is the answer


async def test_a_soft_rejection_names_the_canonical_type_and_says_read_it_again(
    make_client: MakeClient,
) -> None:
    client = await make_client(routes=VISION)
    response = await admit(client, jpeg(8, 8)[:-40], source="tool", route="vision", media_type="image/jpg")
    body = await response.json()
    assert body["degraded"] is True
    [diagnostic] = body["diagnostics"]
    assert (diagnostic["code"], diagnostic["media_type"]) == ("INVALID_IMAGE", "image/jpeg")


@pytest.mark.parametrize(("source", "again"), [("user", "attach it again"), ("command", "attach it again")])
async def test_a_person_is_asked_to_attach_it_again_never_to_read_it(
    make_client: MakeClient, source: str, again: str
) -> None:
    client = await make_client(admission={"oversize": "reject"})
    for image in (encode(photo(2400, 1600), "JPEG"), b"%PDF-1.4\n" + bytes(64), b""):
        error = await error_of(await admit(client, image, source=source))
        assert error["hint"].endswith(again), error
        assert "read it again" not in error["hint"]


async def test_a_tool_is_asked_to_read_it_again(make_client: MakeClient) -> None:
    client = await make_client(routes=VISION, admission={"oversize": "reject"})
    image = encode(photo(2400, 1600), "JPEG")
    body = await (await admit(client, image, source="tool", route="vision")).json()
    [diagnostic] = body["diagnostics"]
    assert diagnostic["hint"] == (
        "the limit is 2000 pixels a side and this image is 2400x1600; shrink it to at most 2000x1333 and "
        "read it again"
    )
    assert "read it again" in body["text"]


async def test_415_says_which_content_types_to_send(client: Client) -> None:
    response = await client.post("/v1/attachments", data=b"x", headers={"Content-Type": "text/plain"})
    error = await error_of(response)
    assert (response.status, error["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert error["hint"] == (
        "send Content-Type: application/json with the images as base64, or multipart/form-data with one file "
        "part per image"
    )
    response = await client.put("/v1/sessions/s-1", data=b"{}", headers={"Content-Type": "text/plain"})
    error = await error_of(response)
    assert (response.status, error["hint"]) == (
        415,
        "send the body as JSON with the header Content-Type: application/json",
    )


@pytest.mark.parametrize(
    ("text", "says", "hint"),
    [
        (HEX, "it has no algorithm", f"add the algorithm: sha256:{HEX}"),
        (
            f"sha256:{HEX.upper()}",
            "it is in upper case; a reference is lower case",
            f"write it in lower case: sha256:{HEX}",
        ),
        (f"sha256:{HEX}.png", "it ends in a file extension ('.png')", f"drop it: sha256:{HEX}"),
        (f"sha256:{HEX}{HEX}", "it is 135 characters; a reference has at most 128", None),
        (f"md5:{HEX[:32]}", "the algorithm 'md5' is unknown; it is sha256 or blake3", None),
        (f"sha256:{HEX[:40]}", "the digest has 40 hex digits, not 64", None),
    ],
)
async def test_an_invalid_ref_says_what_is_wrong_with_it(
    client: Client, text: str, says: str, hint: str | None
) -> None:
    response = await client.get(f"/v1/attachments/{text}")
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_ATTACHMENT_REF")
    assert error["message"].endswith(f": {says}")
    assert error["hint"] == (hint or "a reference is sha256: (or blake3:) and 64 lowercase hex digits")


async def test_a_retina_screenshot_is_stored_as_a_png_under_its_own_name(client: Client) -> None:
    shot = encode(ui_screenshot(2880, 1800), "PNG")
    [a] = await admit_ok(client, shot, media_type="image/png", name="retina.png")
    assert {k: a[k] for k in ("media_type", "width", "height", "frames", "name")} == {
        "media_type": "image/png",
        "width": 2000,
        "height": 1250,
        "frames": 1,
        "name": "retina.png",
    }
    assert a["normalized"] == {
        "original": {"media_type": "image/png", "bytes": len(shot), "width": 2880, "height": 1800},
        "steps": ["resized", "reencoded"],
    }
    response = await client.get(f"/v1/attachments/{a['ref']}")
    assert response.headers["Content-Type"] == "image/png"


@pytest.mark.parametrize(
    ("name", "stored_as"),
    [("photo.png", "photo.jpg"), ("IMG_1.PNG", "IMG_1.jpg"), ("photo", "photo"), ("notes.txt", "notes.txt")],
)
async def test_a_normalized_image_whose_extension_no_longer_matches_is_renamed(
    client: Client, name: str, stored_as: str
) -> None:
    [a] = await admit_ok(client, encode(photo(2400, 1600), "PNG"), name=name)
    assert (a["media_type"], a["name"]) == ("image/jpeg", stored_as)
    meta = await (await client.get(f"/v1/attachments/{a['ref']}/meta")).json()
    assert meta["name"] == stored_as
