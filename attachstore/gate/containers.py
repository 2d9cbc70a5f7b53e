"""Container walks: each format's structure read without decoding a pixel, to find where the image ends.

The gate walks PNG chunks, GIF blocks and the WebP RIFF header on every image, because Pillow is too lenient
to notice a bad chunk CRC or a GIF cut between two frames; it walks JPEG segments only to find the end, when
bytes after the end are refused (SPEC section 4, `admission.trailing_data`). Pure functions of the bytes,
linear in their length; a walk raises Malformed naming the first structural fault it meets.

`jpeg_segments` is the one JPEG walk: `jpeg_end` follows it to the end of each picture, and metadata.py's
surgery to the segments it removes.
"""

from __future__ import annotations

import mmap
import re
import struct
import zlib
from collections.abc import Iterator

Bytes = bytes | bytearray | mmap.mmap  # read by slices, indexes and struct: any buffer that reads like bytes

_PNG_CHUNK = struct.Struct(">I4s")
_U16BE = struct.Struct(">H")
_U32BE = struct.Struct(">I")
_U32LE = struct.Struct("<I")
# The next marker that is not TEM or RST0-7 (which stand alone, with no length): the last 0xFF of a run (the
# others are fill bytes) and the code after it. Entropy-coded data is passed over by the same search: in it
# 0xFF is followed only by a stuffed zero or a restart marker, until the marker that ends the scan. Stray
# bytes between segments are passed over too, as libjpeg and Pillow pass over them. (Fixed length and no
# repetition: linear, where "\xff+" would backtrack over a long run of 0xFF once for every byte of it.)
_MARKER = re.compile(rb"\xff([^\x00\x01\xd0-\xd7\xff])")
_SOS, _EOI, _SOI, _APP2 = 0xDA, 0xD9, 0xD8, 0xE2
_MP_ENTRIES = 0xB002  # the MP index tag whose value is one 16-byte entry per picture (CIPA DC-007)

# The steps (a marker, the frame header's included, or a fill byte) a bounded probe takes before it gives
# up on a JPEG. Encoders write a few dozen segments before the frame header (APPn metadata, DQT, DHT, COM; an
# ICC profile in at most 255 chunks), and 1,024 segments of the largest size hold 64 MiB; 917,000 empty
# ones hold only 3.6 MB, and walking them costs 0.3 s. The gate refuses a JPEG that needs more steps, so
# that the probe of every image it admits costs at most this many wherever it runs.
JPEG_HEADER_STEPS = 1024


class Malformed(Exception):
    """The first structural fault a walk found, worded for a rejection message."""


class HeaderTooDeep(Exception):
    """A bounded probe met a JPEG whose frame header comes after more than JPEG_HEADER_STEPS steps."""

    def __init__(self) -> None:
        super().__init__(
            f"its frame header comes after more than {JPEG_HEADER_STEPS:,} markers and fill bytes, "
            "which no encoder writes"
        )


def png_end(data: bytes) -> int:
    """The offset just past the IEND chunk. Every chunk before it must be whole with a letters-only type and
    a good CRC (Pillow's verify() skips the IEND CRC), and an acTL must come before IDAT, once, and declare
    as many frames as there are fcTL chunks (Pillow leaves frames past the acTL count undecoded)."""
    view = memoryview(data)
    pos, declared, controls, image_data = 8, None, 0, False
    while True:
        if pos + 12 > len(data):
            raise Malformed("the file is truncated: it ends before the IEND chunk")
        length: int
        kind: bytes
        length, kind = _PNG_CHUNK.unpack_from(data, pos)
        name = kind.decode("latin-1")
        end = pos + 12 + length
        if not kind.isalpha():
            raise Malformed(f"malformed chunk type {name!r} at offset {pos}")
        if length > 0x7FFFFFFF or end > len(data):
            raise Malformed(f"the file is truncated: chunk {name} at offset {pos} runs past the end")
        if zlib.crc32(view[pos + 4 : end - 4]) != _U32BE.unpack_from(data, end - 4)[0]:
            raise Malformed(f"bad CRC in chunk {name} at offset {pos}")
        if kind == b"acTL":
            if declared is not None or length != 8 or image_data:
                raise Malformed(f"misplaced, malformed or repeated acTL chunk at offset {pos}")
            declared = _U32BE.unpack_from(data, pos + 8)[0]
        elif kind == b"IDAT":
            image_data = True
        elif kind == b"fcTL":
            controls += 1
        elif kind == b"IEND":
            break
        pos = end
    if declared is not None and declared != controls:
        raise Malformed(f"the acTL chunk declares {declared:,} frames but there are {controls} fcTL chunks")
    return end


def gif_end(data: bytes) -> int:
    """The offset just past the trailer (0x3B). Every block before it must be known and whole: Pillow takes
    a GIF that stops between two frames for a complete, shorter animation; the trailer tells them apart."""
    end = len(data)
    if end < 13:
        raise Malformed("the file is truncated: it ends inside the logical screen descriptor")
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # past the global colour table
    while pos < end:
        block = data[pos]
        if block == 0x3B:
            return pos + 1
        if block == 0x21:  # extension: introducer and label, then sub-blocks
            pos += 2
        elif block == 0x2C:  # image: descriptor, local colour table, LZW code size, then sub-blocks
            if pos + 10 > end:
                break
            flags = data[pos + 9]
            pos += 11 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
        else:
            raise Malformed(f"unknown block {block:#04x} at offset {pos}")
        while pos < end and data[pos]:  # sub-blocks: a length byte, then that many bytes; 0 ends them
            pos += data[pos] + 1
        pos += 1
    raise Malformed("the file is truncated: it ends before the trailer")


