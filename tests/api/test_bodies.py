"""Request bodies under their caps (api/bodies.py): a multipart body's bytes taken as they are and kept up
to the gate's bound."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterable

import aiohttp
import pytest

from tests.conftest import MakeClient
from tests.support.http import Client, admit_ok, error_of
from tests.support.images import png

BOUNDARY = "test-boundary"
FORM = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


def part(headers: Iterable[str], content: bytes = b"") -> bytes:
    head = f"--{BOUNDARY}\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    return head.encode() + content + b"\r\n"


def field(name: str, value: bytes, *extra: str) -> bytes:
    return part([f'Content-Disposition: form-data; name="{name}"', *extra], value)


def file(content: bytes, *extra: str, filename: str = "x.png") -> bytes:
    return part([f'Content-Disposition: form-data; name="f"; filename="{filename}"', *extra], content)


END = f"--{BOUNDARY}--\r\n".encode()


async def post_form(client: Client, body: bytes | AsyncIterator[bytes]) -> aiohttp.ClientResponse:
    data = io.BytesIO(body) if isinstance(body, bytes) else body
    return await client.post("/v1/attachments", data=data, headers=FORM)


# -- bytes as they are ------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["x-unknown", "base64", "quoted-printable"])
@pytest.mark.parametrize("where", ["text field", "file part"])
async def test_a_part_with_a_transfer_encoding_is_a_bad_request(
    client: Client, encoding: str, where: str
) -> None:
    header = f"Content-Transfer-Encoding: {encoding}"
    if where == "text field":
        body = field("source", b"user", header) + file(png(2, 2)) + END
    else:
        body = field("source", b"user") + file(png(2, 2), header) + END
    response = await post_form(client, body)
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")  # it was a 500 for a text field
    assert encoding in error["message"]


@pytest.mark.parametrize("encoding", ["binary", "8bit", "7BIT"])
async def test_the_identity_transfer_encodings_are_taken(client: Client, encoding: str) -> None:
    header = f"Content-Transfer-Encoding: {encoding}"
    body = field("source", b"user", header) + file(png(2, 2), header) + END
    response = await post_form(client, body)
    assert response.status == 201, await response.text()


async def test_fit_takes_the_same_bytes_by_multipart_as_by_json(make_client: MakeClient) -> None:
    client = await make_client(limits={"max_image_bytes": 400_000}, admission={"oversize": "fit"})
    noisy = png(1000, 1000)  # noise: about 3 MB as PNG, over the limit and within fit's source bound
    [by_json] = await admit_ok(client, noisy)
    response = await post_form(client, field("source", b"user") + file(noisy) + END)
    assert response.status == 201, await response.text()  # it was INVALID_IMAGE: the part was cut short
    [by_form] = (await response.json())["attachments"]
    assert by_form == {**by_json, "name": "x.png"}
    assert by_form["normalized"]["original"]["bytes"] == len(noisy)
