"""The formats the gate takes in only to convert them (HEIC and HEIF, AVIF, BMP, TIFF): recognised from their
first bytes, and their sizes, tiles and pages read from the container headers before anything is decoded
(docs/normalization.md, "Sources"). Pure functions, but for the decoder they name; a reader raises Malformed
at the first structural fault."""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

from . import boxes
from .containers import U32BE, U32LE, Bytes, Malformed

# The source types, by the names their messages use.
NAMES = {
    "image/heic": "HEIC",
    "image/heif": "HEIF",
    "image/avif": "AVIF",
    "image/bmp": "BMP",
    "image/tiff": "TIFF",
}
# Other names of the source types: the registered sequence types (the gate takes the primary image or the
# first frame of any), and the names older systems and Python's mimetypes give BMP and TIFF.
ALIASES = {
    "image/heic-sequence": "image/heic",
    "image/heif-sequence": "image/heif",
    "image/avif-sequence": "image/avif",
    "image/x-bmp": "image/bmp",
    "image/x-ms-bmp": "image/bmp",
    "image/x-windows-bmp": "image/bmp",
    "image/ms-bmp": "image/bmp",
    "image/x-tiff": "image/tiff",
    "image/tif": "image/tiff",
}
# HEIC is HEIF with HEVC coding: each name is right for the other's bytes.
KIN = frozenset({"image/heic", "image/heif"})
# The tiles a HEIF grid may have: each tile is an image of its own, decoded by itself. Encoders use tiles of
# 256 or 512 pixels (a phone's 48-megapixel photo is 192 tiles of 512); 8192 x 8192 in tiles of 128 is 4,096.
MAX_TILES = 4096
# The pages of a TIFF walked to count them: only the first is decoded, but the chain is walked to tell
# "one page" from "more", and a chain longer than this is refused as no scanner writes one.
MAX_PAGES = 4096
# A TIFF pixel's samples and their bits, at most: 16-bit CMYK with alpha is 5 of 16.
MAX_SAMPLES, MAX_BITS = 8, 32

_AVIF = frozenset({b"avif", b"avis"})
_HEIC = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs"})
_HEIF = frozenset({b"mif1", b"msf1", b"mif2", b"mif3"})
_BMP_HEADERS = frozenset({12, 40, 52, 56, 64, 108, 124})  # the DIB header sizes Windows and OS/2 wrote
_BMP_BITS = frozenset({1, 2, 4, 8, 16, 24, 32})
_TIFF = {b"II*\x00": "<", b"MM\x00*": ">"}
_TIFF_TYPES = {3: ("H", 2), 4: ("I", 4)}  # SHORT, LONG: the types of the tags read here
_WIDTH, _LENGTH, _BITS, _SAMPLES, _TILE_WIDTH, _TILE_LENGTH = 256, 257, 258, 277, 322, 323


class Source(NamedTuple):
    media_type: str
    width: int  # of the image the gate converts: the primary image, the first frame or page
    height: int
    frames: int  # frames of an image sequence, or pages: only the first is converted
    tiles: int  # the tiles (or layers) a HEIF primary image is made of; 0 when it is coded whole
    largest: tuple[int, int]  # the largest picture coded in the file: a tile, thumbnail, frame or TIFF tile


def sniff(data: Bytes) -> str | None:
    if data[4:8] == b"ftyp":
        major = bytes(data[8:12])
        size = min(U32BE.unpack_from(data, 0)[0], len(data))
        brands = {bytes(data[at : at + 4]) for at in range(16, size - 3, 4)} | {major}
        if major in _AVIF or (major in _HEIF and brands & _AVIF):
            return "image/avif"
        if major in _HEIC or (major in _HEIF and brands & _HEIC):
            return "image/heic"
        return "image/heif" if major in _HEIF else None
    if data[:2] == b"BM" and len(data) >= 18 and U32LE.unpack_from(data, 14)[0] in _BMP_HEADERS:
        return "image/bmp"
    if data[:4] in _TIFF:
        return "image/tiff"
    return None


def read(data: bytes, media_type: str) -> Source:
    if media_type == "image/bmp":
        return _bmp(data)
    if media_type == "image/tiff":
        return _tiff(data)
    return _heif(data, media_type)


@functools.cache
def plugin(media_type: str) -> str:
    """The Pillow plugin that decodes the type. pi-heif's is registered at the first call, which only a
    decode worker makes (never the daemon's event loop)."""
    if media_type in KIN:
        from pi_heif import register_heif_opener  # type: ignore[import-untyped]

        # One decoding thread: the pool runs one worker per core. Thumbnails and depth maps are not read.
        register_heif_opener(thumbnails=False, depth_images=False, aux_images=False, decode_threads=1)
        return "HEIF"
    if media_type == "image/avif":
        from PIL import AvifImagePlugin

        AvifImagePlugin.DEFAULT_MAX_THREADS = 1
        return "AVIF"
    return NAMES[media_type]


# HEIF and AVIF


def _heif(data: bytes, media_type: str) -> Source:
    found = boxes.heif(data)
    if found.primary is None:  # an image sequence without a still image: its first frame
        if not found.frames:
            raise Malformed("it has neither a primary image nor an image sequence")
        width, height = found.track
        return Source(media_type, width, height, found.frames, 0, found.track)
    if found.size is None:
        raise Malformed(f"the primary image (item {found.primary}) has no size (no ispe property)")
    width, height = found.size
    derived = found.kind in (b"grid", b"iovl")
    if derived:
        if not found.tiles:
            raise Malformed(f"its primary image is a {found.kind.decode()} of no images")
        if found.canvas is not None:  # the size the derived image is put together at
            width, height = max(width, found.canvas[0]), max(height, found.canvas[1])
    if found.kind == b"grid" and len(found.tiles) <= MAX_TILES:
        _check_grid(found)
    # A sequence beside a still image is not decoded: libheif and libavif show the still image.
    frames = found.frames if media_type == "image/avif" and b"avis" in found.brands else 1
    largest = max(found.largest, found.track, (width, height), key=lambda s: s[0] * s[1])
    return Source(media_type, width, height, max(frames, 1), len(found.tiles) if derived else 0, largest)