def webp_end(data: bytes) -> int:
    """8 + the RIFF size: libwebp reads nothing past it. A RIFF size that runs past the data is a fault."""
    if len(data) < 12:
        raise Malformed("the file is truncated: it ends inside the RIFF header")
    size: int = _U32LE.unpack_from(data, 4)[0]
    if size < 4 + 8:  # "WEBP" and at least one chunk header
        raise Malformed(f"the RIFF header says the file holds {size} bytes, too few for an image")
    if 8 + size > len(data):
        raise Malformed(
            f"the file is truncated or malformed: its RIFF header says {size:,} bytes follow it, "
            f"but {len(data) - 8:,} do"
        )
    return 8 + size


def jpeg_end(data: bytes) -> int:
    """The offset just past the EOI of the last picture: of the only one, or for a multi-picture file (MPO,
    or a gain map after an Ultra HDR photo) of every picture its MP index lists, each walked from its SOI.
    An MP index that cannot be read is ignored, as Pillow ignores it: the pictures after the first are then
    bytes after the end."""
    end, index = _jpeg_walk(data, 0)
    # Pictures are walked in offset order and one that starts inside the one before is skipped (its bytes
    # past that end count as trailing), so no byte is walked twice however the index overlaps them.
    for start in sorted(set(_mp_pictures(data, *index))) if index else ():
        if start >= end:
            end = _jpeg_walk(data, start)[0]
    return end


# A marker segment of a JPEG picture, as (marker, start, end, header): data[start:end] is 0xFF and the marker
# (0xE1 for APP1, 0xD9 for EOI), then for every marker but EOI a two-byte length and the body, from start + 4;
# header is whether it comes before the first scan's entropy-coded data (the first SOS does). A plain tuple:
# a hostile file holds one segment every 4 bytes, and a named one would double the cost of the walk.
Segment = tuple[int, int, int, bool]


def jpeg_segments(data: bytes, start: int) -> Iterator[Segment]:
    """The segments of the picture whose SOI is at `start`, in order, from the one after the SOI through its
    EOI, which is the last: from marker to marker, skipping each segment by its length. Raises Malformed at
    the first fault (no SOI at `start`, a segment cut off or with a length under 2, another SOI, no EOI),
    after yielding every segment before it."""
    if not data.startswith(b"\xff\xd8", start):
        raise Malformed(f"no JPEG start-of-image marker at offset {start:,}")
    pos, header = start + 2, True
    while True:
        found = _MARKER.search(data, pos)
        if found is None:
            raise Malformed(f"the file is truncated: the picture at offset {start:,} has no EOI marker")
        marker, pos = found[1][0], found.end()
        if marker == _EOI:
            yield marker, found.start(), pos, header
            return
        if marker == _SOI:
            raise Malformed(f"a start-of-image marker at offset {pos - 2:,} inside the picture")
        if pos + 2 > len(data):
            raise Malformed("the file is truncated: it ends inside a marker segment")
        length = _U16BE.unpack_from(data, pos)[0]
        if length < 2 or pos + length > len(data):
            raise Malformed(f"the marker segment at offset {pos - 2:,} is truncated or malformed")
        yield marker, found.start(), pos + length, header
        header = header and marker != _SOS
        pos += length


def _jpeg_walk(data: bytes, start: int) -> tuple[int, tuple[int, int] | None]:
    """(offset past EOI, (start, end) of the last MP index in the header) for the picture at `start`."""
    end, index = start, None
    for marker, at, end, header in jpeg_segments(data, start):
        if marker == _APP2 and header and data.startswith(b"MPF\x00", at + 4):
            index = (at + 8, end)  # the TIFF structure Pillow reads its offsets from
    return end, index


def _mp_pictures(data: bytes, base: int, limit: int) -> list[int]:
    """Offsets of the pictures after the first that the MP index at data[base:limit] lists (a TIFF header
    and its first IFD; offsets count from `base`); [] if the index cannot be read."""
    mp = data[base:limit]
    order = {b"II*\x00": "<", b"MM\x00*": ">"}.get(mp[:4])
    if order is None:
        return []
    try:
        ifd = struct.unpack_from(order + "I", mp, 4)[0]
        (count,) = struct.unpack_from(order + "H", mp, ifd)
        for at in range(ifd + 2, ifd + 2 + 12 * count, 12):
            tag, _, size, value = struct.unpack_from(order + "HHII", mp, at)
            if tag == _MP_ENTRIES:
                entries = mp[at + 8 : at + 8 + size] if size <= 4 else mp[value : value + size]
                offsets = [struct.unpack_from(order + "I", entries, 16 * i + 8)[0] for i in range(size // 16)]
                return [base + offset for offset in offsets[1:]]  # the first is the picture holding the index
    except struct.error:
        return []
    return []
