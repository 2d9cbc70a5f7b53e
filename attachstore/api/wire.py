"""Wire shapes of the HTTP API (SPEC section 8), decoded and encoded with msgspec."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Source = Literal["user", "tool", "mcp", "command"]


class _In(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class ImageIn(_In, frozen=True):
    data: str
    media_type: str | None = None
    name: Annotated[str, Meta(max_length=4096)] | None = None


class AdmitRequest(_In, frozen=True):
    source: Source
    images: list[ImageIn]


class Attachment(msgspec.Struct):
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None


class AdmitAnswer(msgspec.Struct):
    attachments: list[Attachment]


class ErrorBody(msgspec.Struct, omit_defaults=True):
    code: str
    message: str
    index: int | None = None
    hint: str | None = None


class ErrorAnswer(msgspec.Struct):
    error: ErrorBody


admit_decoder = msgspec.json.Decoder(AdmitRequest)
encoder = msgspec.json.Encoder()
