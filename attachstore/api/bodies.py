"""Reading request bodies under a cap, without buffering past it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from ..config import Config
from ..errors import InvalidRequest, PayloadTooLarge, RequestTimeout
from ..service import Upload

_CHUNK = 1 << 16
_TEXT_FIELDS = ("source", "route", "session")
_MAX_TEXT_FIELD = 1024
MAX_FILENAME = 4096  # as a JSON image's name
UNDECLARED = ("", "application/octet-stream")
# A part's bytes are taken as they are; no transfer encoding is undone (RFC 7578 section 4.7 deprecates them).
_AS_THEY_ARE = ("", "7bit", "8bit", "binary")


IMAGES_HINT = "send fewer or smaller images per request"


def _too_large(cap: int, hint: str = IMAGES_HINT) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the request body is larger than {cap} bytes, the most this endpoint takes", hint=hint
    )


@contextlib.asynccontextmanager
async def _within(seconds: float) -> AsyncIterator[None]:
    """The whole body must arrive within `seconds`: a client trickling bytes cannot hold a connection."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {seconds:g} s", hint="send the body without pausing"
        ) from None


async def read_capped(request: web.Request, cap: int, within: float, hint: str = IMAGES_HINT) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed `cap`."""
    if request.content_length is not None and request.content_length > cap:
        raise _too_large(cap, hint)
    buf = bytearray()
    async with _within(within):
        async for chunk in request.content.iter_chunked(_CHUNK):
            buf += chunk
            if len(buf) > cap:
                raise _too_large(cap, hint)
    return bytes(buf)


async def read_multipart(request: web.Request, config: Config) -> tuple[dict[str, str], list[Upload]]:
    """Text fields `source`, `route`, `session`, and one image per file part, in order, under the
    configured body cap and `read_timeout`.

    A part is kept up to the most the gate takes in (`max_image_bytes`, or with oversize = "fit" its source
    bound); a larger one is counted to its end and only its head kept: the gate rejects it by its size, and
    the batch checks still see the true total."""
    cap = config.http.body_cap(config.limits)
    if request.content_length is not None and request.content_length > cap:
        raise _too_large(cap)
    keep = config.admission.upload_limits(config.limits).max_image_bytes
    try:
        async with _within(config.http.read_timeout_seconds):
            return await _read_parts(request, cap, keep)
    except (ValueError, AssertionError, HttpProcessingError) as e:  # aiohttp's words for "not multipart"
        raise InvalidRequest(f"malformed multipart body: {e}") from None


async def _read_parts(request: web.Request, cap: int, keep: int) -> tuple[dict[str, str], list[Upload]]:
    fields: dict[str, str] = {}
    uploads: list[Upload] = []
    total = 0
    reader = await request.multipart()
    n = 0
    while (part := await reader.next()) is not None:
        n += 1
        if not isinstance(part, BodyPartReader):
            raise InvalidRequest("nested multipart bodies are not accepted")
        encoding = part.headers.get("Content-Transfer-Encoding", "").strip().lower()
        if encoding not in _AS_THEY_ARE:
            raise InvalidRequest(
                f"form part {n}: Content-Transfer-Encoding {encoding[:40]!r} is not supported",
                hint="send each part's bytes as they are, without a Content-Transfer-Encoding",
            )
        if part.filename is not None and len(part.filename) > MAX_FILENAME:
            raise InvalidRequest(f"a file part's filename is longer than {MAX_FILENAME} characters")
        if part.filename is None:
            if part.name not in _TEXT_FIELDS:
                raise InvalidRequest(
                    f"unknown form field {part.name!r}: text fields are source, route and session; "
                    "each image is a file part (with a filename)"
                )
            value = await part.read()
            total += len(value)
            if len(value) > _MAX_TEXT_FIELD:
                raise InvalidRequest(f"form field {part.name!r} is too long")
            try:
                fields[part.name] = value.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidRequest(f"form field {part.name!r} is not UTF-8") from None
            continue
        kept = bytearray()
        size = 0
        while chunk := await part.read_chunk(_CHUNK):
            size += len(chunk)
            total += len(chunk)
            if total > cap:
                raise _too_large(cap)
            if size <= keep:
                kept += chunk
            elif len(kept) > 64:
                del kept[64:]  # keep the head for the type checks; the size check decides anyway
        declared = part.headers.get("Content-Type", "")
        uploads.append(
            Upload(
                bytes(kept),
                size,
                None if declared.split(";")[0].strip().lower() in UNDECLARED else declared,
                part.filename,
            )
        )
    return fields, uploads
