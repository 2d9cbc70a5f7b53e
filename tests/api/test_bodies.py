"""Request bodies under their caps (api/bodies.py): every byte of a multipart body counted, its parts
bounded by what an admission can have, its bytes taken as they are and kept up to the gate's bound; and the
admission's place, taken before its body is read (service/slots.py)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import BodyPartReader, MultipartReader, StreamReader, web

from attachstore.api.bodies import _Metered
from attachstore.api.common import STORE
from attachstore.logs import FIELDS
from tests.conftest import MakeClient
from tests.support.http import Client, admit, admit_ok, b64, error_of
from tests.support.images import png, png_chunk, png_insert
from tests.support.waiting import eventually

BOUNDARY = "test-boundary"
FORM = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
JSON = {"Content-Type": "application/json"}


def part(headers: Iterable[str], content: bytes = b"") -> bytes:
    head = f"--{BOUNDARY}\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    return head.encode() + content + b"\r\n"


def field(name: str, value: bytes, *extra: str) -> bytes:
    return part([f'Content-Disposition: form-data; name="{name}"', *extra], value)


def file(content: bytes, *extra: str, filename: str = "x.png") -> bytes:
    return part([f'Content-Disposition: form-data; name="f"; filename="{filename}"', *extra], content)


END = f"--{BOUNDARY}--\r\n".encode()


async def chunked(body: bytes) -> AsyncIterator[bytes]:
    """The body with no declared length, as a client streaming it sends it."""
    for at in range(0, len(body), 8192):
        yield body[at : at + 8192]


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [getattr(r, FIELDS) for r in caplog.records if r.name == "attachstore.access"]


async def post_form(client: Client, body: bytes | AsyncIterator[bytes]) -> aiohttp.ClientResponse:
    data = io.BytesIO(body) if isinstance(body, bytes) else body
    return await client.post("/v1/attachments", data=data, headers=FORM)


# -- every byte counts ------------------------------------------------------------------------------------


async def test_every_byte_of_a_multipart_body_counts_against_the_cap(make_client: MakeClient) -> None:
    client = await make_client(http={"max_body_bytes": 64 * 1024})
    # The images are a byte each; their parts' headers make the body twice the cap.
    padding = [f"X-Padding-{i}: {'p' * 4000}" for i in range(10)]
    body = field("source", b"user") + b"".join(file(b"x", *padding) for _ in range(4)) + END
    assert len(body) > 2 * 64 * 1024
    response = await post_form(client, chunked(body))
    assert (response.status, (await error_of(response))["code"]) == (413, "PAYLOAD_TOO_LARGE")


async def test_a_body_is_refused_at_the_first_part_no_admission_has(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="attachstore.access")
    client = await make_client(limits={"max_batch_images": 2})
    body = field("source", b"user") + file(b"", filename="n" * 4000) * 1000 + END
    response = await post_form(client, chunked(body))
    error = await error_of(response)
    assert (response.status, error["code"]) == (422, "TOO_MANY_IMAGES")
    assert "more than 2 images" in error["message"]
    [line] = access_lines(caplog)
    assert line["parts"] == 2 + 3 + 1  # two images, the three text fields, and the one too many
    assert line["body_bytes"] < 7 * 4200


async def test_within_the_parts_an_admission_has_the_gate_decides(make_client: MakeClient) -> None:
    client = await make_client(routes={"vision": {"input_modalities": ["text", "image"]}})
    # 17 images and two text fields: within the 19 parts an admission can have, so the gate answers, as it
    # does for the same batch in JSON: for a tool, a soft rejection with a diagnostic per image.
    body = field("source", b"tool") + field("route", b"vision") + file(png(2, 2)) * 17 + END
    response = await post_form(client, body)
    assert response.status == 200
    answer = await response.json()
    assert answer["degraded"] is True
    assert {d["code"] for d in answer["diagnostics"]} == {"TOO_MANY_IMAGES"}
    assert len(answer["diagnostics"]) == 17


async def test_a_preamble_of_many_lines_is_refused(client: Client) -> None:
    body = b"\r\n" * 10_000 + field("source", b"user") + file(png(2, 2)) + END
    response = await post_form(client, chunked(body))
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "lines between two parts" in error["message"]


async def test_a_part_with_too_many_header_fields_is_refused(client: Client) -> None:
    body = field("source", b"user") + file(png(2, 2), *(f"X-{i}: y" for i in range(20))) + END
    response = await post_form(client, body)
    assert (response.status, (await error_of(response))["code"]) == (400, "INVALID_REQUEST")


async def test_a_text_field_given_twice_is_refused(client: Client) -> None:
    body = field("source", b"user") + field("source", b"tool") + file(png(2, 2)) + END
    response = await post_form(client, body)
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "given twice" in error["message"]


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
    assert by_form == {**by_json, "name": "x.jpg"}  # noise is a photo: a JPEG now, and named so
    assert by_form["normalized"]["original"]["bytes"] == len(noisy)


def padded_png(size: int) -> bytes:
    """A small PNG of exactly `size` bytes: a private ancillary chunk fills it up (decoders skip it)."""
    image = png(64, 48)
    body = size - len(image) - 12
    return png_insert(image, b"IDAT", png_chunk(b"prVt", bytes(body)))


async def test_one_image_at_the_source_bound_is_admitted_by_json_and_by_multipart(client: Client) -> None:
    """The default body cap takes an image of fit_max_bytes (20 MiB), whose base64 is 28 MB, by both."""
    image = padded_png(20 * 2**20)
    [by_json] = await admit_ok(client, image, name="x.png")
    assert by_json["normalized"]["original"]["bytes"] == 20 * 2**20
    response = await post_form(client, field("source", b"user") + file(image) + END)
    assert response.status == 201, await response.text()
    [by_form] = (await response.json())["attachments"]
    assert by_form == by_json
    over = await error_of(await admit(client, padded_png(20 * 2**20 + 1)))
    assert (over["code"], over["index"]) == ("IMAGE_TOO_LARGE", 0)


# -- the admission's place, before its body ---------------------------------------------------------------


class Trickle:
    """A body that sends its first piece, then waits for `go` before the rest."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.go = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.body[:10]
        await self.go.wait()
        yield self.body[10:]


