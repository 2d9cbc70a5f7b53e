"""Images built in memory for the tests, and crafted bad ones.

Pixels are seeded noise, so images are deterministic and as incompressible as photos are in the worst case:
a "large" test image is large in bytes too. Encoded images are cached (bytes are immutable).
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from functools import cache
from typing import Any, NamedTuple

from PIL import Image

SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>\n'
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(40)


def noise(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    """Seeded random pixels; mode is an 8-bit mode ('RGB', 'RGBA', 'L', 'LA', 'CMYK') or 'P'."""
    rng = random.Random(f"{seed}:{width}x{height}:{mode}")
    im = Image.frombytes(mode, (width, height), rng.randbytes(width * height * Image.getmodebands(mode)))
    if mode == "P":
        im.putpalette(rng.randbytes(768))
    return im


def encode(im: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    im.save(out, fmt, **options)
    return out.getvalue()


@cache
def png(width: int, height: int, mode: str = "RGB", seed: int = 0, **options: Any) -> bytes:
    options.setdefault("compress_level", 1)  # noise barely compresses; spend no time trying
    return encode(noise(width, height, mode, seed), "PNG", **options)


@cache
def jpeg(width: int, height: int, mode: str = "RGB", seed: int = 0, **options: Any) -> bytes:
    return encode(noise(width, height, mode, seed), "JPEG", **options)


@cache
def gif(width: int, height: int, seed: int = 0) -> bytes:
    return encode(noise(width, height, "P", seed), "GIF")


@cache
def webp(width: int, height: int, mode: str = "RGB", seed: int = 0, **options: Any) -> bytes:
    options.setdefault("method", 0)  # fastest encoder effort
    return encode(noise(width, height, mode, seed), "WEBP", **options)


def _frames(width: int, height: int, frames: int, mode: str, seed: int) -> list[Image.Image]:
    # Distinct noise in every frame: encoders merge identical consecutive frames.
    return [noise(width, height, mode, seed + i) for i in range(frames)]


@cache
def gif_animated(width: int, height: int, frames: int, seed: int = 0) -> bytes:
    first, *rest = _frames(width, height, frames, "P", seed)
    return encode(first, "GIF", save_all=True, append_images=rest, duration=50, loop=0)


@cache
def webp_animated(width: int, height: int, frames: int, seed: int = 0) -> bytes:
    first, *rest = _frames(width, height, frames, "RGB", seed)
    return encode(first, "WEBP", save_all=True, append_images=rest, duration=50, method=0)


@cache
def apng(width: int, height: int, frames: int, seed: int = 0, default_image: bool = False) -> bytes:
    """An animated PNG; with default_image the IDAT image is not part of the animation (frames + 1 images)."""
    first, *rest = _frames(width, height, frames + default_image, "RGB", seed)
    return encode(
        first,
        "PNG",
        save_all=True,
        append_images=rest,
        duration=50,
        default_image=default_image,
        compress_level=1,
    )


@cache
def mpo(
    width: int, height: int, frames: int = 2, seed: int = 0, later: tuple[int, int] | None = None
) -> bytes:
    """A multi-picture JPEG; `later` gives the frames after the first a size of their own."""
    first = noise(width, height, "RGB", seed)
    rest = [noise(*(later or (width, height)), "RGB", seed + i) for i in range(1, frames)]
    return encode(first, "MPO", save_all=True, append_images=rest)


def bmp(width: int = 4, height: int = 4) -> bytes:
    return encode(noise(width, height), "BMP")


def tiff(width: int = 4, height: int = 4) -> bytes:
    return encode(noise(width, height), "TIFF")


# Damage of any kind


def flip(data: bytes, offset: int, mask: int = 0xFF) -> bytes:
    """`data` with the byte at `offset` XORed with `mask`."""
    out = bytearray(data)
    out[offset] ^= mask
    return bytes(out)


def truncate(data: bytes, length: int) -> bytes:
    """The first `length` bytes (negative: all but the last -length)."""
    return data[:length]


# PNG surgery


class Chunk(NamedTuple):
    kind: bytes
    offset: int  # of the length field
    length: int  # of the body

    @property
    def body(self) -> slice:
        return slice(self.offset + 8, self.offset + 8 + self.length)

    @property
    def end(self) -> int:
        return self.offset + 12 + self.length


def png_chunks(data: bytes) -> list[Chunk]:
    out, pos = [], 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        out.append(Chunk(kind, pos, length))
        pos += 12 + length
    return out


def png_chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    """A chunk with the right CRC unless one is given."""
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def png_find(data: bytes, kind: bytes, index: int = 0) -> Chunk:
    return [c for c in png_chunks(data) if c.kind == kind][index]


def png_replace(data: bytes, chunk: Chunk, new: bytes) -> bytes:
    return data[: chunk.offset] + new + data[chunk.end :]


def png_insert(data: bytes, before: bytes, new: bytes) -> bytes:
    """`new` inserted before the first chunk of kind `before`."""
    at = png_find(data, before).offset
    return data[:at] + new + data[at:]


def png_bad_crc(data: bytes, kind: bytes = b"IDAT", index: int = 0) -> bytes:
    """The CRC of one chunk broken, its body intact."""
    return flip(data, png_find(data, kind, index).end - 1, 0x01)


def png_damaged_idat(data: bytes) -> bytes:
    """A byte inside the IDAT zlib stream flipped and the CRC recomputed, so only inflate can notice."""
    chunk = png_find(data, b"IDAT")
    body = bytearray(data[chunk.body])
    body[len(body) // 2] ^= 0xFF
    return png_replace(data, chunk, png_chunk(b"IDAT", bytes(body)))


def png_claiming(width: int, height: int, data: bytes | None = None) -> bytes:
    """A PNG (by default a 4x4 one) whose IHDR, with a valid CRC, claims another size."""
    data = png(4, 4) if data is None else data
    chunk = png_find(data, b"IHDR")
    body = struct.pack(">II", width, height) + data[chunk.offset + 16 : chunk.offset + 21]
    return png_replace(data, chunk, png_chunk(b"IHDR", body))


def apng_declaring(data: bytes, frames: int) -> bytes:
    """An APNG whose acTL declares `frames` frames, whatever it holds."""
    chunk = png_find(data, b"acTL")
    plays = data[chunk.offset + 12 : chunk.offset + 16]
    return png_replace(data, chunk, png_chunk(b"acTL", struct.pack(">I", frames) + plays))


# GIF surgery


def gif_descriptors(data: bytes) -> list[int]:
    """Offsets of the image descriptors (the ',' introducing each frame)."""
    pos, out = 13, []
    if data[10] & 0x80:
        pos += 3 << ((data[10] & 7) + 1)

    def skip_sub_blocks(pos: int) -> int:
        while data[pos]:
            pos += data[pos] + 1
        return pos + 1

    while pos < len(data) and data[pos] != 0x3B:
        if data[pos] == 0x21:  # extension: label, then sub-blocks
            pos = skip_sub_blocks(pos + 2)
        elif data[pos] == 0x2C:
            out.append(pos)
            flags = data[pos + 9]
            pos += 10 + ((3 << ((flags & 7) + 1)) if flags & 0x80 else 0)
            pos = skip_sub_blocks(pos + 1)  # past the LZW minimum code size
        else:
            raise ValueError(f"unexpected GIF block {data[pos]:#x} at {pos}")
    return out


def gif_move_frame(data: bytes, index: int, left: int, top: int) -> bytes:
    """Frame `index` placed at (left, top): past the logical screen, Pillow grows the canvas."""
    out = bytearray(data)
    struct.pack_into("<HH", out, gif_descriptors(data)[index] + 1, left, top)
    return bytes(out)


def gif_screen(data: bytes, width: int, height: int) -> bytes:
    """The logical screen size rewritten."""
    out = bytearray(data)
    struct.pack_into("<HH", out, 6, width, height)
    return bytes(out)


# JPEG surgery


def jpeg_sof(data: bytes) -> int:
    """Offset of the first SOFn marker (its 0xFF), walking segments the simple way (no fill bytes)."""
    pos = 2
    while True:
        marker, length = data[pos + 1], struct.unpack_from(">H", data, pos + 2)[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return pos
        pos += 2 + length


def jpeg_claiming(width: int, height: int, data: bytes | None = None) -> bytes:
    """A JPEG (by default an 8x8 one) whose frame header claims another size."""
    data = jpeg(8, 8) if data is None else data
    out = bytearray(data)
    struct.pack_into(">HH", out, jpeg_sof(data) + 5, height, width)
    return bytes(out)


def jpeg_insert(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset:]
