"""Media type and dimensions from the first bytes of an image, without decoding it (SPEC section 4). It runs
on every verified read, on the event loop (docs/design.md, "Verified reads"), and answers None rather than
raise."""

from __future__ import annotations

import struct
from typing import NamedTuple

from .containers import (
    EOI,
    FRAME_HEADERS,
    JPEG_HEADER_STEPS,
    PNG_MAX_LENGTH,
    PNG_SIGNATURE,
    SOS,
    U16BE_PAIR,
    U32LE,
    Bytes,
    Malformed,
    jpeg_segments,
)

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")

_PNG_IHDR = b"\x00\x00\x00\x0dIHDR"  # IHDR must come first and is always 13 bytes long
_U16LE_PAIR = struct.Struct("<HH")
_U32BE_PAIR = struct.Struct(">II")


class Header(NamedTuple):  # a named tuple, not a dataclass: the audit probes every object
    media_type: str
    width: int
    height: int


def sniff(data: Bytes) -> str | None:
    if data[:8] == PNG_SIGNATURE:
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def probe_header(data: Bytes, *, bounded: bool = False) -> Header | None:
    """None if not one of the four formats, truncated, malformed, or with a zero side. `bounded`:
    HeaderTooDeep rather than more than JPEG_HEADER_STEPS steps to a JPEG's frame header."""
    media_type = sniff(data)
    if media_type == "image/png":
        size = _png_size(data)
    elif media_type == "image/jpeg":
        size = _jpeg_size(data, JPEG_HEADER_STEPS if bounded else None)
    elif media_type == "image/gif":
        size = _gif_size(data)
    elif media_type == "image/webp":
        size = _webp_size(data)
    else:
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return Header(media_type, size[0], size[1])


def _png_size(data: Bytes) -> tuple[int, int] | None:
    # Signature (8), IHDR length and type (8), width and height; the whole 13-byte IHDR body must be there.
    if len(data) < 29 or data[8:16] != _PNG_IHDR:
        return None
    width, height = _U32BE_PAIR.unpack_from(data, 16)
    if width > PNG_MAX_LENGTH or height > PNG_MAX_LENGTH:
        return None
    return width, height


def _gif_size(data: Bytes) -> tuple[int, int] | None:
    # The 7-byte logical screen descriptor follows the 6-byte signature; its first 4 bytes are the size.
    if len(data) < 13:
        return None
    width, height = _U16LE_PAIR.unpack_from(data, 6)
    return width, height


def _jpeg_size(data: Bytes, steps: int | None) -> tuple[int, int] | None:
    try:
        for marker, start, end, _ in jpeg_segments(data, 0, strict=True, steps=steps):
            if marker in (SOS, EOI):
                return None  # the picture's data, or its end, before any frame header
            if marker in FRAME_HEADERS:
                # Length (2), precision (1), height (2), width (2), component count (1), then 3 bytes a
                # component; libjpeg rejects a frame header whose length disagrees with its component count.
                length = end - start - 2
                if length < 8 or data[start + 9] == 0 or length != 8 + 3 * data[start + 9]:
                    return None
                height, width = U16BE_PAIR.unpack_from(data, start + 5)
                return width, height
    except Malformed:
        return None
    return None  # pragma: no cover - the walk ends at EOI or raises


def _webp_size(data: Bytes) -> tuple[int, int] | None:
    # RIFF, size, WEBP (12 bytes), then the first chunk's FourCC and size; its payload starts at 20.
    if data[12:16] == b"VP8 ":
        # Lossy: a 3-byte frame tag (bit 0 clear on a key frame, and a still image is one), the start code
        # 9d 01 2a, then width and height in 14 bits each (the top 2 bits are a scaling hint).
        if len(data) < 30 or data[20] & 1 or data[23:26] != b"\x9d\x01\x2a":
            return None
        width, height = _U16LE_PAIR.unpack_from(data, 26)
        return width & 0x3FFF, height & 0x3FFF
    if data[12:16] == b"VP8L":
        # Lossless: signature 0x2f, then width-1 and height-1 in 14 bits each, alpha bit, 3-bit version 0.
        if len(data) < 25 or data[20] != 0x2F:
            return None
        (bits,) = U32LE.unpack_from(data, 21)
        if bits >> 29:
            return None
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if data[12:16] == b"VP8X":
        # Extended: flags (1), reserved (3), then canvas width-1 and height-1 in 24 bits each.
        if len(data) < 30:
            return None
        width = data[24] | data[25] << 8 | data[26] << 16
        height = data[27] | data[28] << 8 | data[29] << 16
        return width + 1, height + 1
    return None