def admission(*images: bytes) -> bytes:
    return json.dumps({"source": "user", "images": [{"data": b64(i)} for i in images]}).encode()


async def started(client: Client, body: Trickle, declared: bool = False) -> asyncio.Task[Any]:
    """An admission whose body has begun to arrive, and holds its place."""
    headers = dict(JSON)
    if declared:
        headers["Content-Length"] = str(len(body.body))
    task = asyncio.create_task(client.post("/v1/attachments", data=body, headers=headers))
    try:
        await eventually(
            lambda: task.done() or client.app[STORE].admissions.slots.taken > 0,
            "the admission to take a place",
        )
    except AssertionError:
        task.cancel()
        raise
    if task.done():
        raise AssertionError(f"the admission ended before it took a place: {await task}")
    return task


async def test_a_place_is_taken_before_the_body_is_read(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="attachstore.access")
    client = await make_client(admission={"max_concurrent": 1})
    slow = Trickle(admission(png(3, 3)))
    first = await started(client, slow)
    busy = await admit(client, png(4, 4))
    assert (busy.status, (await error_of(busy))["code"]) == (503, "SERVER_BUSY")
    assert busy.headers["Retry-After"] == "1"
    slow.go.set()
    assert (await first).status == 201
    assert (await admit(client, png(4, 4))).status == 201
    refused = [line for line in access_lines(caplog) if line["status"] == 503]
    assert [line.get("body_bytes") for line in refused] == [None]  # not a byte of it was read


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "chunked"])
async def test_the_bodies_held_at_once_are_bounded_by_the_budget(
    make_client: MakeClient, declared: bool
) -> None:
    client = await make_client(admission={"max_buffered_bytes": 500_000})
    slots = client.app[STORE].admissions.slots
    body = admission(png(300, 300))  # some 360 KB of JSON
    slow = Trickle(body)
    first = await started(client, slow, declared=True)  # holds its declared length from the start
    assert slots.held == len(body)
    second = await client.post(
        "/v1/attachments",
        data=io.BytesIO(body) if declared else chunked(body),
        headers=JSON,
    )
    error = await error_of(second)
    assert (second.status, error["code"]) == (503, "SERVER_BUSY")
    assert "500,000" in error["message"]
    slow.go.set()
    assert (await first).status == 201
    assert (slots.taken, slots.held) == (0, 0)
    # Alone, an admission may hold a whole body, larger than the budget.
    alone = admission(png(300, 300, seed=1), png(300, 300, seed=2))
    assert len(alone) > 500_000
    assert (await client.post("/v1/attachments", data=chunked(alone), headers=JSON)).status == 201


