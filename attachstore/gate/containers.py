"""The structure of the four container formats, read without decoding a pixel: one walk per format and one set
of constants, shared by the header probe, the gate's checks and the metadata strip (docs/design.md, "The
gate"). Pure and linear in the length of the bytes; a walk raises Malformed at the first structural fault."""

from __future__ import annotations

import mmap
import re
import struct
import zlib
from collections.abc import Iterator

Bytes = bytes | bytearray | mmap.mmap  # read by slices, indexes and struct: any buffer that reads like bytes

U16BE = struct.Struct(">H")
U16BE_PAIR = struct.Struct(">HH")
U32BE = struct.Struct(">I")
U32LE = struct.Struct("<I")

# JPEG markers: the byte after 0xFF.
SOI, EOI, SOS, TEM = 0xD8, 0xD9, 0xDA, 0x01
APP1, APP2, APP13, COM = 0xE1, 0xE2, 0xED, 0xFE
STANDALONE = frozenset({TEM, *range(0xD0, 0xD8)})  # TEM and RST0-7: no length field follows them
# Start-of-frame markers carry the dimensions; C4 (DHT), C8 (JPG) and CC (DAC) share the range but don't.
FRAME_HEADERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# After 0xFF, what starts no segment: a stuffed zero (in entropy-coded data), a standalone marker, or another
# 0xFF (the one before it was a fill byte).
_NO_SEGMENT = frozenset({0x00, *STANDALONE, 0xFF})
# The next marker that starts a segment: the last 0xFF of a run and the code after it. Entropy-coded data,
# fill bytes and standalone markers are passed over by the same search. Fixed length, no repetition: linear,
# where "\xff+" would backtrack over a long run of 0xFF once for every byte of it.
MARKER = re.compile(rb"\xff([^" + b"".join(rb"\x%02x" % code for code in sorted(_NO_SEGMENT)) + rb"])")
# The steps (a marker, the frame header's included, or a fill byte) a bounded walk to a JPEG's frame header
# takes before it gives up: encoders write a few dozen segments before it (an ICC profile in at most 255),
# and 1,024 segments of the largest size hold 64 MiB. The gate refuses a JPEG that needs more, so that the
# probe every read makes of an admitted image costs at most this many (docs/design.md, "Verified reads").
JPEG_HEADER_STEPS = 1024

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_MAX_LENGTH = 0x7FFFFFFF  # PNG's limit on a chunk's length and on each side
_PNG_CHUNK = struct.Struct(">I4s")  # a chunk's length and type; its body and a CRC follow

GIF_EXTENSION, GIF_IMAGE, GIF_TRAILER = 0x21, 0x2C, 0x3B
GIF_COMMENT, GIF_APPLICATION = 0xFE, 0xFF  # extension labels

_MP_ENTRIES = 0xB002  # the MP index tag whose value is one 16-byte entry per picture (CIPA DC-007)


class Malformed(Exception): ...


class HeaderTooDeep(Exception):
    def __init__(self) -> None:
        super().__init__(
            f"its frame header comes after more than {JPEG_HEADER_STEPS:,} markers and fill bytes, "
            "which no encoder writes"
        )


# PNG


def png_chunks(data: bytes) -> Iterator[tuple[bytes, int, int]]:
    # data[start:end] is the whole chunk, CRC included, when end <= len(data): the caller checks that
    pos = len(PNG_SIGNATURE)
    while pos + 12 <= len(data):
        length, kind = _PNG_CHUNK.unpack_from(data, pos)
        end = pos + 12 + length
        yield kind, pos, end
        if kind == b"IEND":
            return
        pos = end


