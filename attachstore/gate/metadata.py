"""Lossless removal of metadata (docs/normalization.md, "strip_metadata"): each format's walk (containers.py)
plans edits of the container, applied in one pass, so the pixels stay exactly the same. Deterministic: the
result is stored under its hash."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from PIL import Image

from .containers import (
    APP1,
    APP2,
    APP13,
    COM,
    EOI,
    GIF_APPLICATION,
    GIF_COMMENT,
    GIF_EXTENSION,
    GIF_TRAILER,
    U16BE,
    U32BE,
    U32LE,
    Malformed,
    gif_blocks,
    jpeg_segments,
    png_chunks,
)

_ORIENTATION = 0x0112  # the EXIF tag
_TURNED = frozenset(range(2, 9))  # the orientations that ask for a turn or a flip


def strip_metadata(data: bytes, media_type: str) -> bytes:
    """`data` itself (the same object) when there is nothing to remove: the caller tells by identity."""
    edits = _EDITS[media_type](data)
    if not edits:
        return data
    view, pos = memoryview(data), 0
    parts: list[bytes | memoryview] = []
    for edit in sorted(edits, key=lambda e: e.start):
        parts += (view[pos : edit.start], edit.new)
        pos = edit.end
    parts.append(view[pos:])
    return b"".join(parts)


def has_metadata(data: bytes, media_type: str) -> bool:
    return any(edit.metadata for edit in _EDITS[media_type](data))


def exif_orientation(exif: Image.Exif) -> int:
    value = exif.get(_ORIENTATION, 1)
    return value if value in _TURNED else 1


@contextmanager
def quiet_pillow() -> Iterator[None]:
    """Pillow's warnings about metadata it cannot read leave the pixels unaffected; its
    DecompressionBombWarning (a RuntimeWarning) is left to the caller's filters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@dataclass(frozen=True, slots=True)
class _Edit:
    start: int
    end: int
    new: bytes = b""  # what replaces data[start:end]
    metadata: bool = True  # False: bytes after the end of the image, or a header field that follows the rest


_XMP = (b"http://ns.adobe.com/xap/1.0/\x00", b"http://ns.adobe.com/xmp/extension/\x00")
_PNG_DROPPED = frozenset({b"tEXt", b"zTXt", b"iTXt", b"tIME"})
_VP8X_EXIF, _VP8X_XMP = 0x08, 0x04


def _jpeg_edits(data: bytes) -> list[_Edit]:
    edits: list[_Edit] = []
    exif = False
    # A fault in the picture (no EOI, a segment cut off) ends the walk: the edits before it stand and nothing
    # after it is cut. The gate refuses such a picture where bytes after the end are refused, and the
    # stripped bytes go through the gate again with them refused.
    with suppress(Malformed):
        for marker, start, end, header in jpeg_segments(data, 0):
            body = start + 4  # past the marker and the length
            if marker == EOI:
                if end < len(data):
                    edits.append(_Edit(end, len(data), metadata=False))
            elif not header:  # segments after the first scan are left as they are
                continue
            elif marker == APP1 and data.startswith(b"Exif\x00", body):
                new = None if exif else _minimal_exif(data[body:end])  # the first Exif counts, as for Pillow
                if new is None or new != data[body:end]:
                    edits.append(_Edit(start, end, b"" if new is None else _jpeg_segment(APP1, new)))
                exif = True
            elif (
                (marker == APP1 and data.startswith(_XMP, body))
                or marker in (APP13, COM)
                or (marker == APP2 and data.startswith(b"MPF\x00", body))  # lists the pictures that are cut
            ):
                edits.append(_Edit(start, end))
    return edits


def _png_edits(data: bytes) -> list[_Edit]:
    edits: list[_Edit] = []
    exif = False
    for kind, pos, end in png_chunks(data):
        if kind in _PNG_DROPPED:
            edits.append(_Edit(pos, end))
        elif kind == b"eXIf":
            new = None if exif else _minimal_exif(data[pos + 8 : end - 4])
            if new is None or new[6:] != data[pos + 8 : end - 4]:
                edits.append(_Edit(pos, end, b"" if new is None else _png_chunk(b"eXIf", new[6:])))
            exif = True
        elif kind == b"IEND" and end < len(data):
            edits.append(_Edit(end, len(data), metadata=False))
    return edits


def _webp_edits(data: bytes) -> list[_Edit]:
    size = U32LE.unpack_from(data, 4)[0]
    riff_end = 8 + size
    edits: list[_Edit] = []
    pos, exif, exif_left = 12, False, False
    while pos + 8 <= riff_end:
        fourcc, length = data[pos : pos + 4], U32LE.unpack_from(data, pos + 4)[0]
        end = min(pos + 8 + length + (length & 1), riff_end)  # a chunk is padded to an even size
        if fourcc == b"EXIF":
            new = None if exif else _minimal_exif(data[pos + 8 : pos + 8 + length])
            exif_left = exif_left or new is not None
            chunk = b"" if new is None else _riff_chunk(b"EXIF", new[6:])
            if chunk != data[pos:end]:
                edits.append(_Edit(pos, end, chunk))
            exif = True
        elif fourcc == b"XMP ":
            edits.append(_Edit(pos, end))
        pos = end
    if edits:
        grown = sum(len(edit.new) - (edit.end - edit.start) for edit in edits)
        edits.append(_Edit(4, 8, U32LE.pack(size + grown), metadata=False))
        if data.startswith(b"VP8X", 12):
            flags = data[20] & ~(_VP8X_EXIF | _VP8X_XMP) | (_VP8X_EXIF if exif_left else 0)
            edits.append(_Edit(20, 21, bytes([flags]), metadata=False))
    if riff_end < len(data):
        edits.append(_Edit(riff_end, len(data), metadata=False))
    return edits


def _gif_edits(data: bytes) -> list[_Edit]:
    edits: list[_Edit] = []
    for block, start, end in gif_blocks(data):
        if block == GIF_TRAILER and end < len(data):
            edits.append(_Edit(end, len(data), metadata=False))
        elif block == GIF_EXTENSION:  # a comment, or an application extension named in its first 11 bytes
            label = data[start + 1 : start + 2]
            if label == bytes([GIF_COMMENT]) or (
                label == bytes([GIF_APPLICATION]) and data.startswith(b"\x0bXMP DataXMP", start + 2)
            ):
                # An XMP packet is stored raw, but a "magic trailer" after it makes the walk land on its
                # terminator, as the format intends.
                edits.append(_Edit(start, end))
    return edits


_EDITS: dict[str, Callable[[bytes], list[_Edit]]] = {
    "image/jpeg": _jpeg_edits,
    "image/png": _png_edits,
    "image/webp": _webp_edits,
    "image/gif": _gif_edits,
}


def _minimal_exif(exif: bytes) -> bytes | None:
    try:
        with quiet_pillow():
            parsed = Image.Exif()
            parsed.load(exif)
            orientation = exif_orientation(parsed)
    except Exception:  # Pillow's TIFF reader raises many types on a damaged block
        return None
    if orientation == 1:
        return None
    minimal = Image.Exif()
    minimal[_ORIENTATION] = orientation
    return minimal.tobytes()


def _jpeg_segment(marker: int, body: bytes) -> bytes:
    return bytes((0xFF, marker)) + U16BE.pack(len(body) + 2) + body


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return U32BE.pack(len(body)) + kind + body + U32BE.pack(zlib.crc32(kind + body))


def _riff_chunk(fourcc: bytes, payload: bytes) -> bytes:
    return fourcc + U32LE.pack(len(payload)) + payload + b"\x00" * (len(payload) & 1)
