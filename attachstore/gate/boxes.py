"""The boxes of a HEIF or AVIF file (ISO/IEC 23008-12 on the ISO base media file format), read without
decoding a pixel: the primary image's size, its grid of tiles, every image item's size and an image
sequence's frames (docs/normalization.md, "Sources"). Pure and linear in the length of the bytes; raises
Malformed at the first structural fault."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from .containers import U16BE, U32BE, Malformed

_U64BE = struct.Struct(">Q")
_BOX = struct.Struct(">I4s")


# The properties an association can name: its index has 15 bits. Those past it are not read, so that what
# the reader keeps is bounded whatever the file holds.
_MAX_PROPERTY = 0x7FFF


@dataclass(slots=True)
class Boxes:
    """What the header says of the primary image and its tiles, as heif() reads it: what it keeps is bounded
    (at most 65,535 tiles, 32,767 property sizes), however many items the file has."""

    brands: frozenset[bytes] = frozenset()  # the major brand and the compatible ones
    primary: int | None = None  # the primary item's id (pitm)
    kind: bytes = b""  # the primary item's type: hvc1, av01, grid, iovl, ...
    size: tuple[int, int] | None = None  # the primary item's ispe
    tiles: list[int] = field(default_factory=list)  # the primary item's dimg references, in order
    tile_sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # tile id -> its ispe
    largest: tuple[int, int] = (0, 0)  # the largest ispe of any item
    layout: tuple[int, int] | None = None  # a primary grid's rows and columns
    canvas: tuple[int, int] | None = None  # a primary grid's or overlay's output size (its descriptor's)
    track: tuple[int, int] = (0, 0)  # the largest sample size of an image sequence's tracks
    frames: int = 0  # the most samples of any track


def boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """Each box in data[start:end] as (type, body start, end); a size of 0 runs to `end`."""
    pos = start
    while pos < end:
        if pos + 8 > end:
            raise Malformed(f"the file is truncated: a box header at offset {pos:,} is cut off")
        size, kind = _BOX.unpack_from(data, pos)
        body = pos + 8
        if size == 1:
            if body + 8 > end:
                raise Malformed(f"the file is truncated: a box header at offset {pos:,} is cut off")
            size, body = _U64BE.unpack_from(data, body)[0], body + 8
        elif size == 0:
            size = end - pos
        if size < body - pos or pos + size > end:
            raise Malformed(f"the {_name(kind)} box at offset {pos:,} runs past the end of what holds it")
        yield kind, body, pos + size
        pos += size


def heif(data: bytes) -> Boxes:
    found = Boxes()
    top = boxes(data, 0, len(data))
    kind, body, end = next(top, (b"", 0, 0))
    if kind != b"ftyp" or end - body < 8:
        raise Malformed("it does not start with a file type (ftyp) box")
    found.brands = frozenset(data[at : at + 4] for at in (body, *range(body + 8, end - 3, 4)))
    for kind, body, end in top:
        if kind == b"meta":
            _meta(data, body + 4, end, found)
        elif kind == b"moov":
            _movie(data, body, end, found)
    if found.kind in (b"grid", b"iovl"):
        _descriptor(_located(data, found), found.kind, found)
    return found


def _meta(data: bytes, start: int, end: int, found: Boxes) -> None:
    # The primary item and its references first: the items and properties are then read for those alone.
    inside = list(boxes(data, start, end))
    for kind, body, stop in inside:
        if kind == b"pitm":
            found.primary = _uint(data, body + 4, _width(data, body, stop), stop)
    for kind, body, stop in inside:
        if kind == b"iref":
            _references(data, body + 4, stop, _width(data, body, stop), found)
    for kind, body, stop in inside:
        if kind == b"iinf":
            _items(data, body + 4 + _width(data, body, stop), stop, found)
        elif kind == b"iprp":
            _properties(data, body, stop, found)


def _width(data: bytes, body: int, stop: int) -> int:
    """A FullBox's version 0 counts in 16 bits, the others in 32."""
    return 2 if _u8(data, body, stop) == 0 else 4


def _items(data: bytes, start: int, end: int, found: Boxes) -> None:
    for kind, body, stop in boxes(data, start, end):
        if kind != b"infe" or _u8(data, body, stop) < 2:
            continue  # versions 0 and 1 name no item type
        width = 2 if data[body] == 2 else 4
        if _uint(data, body + 4, width, stop) == found.primary:
            at = body + 4 + width + 2  # past the item's id and its protection index
            found.kind = bytes(_bytes(data, at, 4, stop))


def _references(data: bytes, start: int, end: int, width: int, found: Boxes) -> None:
    for kind, body, stop in boxes(data, start, end):
        if kind != b"dimg" or _uint(data, body, width, stop) != found.primary or found.tiles:
            continue
        count = _uint(data, body + width, 2, stop)
        at = body + width + 2
        _bytes(data, at, count * width, stop)
        found.tiles = [_uint(data, at + i * width, width, stop) for i in range(count)]


