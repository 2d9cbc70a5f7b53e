"""Sources the gate converts (HEIC, HEIF, AVIF, BMP, TIFF), crafted byte by byte: headers that say what a
test wants them to say, decompression bombs among them. Pillow makes the decodable ones (tests/support/
images.py); pi-heif encodes nothing, so a HEIF here is its boxes only."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence


def box(kind: bytes, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return struct.pack(">I", 8 + len(body)) + kind + body


def full_box(kind: bytes, version: int, flags: int, *parts: bytes) -> bytes:
    return box(kind, bytes([version]) + flags.to_bytes(3, "big"), *parts)


def ftyp(major: bytes, *compatible: bytes) -> bytes:
    return box(b"ftyp", major, bytes(4), *compatible)


def heif(
    size: tuple[int, int],
    *,
    major: bytes = b"heic",
    compatible: Sequence[bytes] = (b"mif1", b"heic"),
    kind: bytes = b"hvc1",
    tiles: int = 0,
    tile: tuple[int, int] | None = None,
    grid: tuple[int, int, int, int] | None = None,
    others: Sequence[tuple[int, int]] = (),
) -> bytes:
    """A HEIF whose primary image (item 1, of `kind`) is `size` by its ispe. With `tiles`, it refers to that
    many images (items 2, 3, ...; each `tile` in size, when given), and a grid's descriptor (rows, columns,
    output width, height) lies in the idat box. `others`: items of those sizes beside them."""
    count = 1 + tiles + len(others)
    infe = [
        full_box(b"infe", 2, 0, struct.pack(">HH", item, 0), kind if item == 1 else b"hvc1", b"\x00")
        for item in range(1, count + 1)
    ]
    sizes = [size, *((tile,) if tile else ()), *others]
    ipco = box(b"ipco", *(full_box(b"ispe", 0, 0, struct.pack(">II", *s)) for s in sizes))
    associations = [(1, 1)]
    if tile:
        associations += [(item, 2) for item in range(2, tiles + 2)]
    first_other = 2 + (1 if tile else 0)
    associations += [(tiles + 2 + i, first_other + i) for i in range(len(others))]
    ipma = full_box(
        b"ipma",
        0,
        0,
        struct.pack(">I", len(associations)),
        *(struct.pack(">HBB", item, 1, 0x80 | index) for item, index in associations),
    )
    boxes = [
        full_box(b"hdlr", 0, 0, bytes(4), b"pict", bytes(12), b"\x00"),
        full_box(b"pitm", 0, 0, struct.pack(">H", 1)),
        full_box(b"iinf", 0, 0, struct.pack(">H", count), *infe),
        box(b"iprp", ipco, ipma),
    ]
    if tiles:
        refs = struct.pack(">HH", 1, tiles) + b"".join(struct.pack(">H", t) for t in range(2, tiles + 2))
        boxes.append(full_box(b"iref", 0, 0, box(b"dimg", refs)))
    if grid is not None:
        rows, columns, width, height = grid
        descriptor = struct.pack(">BBBBII", 0, 1, rows - 1, columns - 1, width, height)
        # iloc version 1: 4-byte offsets and lengths, no base offset; item 1 from the idat box (method 1)
        entry = struct.pack(">HHHHII", 1, 1, 0, 1, 0, len(descriptor))
        boxes += [full_box(b"iloc", 1, 0, bytes([0x44, 0x00]), struct.pack(">H", 1), entry)]
        boxes.append(box(b"idat", descriptor))
    return ftyp(major, *compatible) + full_box(b"meta", 0, 0, *boxes)


# TIFF

_TIFF_TYPES = {3: "H", 4: "I"}


def tiff(
    width: int,
    height: int,
    *,
    samples: int = 1,
    bits: int = 8,
    tile: tuple[int, int] | None = None,
    pages: int = 1,
    chain: int | None = None,
) -> bytes:
    """A little-endian grey TIFF that claims `width` x `height`, with one deflated strip of a few bytes
    (what would decompress to the whole image); `pages` directories chained, the last pointing at the
    offset `chain` (a loop) when it is given."""
    strip = zlib.compress(bytes(64))
    tags: list[tuple[int, int, int]] = [
        (256, 4, width),
        (257, 4, height),
        (258, 3, bits),
        (259, 3, 8),  # deflate
        (262, 3, 1),  # black is zero
        (273, 4, 8),  # the strip, right after the header
        (277, 3, samples),
        (278, 4, height),
        (279, 4, len(strip)),
    ]
    if tile:
        tags += [(322, 4, tile[0]), (323, 4, tile[1])]
    out = bytearray(b"II*\x00" + struct.pack("<I", 8 + len(strip)) + strip)
    for page in range(pages):
        at = len(out)
        size = 2 + 12 * len(tags) + 4
        last = page == pages - 1
        following = (chain or 0) if last else at + size
        out += struct.pack("<H", len(tags))
        for tag, kind, value in tags:
            out += struct.pack(f"<HHI{_TIFF_TYPES[kind]}", tag, kind, 1, value).ljust(12, b"\x00")
        out += struct.pack("<I", following)
    return bytes(out)


def bmp(width: int, height: int, bits: int = 24) -> bytes:
    """A BITMAPINFOHEADER BMP that claims `width` x `height` (a negative height: stored top-down), with a
    few bytes of pixels."""
    pixels = bytes(16)
    header = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, 0, len(pixels), 2835, 2835, 0, 0)
    return (
        b"BM" + struct.pack("<IHHI", 14 + len(header) + len(pixels), 0, 0, 14 + len(header)) + header + pixels
    )
