"""Reading request bodies under a cap, without buffering past it. Every byte read counts against the
endpoint's cap and, through `hold`, the admission's budget (the service's `Slot`), so what bodies hold in
memory is bounded before a byte is decoded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import cast

from aiohttp import BodyPartReader, MultipartReader, StreamReader, web
from aiohttp.http import HttpProcessingError

from ..config import Config
from ..errors import InvalidRequest, PayloadTooLarge, Rejected, RequestTimeout
from ..gate import SharedBuffer
from ..service import Upload

_CHUNK = 1 << 16
_TEXT_FIELDS = ("source", "route", "session")
_MAX_TEXT_FIELD = 1024
MAX_FILENAME = 4096  # as a JSON image's name
UNDECLARED = ("", "application/octet-stream")
# A part's bytes are taken as they are; no transfer encoding is undone (RFC 7578 section 4.7 deprecates them).
_AS_THEY_ARE = ("", "7bit", "8bit", "binary")
_PART_HEADERS = 16  # header fields of one part; a form part needs two or three
# Lines from the end of one part's content to the start of the next: the boundary, the header fields, the
# blank line (and before the first part, any preamble; after the last, the epilogue).
_LINES_BETWEEN = 2 + _PART_HEADERS + 4

# For the log line: how much of the body was read, and how many multipart parts were begun.
BODY_BYTES = web.RequestKey("body_bytes", int)
PARTS = web.RequestKey("parts", int)

Hold = Callable[[int], None]  # told the bytes read so far; raises to refuse the rest


def _nothing(size: int) -> None:
    pass


IMAGES_HINT = "send fewer or smaller images per request"


def _too_large(cap: int, hint: str = IMAGES_HINT) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the request body is larger than {cap} bytes, the most this endpoint takes", hint=hint
    )


@contextlib.asynccontextmanager
async def _within(seconds: float) -> AsyncIterator[None]:
    # whole body within `seconds`: a client trickling bytes cannot hold a connection
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {seconds:g} s", hint="send the body without pausing"
        ) from None


async def read_capped(
    request: web.Request, cap: int, within: float, hint: str = IMAGES_HINT, hold: Hold | None = None
) -> bytearray:
    hold = hold or _nothing
    if request.content_length is not None:
        if request.content_length > cap:
            raise _too_large(cap, hint)
        hold(request.content_length)
    buf = bytearray()
    async with _within(within):
        async for chunk in request.content.iter_chunked(_CHUNK):
            buf += chunk
            request[BODY_BYTES] = len(buf)
            if len(buf) > cap:
                raise _too_large(cap, hint)
            hold(len(buf))
    return buf


class _Metered:
    """Every byte the multipart reader consumes (boundaries, part headers, preamble, epilogue too) counts
    against the cap and is told to `hold`; between two parts' contents it may read only a few lines, so no
    run of tiny lines or empty parts costs the event loop more than the parts an admission can have."""

    def __init__(self, request: web.Request, cap: int, hold: Hold) -> None:
        self._request = request
        self._stream = request.content
        self._unread = bytearray()  # what the reader gave back, read again before the stream
        self._cap = cap
        self._hold = hold
        self.consumed = 0
        self._lines = 0
        self._between = False

    def between_parts(self) -> None:
        self._between, self._lines = True, 0

    def in_part(self) -> None:
        self._between = False

    def _took(self, data: bytes) -> bytes:
        self.consumed += len(data)
        self._request[BODY_BYTES] = self.consumed
        if self.consumed > self._cap:
            raise _too_large(self._cap)
        self._hold(self.consumed)
        return data

    async def readline(self, *, max_line_length: int | None = None) -> bytes:
        if self._between:
            self._lines += 1
        if self._lines > _LINES_BETWEEN:
            raise InvalidRequest(
                f"malformed multipart body: more than {_LINES_BETWEEN} lines between two parts "
                f"(a part has at most {_PART_HEADERS} header fields, and a form no preamble)"
            )
        if not self._unread:
            return self._took(await self._stream.readline(max_line_length=max_line_length))
        end = self._unread.find(b"\n") + 1
        if end:
            line = bytes(self._unread[:end])
            del self._unread[:end]
            return self._took(line)
        if max_line_length is not None:  # the bytes given back are the start of the line
            max_line_length = max(1, max_line_length - len(self._unread))
        line = bytes(self._unread) + await self._stream.readline(max_line_length=max_line_length)
        self._unread.clear()
        return self._took(line)

    async def read(self, n: int = -1) -> bytes:
        if not self._unread:
            return self._took(await self._stream.read(n))
        if n < 0:
            data = bytes(self._unread) + await self._stream.read(n)
            self._unread.clear()
            return self._took(data)
        data = bytes(self._unread[:n])
        del self._unread[:n]
        return self._took(data)

    def unread_data(self, data: bytes) -> None:
        """The multipart reader's look-ahead, kept here: StreamReader.unread_data is deprecated."""
        self._unread[:0] = data
        self.consumed -= len(data)

    def at_eof(self) -> bool:
        return not self._unread and self._stream.at_eof()