async def test_no_upload_memory_outlives_its_admission(client: Client) -> None:
    """Uploads go to the decode workers in shared memory (gate/shared.py); each is let go of when its
    admission ends, admitted, refused or cut off."""
    import gc

    from tests.gate.test_shared import mapped_uploads

    gc.collect()
    before = mapped_uploads()
    ok = await post_form(client, field("source", b"user") + file(png(20, 20)) + END)
    assert ok.status == 201
    bad = await post_form(client, field("source", b"user") + file(b"\x89PNG\r\n\x1a\n" + b"\0" * 60) + END)
    assert bad.status == 422
    assert (await admit(client, png(21, 21))).status == 201
    refused = await client.post("/v1/attachments", data=admission(png(22, 22))[:-30] + b'"}]}', headers=JSON)
    assert refused.status == 400
    trickle = Trickle(field("source", b"user") + file(png(23, 23)) + END)
    slots = client.app[STORE].admissions.slots
    cut = asyncio.create_task(client.post("/v1/attachments", data=trickle, headers=FORM))
    await eventually(lambda: slots.taken > 0, "the cut admission to take its place")
    cut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cut
    await eventually(lambda: slots.taken == 0, "the cut admission to end")  # after its uploads are let go
    gc.collect()
    assert mapped_uploads() == before


class _Pieces:
    """A request body's stream that gives its bytes a few at a time, so that the reader must look ahead."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self, n: int = -1) -> bytes:
        piece, self.data = (
            self.data[: min(n, 7) if n >= 0 else None],
            self.data[min(n, 7) if n >= 0 else None :],
        )
        return piece

    async def readline(self, *, max_line_length: int | None = None) -> bytes:
        end = self.data.find(b"\n") + 1 or len(self.data)
        line, self.data = self.data[:end], self.data[end:]
        return line

    def at_eof(self) -> bool:
        return not self.data


class _Request(dict[Any, Any]):
    def __init__(self, content: _Pieces) -> None:
        super().__init__()
        self.content = content


async def test_the_multipart_reader_asks_of_its_stream_only_what_the_meter_has() -> None:
    # aiohttp's MultipartReader is given _Metered as its StreamReader: which of a stream's methods it calls
    # is aiohttp's internal (pyproject.toml pins aiohttp's minor versions for it). A new one fails here.
    content = b"a" * 40 + b"\r\n--" + BOUNDARY.encode()[:-1] + b"\r\n" + b"b" * 30  # almost a boundary
    body = b"preamble\r\n" + file(content) + field("source", b"user") + f"--{BOUNDARY}--\r\n".encode()
    stream = _Metered(cast(web.Request, _Request(_Pieces(body))), len(body), lambda n: None)
    reader = MultipartReader(FORM, cast(StreamReader, stream))
    parts = []
    while (part := await reader.next()) is not None:
        assert isinstance(part, BodyPartReader)
        parts.append(await part.read())
    assert parts == [content, b"user"]
    assert stream.consumed == len(body)