def _properties(data: bytes, start: int, end: int, found: Boxes) -> None:
    sizes: dict[int, tuple[int, int]] = {}  # property index (from 1) -> ispe
    tiles = set(found.tiles)
    for kind, body, stop in boxes(data, start, end):
        if kind == b"ipco":
            for index, (prop, at, last) in enumerate(boxes(data, body, stop), 1):
                if prop == b"ispe" and index <= _MAX_PROPERTY:
                    sizes[index] = (_uint(data, at + 4, 4, last), _uint(data, at + 8, 4, last))
        elif kind == b"ipma":
            version, flags = _u8(data, body, stop), _uint(data, body + 1, 3, stop)
            width, wide = (2 if version < 1 else 4), bool(flags & 1)
            at = body + 8
            for _ in range(_uint(data, body + 4, 4, stop)):
                item, count = _uint(data, at, width, stop), _u8(data, at + width, stop)
                at += width + 1
                for _ in range(count):
                    index = (_uint(data, at, 2, stop) & 0x7FFF) if wide else (_u8(data, at, stop) & 0x7F)
                    at += 2 if wide else 1
                    size = sizes.get(index)
                    if size is None:
                        continue
                    found.largest = max(found.largest, size, key=lambda s: s[0] * s[1])
                    if item == found.primary:
                        found.size = size
                    elif item in tiles:
                        found.tile_sizes[item] = size


def _located(data: bytes, found: Boxes) -> bytes:
    """The primary item's data, as its iloc entry places it (in the file, or in the idat box)."""
    for kind, body, end in boxes(data, 0, len(data)):
        if kind == b"meta":
            inner = {k: (b, e) for k, b, e in boxes(data, body + 4, end)}
            if b"iloc" in inner:
                return _iloc(data, *inner[b"iloc"], inner.get(b"idat"), found.primary or 0)
    raise Malformed("the primary image's descriptor has no location (no iloc box)")


def _iloc(data: bytes, start: int, end: int, idat: tuple[int, int] | None, wanted: int) -> bytes:
    version = _u8(data, start, end)
    sizes = _uint(data, start + 4, 2, end)
    offset_size, length_size, base_size = sizes >> 12, (sizes >> 8) & 15, (sizes >> 4) & 15
    index_size = sizes & 15 if version in (1, 2) else 0
    id_size = 4 if version == 2 else 2
    count = _uint(data, start + 6, id_size, end)
    at = start + 6 + id_size
    for _ in range(count):
        item = _uint(data, at, id_size, end)
        at += id_size
        method = _uint(data, at, 2, end) & 15 if version in (1, 2) else 0
        at += 2 if version in (1, 2) else 0
        base = _uint(data, at + 2, base_size, end)  # past the data reference index
        extents = _uint(data, at + 2 + base_size, 2, end)
        at += 4 + base_size
        step = index_size + offset_size + length_size
        _bytes(data, at, extents * step, end)  # only the first extent is read: one step per item
        if item == wanted and extents:
            offset = base + _uint(data, at + index_size, offset_size, end)
            length = _uint(data, at + index_size + offset_size, length_size, end) or 12
            within = (0, len(data)) if method == 0 else idat if method == 1 else None
            if within is None:
                raise Malformed(f"the primary image's descriptor is stored by construction method {method}")
            return bytes(_bytes(data, within[0] + offset, length, within[1]))
        at += extents * step
    raise Malformed("the primary image's descriptor has no location in the iloc box")


def _descriptor(descriptor: bytes, kind: bytes, found: Boxes) -> None:
    """A grid's: version, flags, rows - 1, columns - 1, then the output size; an overlay's: version, flags,
    four 16-bit fill values, then the output size. Bit 0 of the flags: the size in 32 bits, else 16."""
    end = len(descriptor)
    size = 4 if _u8(descriptor, 1, end) & 1 else 2
    at = 4 if kind == b"grid" else 10
    found.canvas = (_uint(descriptor, at, size, end), _uint(descriptor, at + size, size, end))
    if kind == b"grid":
        found.layout = (_u8(descriptor, 2, end) + 1, _u8(descriptor, 3, end) + 1)


def _movie(data: bytes, start: int, end: int, found: Boxes) -> None:
    """An image sequence's tracks: moov/trak/mdia/minf/stbl, its sample description and its sample count."""
    for trak, body, stop in boxes(data, start, end):
        if trak != b"trak":
            continue
        table = _path(data, body, stop, (b"mdia", b"minf", b"stbl"))
        if table is None:
            continue
        for kind, at, last in boxes(data, *table):
            if kind == b"stsd":  # a FullBox, an entry count, then the visual sample entries
                for _, entry, entry_end in boxes(data, at + 8, last):
                    # reserved (6), data reference index (2), pre-defined and reserved (16), then the size
                    size = (_uint(data, entry + 24, 2, entry_end), _uint(data, entry + 26, 2, entry_end))
                    found.track = max(found.track, size, key=lambda s: s[0] * s[1])
            elif kind == b"stsz":
                found.frames = max(found.frames, _uint(data, at + 8, 4, last))


def _path(data: bytes, start: int, end: int, names: tuple[bytes, ...]) -> tuple[int, int] | None:
    for name in names:
        inside = next(((b, e) for kind, b, e in boxes(data, start, end) if kind == name), None)
        if inside is None:
            return None
        start, end = inside
    return start, end


def _u8(data: bytes, at: int, end: int) -> int:
    return _bytes(data, at, 1, end)[0]


def _uint(data: bytes, at: int, size: int, end: int) -> int:
    if size == 0:
        return 0
    if size == 2:
        return int(U16BE.unpack_from(_bytes(data, at, 2, end))[0])
    if size == 4:
        return int(U32BE.unpack_from(_bytes(data, at, 4, end))[0])
    return int.from_bytes(_bytes(data, at, size, end), "big")


def _bytes(data: bytes, at: int, size: int, end: int) -> memoryview:
    if at + size > end or at < 0:
        raise Malformed(f"a field at offset {at:,} runs past the end of its box")
    return memoryview(data)[at : at + size]


def _name(kind: bytes) -> str:
    return repr(kind.decode("latin-1"))