def _check_grid(found: boxes.Boxes) -> None:
    if found.layout is None or found.canvas is None:
        raise Malformed("its grid has no descriptor")
    rows, columns = found.layout
    if rows * columns != len(found.tiles):
        raise Malformed(f"its grid of {rows}x{columns} tiles refers to {len(found.tiles)} images")
    sides = {found.tile_sizes.get(tile) for tile in found.tiles}
    if len(sides) != 1 or None in sides:
        raise Malformed("the tiles of its grid are not all of one size")
    tile_width, tile_height = next(iter(sides)) or (0, 0)
    width, height = found.canvas
    if not (columns - 1) * tile_width < width <= columns * tile_width or not (
        (rows - 1) * tile_height < height <= rows * tile_height
    ):
        raise Malformed(
            f"its grid of {rows}x{columns} tiles of {tile_width}x{tile_height} does not make "
            f"{width}x{height}: the tiles must cover it, and reach past it by less than a tile"
        )


# BMP


def _bmp(data: bytes) -> Source:
    header = U32LE.unpack_from(data, 14)[0] if len(data) >= 18 else 0
    if len(data) < 14 + max(header, 16):
        raise Malformed("the file is truncated: it ends inside the bitmap header")
    if header == 12:  # OS/2 1.x and Windows 2.x: unsigned 16-bit sides
        width, height, _, bits = struct.unpack_from("<HHHH", data, 18)
    else:  # Windows 3.x and later: signed 32-bit sides; a negative height is stored top-down
        width, height, _, bits = struct.unpack_from("<iiHH", data, 18)
        height = abs(height)
    if width <= 0 or height == 0:
        raise Malformed(f"the bitmap header gives it a size of {width}x{height}")
    if bits not in _BMP_BITS:
        raise Malformed(f"the bitmap header gives it {bits} bits a pixel")
    return Source("image/bmp", width, height, 1, 0, (width, height))


# TIFF


def _tiff(data: bytes) -> Source:
    order = _TIFF[data[:4]]
    if len(data) < 8:
        raise Malformed("the file is truncated: it ends inside the TIFF header")
    first = struct.unpack_from(order + "I", data, 4)[0]
    tags, after = _ifd(data, order, first)
    if _WIDTH not in tags or _LENGTH not in tags:
        raise Malformed("its first page has no width or no length (tags 256, 257)")
    width, height = tags[_WIDTH][0], tags[_LENGTH][0]
    samples = tags.get(_SAMPLES, [1])[0]
    bits = max(tags.get(_BITS, [1]))
    if not (0 < samples <= MAX_SAMPLES and 0 < bits <= MAX_BITS):
        raise Malformed(
            f"its pixels are {samples} samples of {bits} bits; an image has at most {MAX_SAMPLES} samples "
            f"of at most {MAX_BITS} bits"
        )
    tile = (tags.get(_TILE_WIDTH, [width])[0], tags.get(_TILE_LENGTH, [height])[0])
    largest = max((width, height), tile, key=lambda s: s[0] * s[1])
    return Source("image/tiff", width, height, _pages(data, order, first, after), 0, largest)


def _ifd(data: bytes, order: str, at: int) -> tuple[dict[int, list[int]], int]:
    """The SHORT and LONG tags of the directory at `at` (16 values each at most), and the next's offset."""
    end = _directory_end(data, order, at)
    tags: dict[int, list[int]] = {}
    for entry in range(at + 2, end, 12):
        tag, kind, n = struct.unpack_from(order + "HHI", data, entry)
        if kind not in _TIFF_TYPES or n == 0:
            continue
        code, size = _TIFF_TYPES[kind]
        n = min(n, 16)
        where = entry + 8 if n * size <= 4 else struct.unpack_from(order + "I", data, entry + 8)[0]
        if where + n * size > len(data):
            raise Malformed(f"the value of tag {tag} lies outside the file")
        tags[tag] = list(struct.unpack_from(f"{order}{n}{code}", data, where))
    return tags, struct.unpack_from(order + "I", data, end)[0]


def _pages(data: bytes, order: str, first: int, after: int) -> int:
    seen, pages = {first}, 1
    while after:
        if after in seen:
            raise Malformed(f"its chain of pages comes back to the page at offset {after:,}")
        if pages >= MAX_PAGES:
            raise Malformed(f"it has more than {MAX_PAGES:,} pages, which no scanner or program writes")
        seen.add(after)
        pages += 1
        (after,) = struct.unpack_from(order + "I", data, _directory_end(data, order, after))
    return pages


def _directory_end(data: bytes, order: str, at: int) -> int:
    """Where the directory at `at` ends: the offset of the next one's offset (4 bytes, within the file)."""
    if at < 8 or at + 2 > len(data):
        raise Malformed(f"a page's directory at offset {at:,} lies outside the file")
    count: int = struct.unpack_from(order + "H", data, at)[0]
    end = at + 2 + 12 * count
    if end + 4 > len(data):
        raise Malformed(f"the file is truncated: the page's directory at offset {at:,} runs past the end")
    return end
