"""Media type and dimensions from the first bytes of an image, without decoding it (SPEC section 4).

Runs in the gate and on every verified read, on the event loop, so it reads only fixed header fields,
allocates next to nothing, and never raises: anything truncated or malformed gives None. Only a JPEG's
frame header lies at no fixed place: the probe walks the marker segments before it, and bounded, it gives
up past JPEG_HEADER_STEPS of them (HeaderTooDeep), which the gate refuses.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

from .containers import JPEG_HEADER_STEPS, Bytes, HeaderTooDeep

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IHDR = b"\x00\x00\x00\x0dIHDR"  # IHDR must come first and is always 13 bytes long
_U16BE = struct.Struct(">H")
_U16BE_PAIR = struct.Struct(">HH")
_U16LE_PAIR = struct.Struct("<HH")
_U32BE_PAIR = struct.Struct(">II")
_U32LE = struct.Struct("<I")

# Start-of-frame markers carry the dimensions; C4 (DHT), C8 (JPG) and CC (DAC) share the range but don't.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# TEM and RST0-7 stand alone: no length field follows them.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
# A stuffed zero, a second SOI, EOI or the start of a scan before any frame header: not a JPEG we can size.
_JPEG_NO_FRAME = frozenset({0x00, 0xD8, 0xD9, 0xDA})
# The 0xFF before a marker code and any fill bytes (more 0xFF) before it; nothing follows, so no backtracking.
_JPEG_FILL = re.compile(rb"\xff+")


class Header(NamedTuple):
    """What the fixed header fields say. A named tuple: the audit probes every object of the store."""

    media_type: str
    width: int
    height: int


def sniff(data: Bytes) -> str | None:
    """The media type the magic bytes name, if it is one of MEDIA_TYPES."""
    if data[:8] == _PNG_SIGNATURE:
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def probe_header(data: Bytes, *, bounded: bool = False) -> Header | None:
    """Media type, width and height from the header alone; None if it is not one of the four formats,
    is truncated before the dimensions, is malformed, or declares a zero side. `bounded`: raise
    HeaderTooDeep rather than take more than JPEG_HEADER_STEPS steps to a JPEG's frame header."""
    media_type = sniff(data)
    if media_type == "image/png":
        size = _png_size(data)
    elif media_type == "image/jpeg":
        # Every step takes at least a byte: unbounded, the walk may take as many steps as there are bytes.
        size = _jpeg_size(data, JPEG_HEADER_STEPS if bounded else len(data))
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
    if width > 0x7FFFFFFF or height > 0x7FFFFFFF:  # PNG limits both to 2**31 - 1
        return None
    return width, height


def _gif_size(data: Bytes) -> tuple[int, int] | None:
    # The 7-byte logical screen descriptor follows the 6-byte signature; its first 4 bytes are the size.
    if len(data) < 13:
        return None
    width, height = _U16LE_PAIR.unpack_from(data, 6)
    return width, height


def _jpeg_size(data: Bytes, steps: int) -> tuple[int, int] | None:
    end = len(data)
    pos = 2  # past SOI
    while True:
        if pos >= end or data[pos] != 0xFF:
            return None  # bytes where a marker must be
        # Any number of 0xFF fill bytes may precede a marker code: a step each, and one for the marker. The
        # match looks no further than the steps left; most markers have none (one 0xFF, then the code).
        if pos + 1 < end and data[pos + 1] != 0xFF:
            fill = 1
        else:
            found = _JPEG_FILL.match(data, pos, pos + steps + 1)
            if found is None:  # pragma: no cover - data[pos] is 0xFF
                return None
            fill = found.end() - pos
        steps -= fill
        if steps < 0:
            raise HeaderTooDeep
        pos += fill
        if pos >= end:
            return None
        marker = data[pos]
        pos += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in _JPEG_NO_FRAME or pos + 2 > end:
            return None
        (length,) = _U16BE.unpack_from(data, pos)  # counts itself, not the marker
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            # length, precision (1), height (2), width (2), component count (1), then 3 bytes a component;
            # libjpeg rejects a frame header whose length disagrees with its component count, so do we.
            if length < 8 or pos + length > end or data[pos + 7] == 0 or length != 8 + 3 * data[pos + 7]:
                return None
            height, width = _U16BE_PAIR.unpack_from(data, pos + 3)
            return width, height
        pos += length


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
        (bits,) = _U32LE.unpack_from(data, 21)
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