def png_end(data: bytes) -> int:
    """Stricter than Pillow, whose verify() skips the IEND CRC and which leaves frames past the acTL count
    undecoded."""
    view = memoryview(data)
    declared, controls, image_data = None, 0, False
    for kind, pos, end in png_chunks(data):
        name = kind.decode("latin-1")
        if not kind.isalpha():
            raise Malformed(f"malformed chunk type {name!r} at offset {pos}")
        if end - pos - 12 > PNG_MAX_LENGTH or end > len(data):
            raise Malformed(f"the file is truncated: chunk {name} at offset {pos} runs past the end")
        if zlib.crc32(view[pos + 4 : end - 4]) != U32BE.unpack_from(data, end - 4)[0]:
            raise Malformed(f"bad CRC in chunk {name} at offset {pos}")
        if kind == b"acTL":
            if declared is not None or end - pos != 20 or image_data:
                raise Malformed(f"misplaced, malformed or repeated acTL chunk at offset {pos}")
            declared = U32BE.unpack_from(data, pos + 8)[0]
        elif kind == b"IDAT":
            image_data = True
        elif kind == b"fcTL":
            controls += 1
        elif kind == b"IEND":
            if declared is not None and declared != controls:
                raise Malformed(
                    f"the acTL chunk declares {declared:,} frames but there are {controls} fcTL chunks"
                )
            return end
    raise Malformed("the file is truncated: it ends before the IEND chunk")


# GIF


def gif_blocks(data: bytes) -> Iterator[tuple[int, int, int]]:
    # the trailer or the first unknown byte is yielded as one byte; `end` may pass len(data) when it is cut
    if len(data) < 13:
        return
    pos = 13 + _colour_table(data[10])
    while pos < len(data):
        start, block = pos, data[pos]
        if block == GIF_EXTENSION:  # introducer and label, then sub-blocks
            pos += 2
        elif block == GIF_IMAGE:  # descriptor, local colour table, LZW code size, then sub-blocks
            if pos + 10 > len(data):
                return
            pos += 11 + _colour_table(data[pos + 9])
        else:  # the trailer, or a byte that starts no block
            yield block, start, pos + 1
            return
        while pos < len(data) and data[pos]:  # sub-blocks: a length byte, then that many bytes; 0 ends them
            pos += data[pos] + 1
        yield block, start, pos + 1
        pos += 1


def _colour_table(flags: int) -> int:
    return 3 << ((flags & 7) + 1) if flags & 0x80 else 0


def gif_end(data: bytes) -> int:
    """Pillow takes a GIF that stops between two frames for a complete, shorter animation; the trailer tells
    them apart."""
    if len(data) < 13:
        raise Malformed("the file is truncated: it ends inside the logical screen descriptor")
    for block, start, end in gif_blocks(data):
        if block == GIF_TRAILER:
            return end
        if block not in (GIF_EXTENSION, GIF_IMAGE):
            raise Malformed(f"unknown block {block:#04x} at offset {start}")
    raise Malformed("the file is truncated: it ends before the trailer")


# WebP


def webp_end(data: bytes) -> int:
    if len(data) < 12:
        raise Malformed("the file is truncated: it ends inside the RIFF header")
    # 8 + the RIFF size: libwebp reads nothing past it
    size: int = U32LE.unpack_from(data, 4)[0]
    if size < 4 + 8:  # "WEBP" and at least one chunk header
        raise Malformed(f"the RIFF header says the file holds {size} bytes, too few for an image")
    if 8 + size > len(data):
        raise Malformed(
            f"the file is truncated or malformed: its RIFF header says {size:,} bytes follow it, "
            f"but {len(data) - 8:,} do"
        )
    return 8 + size


# JPEG

# A marker segment of a JPEG picture, as (marker, start, end, header): data[start:end] is 0xFF and the marker
# (0xE1 for APP1, 0xD9 for EOI), then for every marker but EOI a two-byte length and the body, from start + 4;
# header is whether it comes before the first scan's entropy-coded data (the first SOS does). A plain tuple:
# a hostile file holds one segment every 4 bytes (docs/performance.md, "The gate's walks and figures").
Segment = tuple[int, int, int, bool]


