"""POST /v1/render."""

from __future__ import annotations

import collections

import msgspec
import pybase64
from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter

from ..render import Rendered, RenderRequest, render
from ..render.model import Image
from .common import STORE, read_json, tenant_of
from .sending import sending

RENDER_BODY = 16 * 1024 * 1024  # a long conversation is text; the images are refs
render_decoder = msgspec.json.Decoder(RenderRequest)
_CUT = b"\0"  # never in msgspec's JSON, which escapes every control character in a string


async def handle(request: web.Request) -> web.Response:
    store, tenant = request.app[STORE], tenant_of(request)
    # The body counts against the bytes request bodies may hold at once (with the admissions'), for as long
    # as the render runs: it is decoded and kept until the answer is made.
    with store.body_slot(tenant) as slot:
        body = await read_json(request, render_decoder, RENDER_BODY, "send a shorter conversation", slot.hold)
        share = sending(request)
        rendered = await render(store, body, tenant=tenant, embed=ImageSlot, claim=share.claim)
        answer = Answer(rendered)
    share.claim(answer.memory)  # the images' bytes were claimed before they were read
    return web.Response(body=answer)


class ImageSlot:
    """Where an image's base64 goes in the answer (an `embed` for render): the JSON of that string is `head`
    (its opening quote and prefix, such as a data URL's start), then the base64 of `data`, then a quote."""

    __slots__ = ("data", "head")

    def __init__(self, prefix: str, image: Image) -> None:
        self.head = msgspec.Raw(msgspec.json.encode(prefix)[:-1] + _CUT)
        self.data = image.data


class Answer(payload.Payload):
    """The JSON of a render made with `embed=ImageSlot`: byte for byte what the JSON encoder gives for the
    same render with strings. Each image's base64 is encoded only when its turn comes to be written, so that
    encoding overlaps sending and the base64 is never copied into a str, escaped, joined into one buffer, or
    held whole; an image that appears more than once is encoded once, kept until its last appearance."""

    def __init__(self, rendered: Rendered) -> None:
        images: list[bytes | bytearray] = []

        def splice(value: object) -> msgspec.Raw:
            if not isinstance(value, ImageSlot):
                raise TypeError(f"cannot encode {type(value).__name__}")
            images.append(value.data)
            return value.head

        texts = msgspec.json.Encoder(enc_hook=splice).encode(rendered).split(_CUT)
        if len(texts) != len(images) + 1:  # pragma: no cover - msgspec escapes every NUL in a string
            raise RuntimeError("the JSON of a render holds a NUL byte of its own")
        super().__init__(rendered, content_type="application/json")
        # Each image's string closes in the text after it: the base64 is written as the encoder gives it.
        self._texts = [texts[0], *[b'"' + text for text in texts[1:]]]
        self._images = images
        self._size = sum(map(len, self._texts)) + sum(_encoded_size(data) for data in images)
        distinct = {id(data): data for data in images}
        repeated = {key for key, n in collections.Counter(map(id, images)).items() if n > 1}
        # What writing holds besides the images' bytes: the texts, the base64 of the image being written,
        # and that of every image still to appear again.
        self.memory = sum(map(len, self._texts)) + sum(_encoded_size(distinct[key]) for key in repeated)
        self.memory += max((_encoded_size(d) for k, d in distinct.items() if k not in repeated), default=0)

    async def write(self, writer: AbstractStreamWriter) -> None:
        left = collections.Counter(id(data) for data in self._images)
        kept: dict[int, bytes] = {}  # the base64 of an image still to appear again
        await writer.write(self._texts[0])
        for data, text in zip(self._images, self._texts[1:], strict=True):
            key = id(data)
            left[key] -= 1
            encoded = kept.pop(key, None) or _encode(data)
            if left[key]:
                kept[key] = encoded
            await writer.write(encoded)
            await writer.write(text)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        pieces = [self._texts[0]]
        for data, text in zip(self._images, self._texts[1:], strict=True):
            pieces += (_encode(data), text)
        return b"".join(pieces).decode(encoding, errors)


def _encode(data: bytes | bytearray) -> bytes:
    # Standard padded base64 as msgspec writes bytes, with pybase64's faster encoder (docs/performance.md).
    # On the event loop: a trip to a thread per image would cost more than it frees.
    return pybase64.b64encode(data)


def _encoded_size(data: bytes | bytearray) -> int:
    return 4 * ((len(data) + 2) // 3)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v1/render", handle)