async def read_multipart(
    request: web.Request, config: Config, hold: Hold | None = None
) -> tuple[dict[str, str], list[Upload]]:
    """A part larger than the gate takes in is counted to its end and only its head kept: the gate rejects it
    by its size, and the batch checks still see the true total."""
    cap = config.http.body_cap(config.limits)
    hold = hold or _nothing
    if request.content_length is not None:
        if request.content_length > cap:
            raise _too_large(cap)
        hold(request.content_length)
    if not _is_multipart(request.headers.get("Content-Type", "")):
        raise InvalidRequest("malformed multipart body: multipart/* content type expected")
    stream = _Metered(request, cap, hold)
    keep = config.admission.upload_limits(config.limits).max_image_bytes
    try:
        async with _within(config.http.read_timeout_seconds):
            reader = MultipartReader(
                request.headers,
                cast(StreamReader, stream),
                max_field_size=config.http.max_header_bytes,
                max_headers=_PART_HEADERS,
            )
            return await _read_parts(request, reader, stream, keep, config.limits.max_batch_images)
    except (ValueError, HttpProcessingError) as e:  # aiohttp's words for "not multipart"
        raise InvalidRequest(f"malformed multipart body: {e}") from None


def _is_multipart(content_type: str) -> bool:
    """MultipartReader's own reading of the header, which asserts so."""
    return content_type.split(";")[0].strip().lower().partition("/")[0] == "multipart"


async def _read_parts(
    request: web.Request, reader: MultipartReader, stream: _Metered, keep: int, max_images: int
) -> tuple[dict[str, str], list[Upload]]:
    fields: dict[str, str] = {}
    uploads: list[Upload] = []
    n = 0
    try:
        while True:
            stream.between_parts()
            part = await reader.next()
            stream.in_part()
            if part is None:
                return fields, uploads
            n += 1
            request[PARTS] = n
            if n > max_images + len(_TEXT_FIELDS):
                raise Rejected(
                    "TOO_MANY_IMAGES",
                    f"more than {max_images} images in one request: the body has more parts than its images "
                    f"and the text fields {', '.join(_TEXT_FIELDS)}",
                    hint=f"send at most {max_images} images per request",
                )
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
                name = _text_field(part, fields)
                value, size = await _content(part, _MAX_TEXT_FIELD)
                if size > _MAX_TEXT_FIELD:
                    raise InvalidRequest(f"form field {name!r} is too long")
                try:
                    fields[name] = value.decode("utf-8")
                except UnicodeDecodeError:
                    raise InvalidRequest(f"form field {name!r} is not UTF-8") from None
                continue
            kept, size = await _file_content(part, keep)
            declared = part.headers.get("Content-Type", "")
            uploads.append(
                Upload(
                    kept,
                    size,
                    None if declared.split(";")[0].strip().lower() in UNDECLARED else declared,
                    part.filename,
                )
            )
    except BaseException:  # the shared memory of the parts read so far goes at once
        close_uploads(uploads)
        raise


async def _content(part: BodyPartReader, keep: int) -> tuple[bytes, int]:
    kept = bytearray()
    size = 0
    while chunk := await part.read_chunk(_CHUNK):
        size += len(chunk)
        kept += chunk
        if size > keep:
            del kept[64:]  # the head, for the type checks: the size check decides
    return bytes(kept), size


async def _file_content(part: BodyPartReader, keep: int) -> tuple[bytes | SharedBuffer, int]:
    # the kept bytes go straight into shared memory, where the decode worker reads them: no copy
    kept = SharedBuffer()
    head = b""
    size = 0
    try:
        while chunk := await part.read_chunk(_CHUNK):
            size += len(chunk)
            if size <= keep:
                kept.write(chunk)
            elif not head:  # too large: only its head is kept, for the type checks
                head = (kept.head(64) + chunk[:64])[:64]
                kept.close()
    except BaseException:
        kept.close()
        raise
    return (kept if size <= keep else head), size


def close_uploads(uploads: list[Upload]) -> None:
    for u in uploads:
        if isinstance(u.payload, SharedBuffer):
            u.payload.close()


def _text_field(part: BodyPartReader, fields: dict[str, str]) -> str:
    if part.name not in _TEXT_FIELDS:
        raise InvalidRequest(
            f"unknown form field {part.name!r}: text fields are source, route and session; "
            "each image is a file part (with a filename)"
        )
    if part.name in fields:
        raise InvalidRequest(f"form field {part.name!r} is given twice")
    return part.name