def jpeg_segments(
    data: Bytes, start: int, *, strict: bool = False, steps: int | None = None
) -> Iterator[Segment]:
    """From the segment after the SOI at `start` through its EOI; raises Malformed at the first fault, after
    yielding every segment before it. Stray bytes between segments are passed over, as libjpeg does, unless
    `strict` (the probe's walk); with `steps`, a strict walk raises HeaderTooDeep rather than pass more
    markers and fill bytes."""
    if data[start : start + 2] != b"\xff\xd8":
        raise Malformed(f"no JPEG start-of-image marker at offset {start:,}")
    size, pos, header = len(data), start + 2, True
    while True:
        if not strict:
            found = MARKER.search(data, pos)
            if found is None:
                raise Malformed(f"the file is truncated: the picture at offset {start:,} has no EOI marker")
            at = found.start()
        elif pos + 1 < size and data[pos] == 0xFF and data[pos + 1] not in _NO_SEGMENT:
            at = pos  # most markers have neither fill bytes nor standalone markers before them
            if steps is not None:
                if steps < 1:
                    raise HeaderTooDeep
                steps -= 1
        else:
            at, steps = _marker_after_fill(data, pos, steps)
        marker, pos = data[at + 1], at + 2
        if marker == EOI:
            yield marker, at, pos, header
            return
        if marker == SOI:
            raise Malformed(f"a start-of-image marker at offset {at:,} inside the picture")
        if pos + 2 > size:
            raise Malformed("the file is truncated: it ends inside a marker segment")
        length = U16BE.unpack_from(data, pos)[0]
        if length < 2 or pos + length > size:
            raise Malformed(f"the marker segment at offset {at:,} is truncated or malformed")
        yield marker, at, pos + length, header
        header = header and marker != SOS
        pos += length


# How each byte between two segments counts for a strict walk: a fill byte (0xFF), a standalone marker's
# code, or anything else (a fault).
_BETWEEN = b"".join(b"f" if byte == 0xFF else b"s" if byte in STANDALONE else b"x" for byte in range(256))


def _marker_after_fill(data: Bytes, pos: int, steps: int | None) -> tuple[int, int | None]:
    if pos >= len(data) or data[pos] != 0xFF:  # the common fault: no search for it
        raise Malformed(f"the JPEG header holds stray bytes or ends at offset {pos:,}")
    # Within `steps`, every step takes at most 2 bytes (0xFF and a standalone code): look no further.
    limit = len(data) if steps is None else min(len(data), pos + 2 * steps + 2)
    found = MARKER.search(data, pos, limit)
    at = limit if found is None else found.start()
    between = data[pos:at].translate(_BETWEEN)
    fault = _first_fault(between)
    passed = between.count(b"f", 0, fault)
    if found is None or fault < len(between):  # no marker, or a fault before it
        if steps is not None and passed > steps:
            raise HeaderTooDeep
        raise Malformed(f"the JPEG header holds stray bytes or ends at offset {pos + fault:,}")
    if steps is None:
        return at, None
    if passed + 1 > steps:
        raise HeaderTooDeep
    return at, steps - passed - 1


def _first_fault(between: bytes | bytearray) -> int:
    if between[:1] == b"s":
        return 0
    stray, doubled = between.find(b"x"), between.find(b"ss")
    faults = ([stray] if stray >= 0 else []) + ([doubled + 1] if doubled >= 0 else [])
    return min(faults, default=len(between))


def jpeg_end(data: bytes) -> int:
    """An MP index that cannot be read is ignored, as Pillow ignores it: the pictures after the first are then
    bytes after the end."""
    end, index = _jpeg_walk(data, 0)
    # Pictures are walked in offset order and one that starts inside the one before is skipped (its bytes
    # past that end count as trailing), so no byte is walked twice however the index overlaps them.
    for start in sorted(set(_mp_pictures(data, *index))) if index else ():
        if start >= end:
            end = _jpeg_walk(data, start)[0]
    return end


def _jpeg_walk(data: bytes, start: int) -> tuple[int, tuple[int, int] | None]:
    end, index = start, None
    for marker, at, end, header in jpeg_segments(data, start):
        if marker == APP2 and header and data.startswith(b"MPF\x00", at + 4):
            index = (at + 8, end)  # the TIFF structure Pillow reads its offsets from
    return end, index


def _mp_pictures(data: bytes, base: int, limit: int) -> list[int]:
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
