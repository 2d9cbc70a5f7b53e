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

from PIL import Image, ImageChops, ImageDraw, ImageFont

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

# The codes gate.inspect may answer for one image (SPEC section 4's per-image table, less the base64 one):
# whatever is done to an image's bytes, the gate ends in success or one of these.
INSPECT_CODES = frozenset(
    {
        "IMAGE_TOO_LARGE",
        "UNSUPPORTED_IMAGE_TYPE",
        "IMAGE_TYPE_MISMATCH",
        "IMAGE_DIMENSION_TOO_LARGE",
        "IMAGE_TOO_MANY_PIXELS",
        "TOO_MANY_FRAMES",
        "INVALID_IMAGE",
    }
)


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


def gif_frame_size(data: bytes, index: int, width: int, height: int) -> bytes:
    """Frame `index`'s descriptor rewritten to claim another size (its pixel data unchanged)."""
    out = bytearray(data)
    struct.pack_into("<HH", out, gif_descriptors(data)[index] + 5, width, height)
    return bytes(out)


def gif_comment(data: bytes, text: bytes) -> bytes:
    """A comment extension holding `text` inserted before the first frame."""
    blocks = b"".join(
        bytes([len(part)]) + part for part in (text[i : i + 255] for i in range(0, len(text), 255))
    )
    at = gif_descriptors(data)[0]
    return data[:at] + b"\x21\xfe" + blocks + b"\x00" + data[at:]


# JPEG and MPO surgery, continued


def mpo_pictures(data: bytes) -> list[int]:
    """Offsets of every picture in an MPO, from Pillow's reading of its MP index (relative to the index)."""
    with Image.open(io.BytesIO(data)) as im:
        entries = im.mpinfo[0xB002]  # type: ignore[attr-defined]
    base = data.index(b"MPF\x00") + 4
    return [0] + [base + e["DataOffset"] for e in entries[1:]]


def mpo_claiming(data: bytes, index: int, width: int, height: int) -> bytes:
    """An MPO whose picture `index` has a frame header claiming another size."""
    start = mpo_pictures(data)[index]
    return data[:start] + jpeg_claiming(width, height, data[start:])


def jpeg_segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


def jpeg_padded(data: bytes, segments: int = 0, fill: int = 0) -> bytes:
    """`data` with `segments` empty COM segments, then `fill` 0xFF fill bytes, right after its SOI: what no
    encoder writes, and a walk to the frame header takes a step for each."""
    return data[:2] + b"\xff\xfe\x00\x02" * segments + b"\xff" * fill + data[2:]


# WebP surgery


def riff(chunks: bytes) -> bytes:
    """A WebP file around `chunks` (each FourCC, size, payload and pad byte)."""
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP" + chunks


def riff_chunk(fourcc: bytes, payload: bytes) -> bytes:
    return fourcc + struct.pack("<I", len(payload)) + payload + b"\x00" * (len(payload) & 1)


def webp_vp8x(width: int, height: int, data: bytes, flags: int = 0) -> bytes:
    """A simple WebP (`data`) wrapped in an extended file whose VP8X canvas claims width x height."""
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return riff(riff_chunk(b"VP8X", bytes([flags, 0, 0, 0]) + canvas) + data[12:])


def webp_claiming(width: int, height: int, data: bytes) -> bytes:
    """A simple lossy (VP8) or lossless (VP8L) WebP whose bitstream header claims another size."""
    out = bytearray(data)
    if data.startswith(b"VP8L", 12):
        (bits,) = struct.unpack_from("<I", data, 21)
        bits = bits & ~0xFFFFFFF | (width - 1) | (height - 1) << 14
        struct.pack_into("<I", out, 21, bits)
    else:
        struct.pack_into("<HH", out, 26, width, height)
    return bytes(out)


def webp_frame_size(data: bytes, width: int, height: int) -> bytes:
    """An animated WebP whose first ANMF frame claims another size (24-bit minus-one fields at 12..18)."""
    at = data.index(b"ANMF") + 8
    out = bytearray(data)
    out[at + 6 : at + 12] = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return bytes(out)


def jpeg_scans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every scan in a JPEG: its SOS segment and the entropy-coded data after it."""
    pos, out = 2, []
    while data[pos + 1] != 0xD9:
        start = pos
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
        if data[start + 1] == 0xDA:
            while data[pos] != 0xFF or data[pos + 1] == 0 or 0xD0 <= data[pos + 1] <= 0xD7:
                pos += 2 if data[pos] == 0xFF else 1
            out.append((start, pos))
    return out


@cache
def jpeg_scan_bomb(scans: int, side: int = 2000) -> bytes:
    """A flat grey progressive JPEG whose last scan is repeated until there are `scans`: a few bytes a scan,
    and libjpeg passes over every block of the image for each one (a warning, not an error)."""
    data = encode(Image.new("L", (side, side), 128), "JPEG", progressive=True, quality=50)
    start, end = jpeg_scans(data)[-1]
    return data[:start] + data[start:end] * (scans - len(jpeg_scans(data)) + 1) + data[end:]


# Photos, screenshots and animations for normalization (tests/gate/test_normalize.py)

D50 = (0.9642, 1.0, 0.8249)  # the ICC profile connection space's white
SRGB_CURVE = (2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045)  # the sRGB tone curve as an ICC 'para'
MARKER = (200, 100, 50)  # photo_with_exif's corner square, in the photo's own colour space


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _icc_xyz(x: float, y: float, z: float) -> bytes:
    return b"XYZ \0\0\0\0" + _s15(x) + _s15(y) + _s15(z)


def _icc_text(text: str) -> bytes:
    encoded = text.encode("utf-16-be")
    return b"mluc\0\0\0\0" + struct.pack(">II2s2sII", 1, 12, b"en", b"US", len(encoded), 28) + encoded


def _icc_curve(*params: float) -> bytes:
    """A parametric curve: a pure gamma (one parameter) or the sRGB form (five)."""
    kind = {1: 0, 5: 3}[len(params)]
    return b"para\0\0\0\0" + struct.pack(">HH", kind, 0) + b"".join(_s15(p) for p in params)


def icc_profile(space: str, tags: dict[bytes, bytes]) -> bytes:
    """A version 4 display profile for colour space `space` ('RGB' or 'GRAY') holding `tags` (signature:
    tag data); tags with equal data share it, as profiles share one TRC between three channels."""
    table, body, offset = b"", b"", 128 + 4 + 12 * len(tags)
    placed: dict[bytes, int] = {}
    for signature, data in tags.items():
        if data not in placed:
            placed[data] = offset + len(body)
            body += data + b"\0" * (-len(data) % 4)
        table += signature + struct.pack(">II", placed[data], len(data))
    header = struct.pack(
        ">I4sI4s4s4s", offset + len(body), b"lcms", 0x04300000, b"mntr", space.encode().ljust(4), b"XYZ "
    )
    header += struct.pack(">6H", 2024, 1, 1, 0, 0, 0) + b"acsp" + bytes(28) + _icc_xyz(*D50)[8:] + bytes(48)
    return header + struct.pack(">I", len(tags)) + table + body


@cache
def display_p3() -> bytes:
    """Display P3 (phone cameras' colour space): wider primaries than sRGB, the same white and tone curve."""
    curve = _icc_curve(*SRGB_CURVE)
    return icc_profile(
        "RGB",
        {
            b"desc": _icc_text("Display P3 (test)"),
            b"cprt": _icc_text("No copyright"),
            b"wtpt": _icc_xyz(*D50),
            b"rXYZ": _icc_xyz(0.5151, 0.2412, -0.0011),
            b"gXYZ": _icc_xyz(0.2920, 0.6922, 0.0419),
            b"bXYZ": _icc_xyz(0.1571, 0.0666, 0.7841),
            b"rTRC": curve,
            b"gTRC": curve,
            b"bTRC": curve,
        },
    )


@cache
def linear_grey() -> bytes:
    """A greyscale profile with a linear tone curve: its mid grey 128 is sRGB's 188."""
    tags = {
        b"desc": _icc_text("Linear grey (test)"),
        b"cprt": _icc_text("No copyright"),
        b"wtpt": _icc_xyz(*D50),
    }
    return icc_profile("GRAY", tags | {b"kTRC": _icc_curve(1.0)})


def p3_to_srgb(colour: tuple[int, int, int]) -> tuple[int, int, int]:
    """A Display P3 colour in sRGB, computed from the published matrix (not through a colour engine)."""

    def linear(value: int) -> float:
        v = value / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    def encoded(linear: float) -> int:
        v = min(1.0, max(0.0, linear))
        return round(255 * (12.92 * v if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055))

    r, g, b = map(linear, colour)
    matrix = ((1.2249401, -0.2249404, 0.0), (-0.0420569, 1.0420571, 0.0), (-0.0196376, -0.0786361, 1.0982735))
    red, green, blue = (encoded(m[0] * r + m[1] * g + m[2] * b) for m in matrix)
    return red, green, blue


@cache
def photo_with_exif(
    width: int, height: int, *, orientation: int = 1, gps: bool = True, icc: bytes | None = None
) -> bytes:
    """A JPEG like a phone's: smooth grey blobs (they compress as a photo does) with a MARKER square in the
    stored top-left corner, EXIF (this orientation, a camera model, GPS tags), XMP, a comment, and `icc`."""
    blobs = noise(width // 64 + 2, height // 64 + 2, "L").point(lambda v: 96 + v // 4)
    im = blobs.resize((width, height), Image.Resampling.BICUBIC).convert("RGB")
    side = min(width, height) // 8
    im.paste(MARKER, (0, 0, side, side))
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x0110] = "Test camera"
    if gps:
        exif.get_ifd(0x8825).update({1: "N", 2: (52.0, 22.0, 0.0), 3: "E", 4: (4.0, 53.0, 0.0)})
    xmp = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF/></x:xmpmeta>'
    options: dict[str, Any] = {"exif": exif, "xmp": xmp, "comment": b"taken at home", "quality": 90}
    return encode(im, "JPEG", **options, **({"icc_profile": icc} if icc else {}))


def screenshot(width: int, height: int, *, alpha: bool = True) -> Image.Image:
    """Flat panels in a few colours, on a transparent (or white) background: under 256 colours."""
    im = Image.new("RGBA" if alpha else "RGB", (width, height), (0, 0, 0, 0) if alpha else (255, 255, 255))
    for i in range(12):
        box = (
            i * width // 16,
            i * height // 16,
            i * width // 16 + width // 4,
            i * height // 16 + height // 5,
        )
        im.paste(((i * 37) % 256, (i * 91) % 256, (i * 53) % 256), box)
    return im


TEXT = "The quick brown fox jumps over the lazy dog: 0123456789 (){}[] <=> ;"


def ui_screenshot(width: int = 2880, height: int = 1800, *, alpha: bool = False) -> Image.Image:
    """A window as a Retina screen shows it, what a host is handed most: a title bar, a sidebar and panels in
    flat colours, 1-pixel borders and rules, and lines of small bitmap-font text (11 pixels high, black on
    white, no antialiasing). With `alpha`, the window sits on a clear background with a soft shadow."""
    im = Image.new("RGBA", (width, height), (0, 0, 0, 0)) if alpha else Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default_imagefont()
    inset = 40 if alpha else 0
    if alpha:
        for step in range(inset):  # a shadow fading out to the clear background
            draw.rectangle((step, step, width - step, height - step), fill=(0, 0, 0, step * 3))
    draw.rectangle((inset, inset, width - inset - 1, height - inset - 1), fill=(246, 246, 246, 255))
    draw.rectangle((inset, inset, width - inset - 1, inset + 56), fill=(225, 228, 232, 255))  # title bar
    draw.line((inset, inset + 56, width - inset, inset + 56), fill=(160, 160, 160, 255))
    draw.rectangle((inset, inset + 57, inset + 480, height - inset - 1), fill=(234, 238, 244, 255))  # sidebar
    draw.line((inset + 480, inset + 57, inset + 480, height - inset), fill=(170, 170, 170, 255))
    for row, y in enumerate(range(inset + 90, height - inset - 40, 28)):
        draw.text((inset + 24, y), f"Item {row:03d}", fill=(40, 40, 40, 255), font=font)
    for top in range(inset + 90, height - inset - 300, 320):  # panels with text and rules
        box = (inset + 520, top, width - inset - 40, top + 280)
        draw.rectangle(box, fill=(255, 255, 255, 255), outline=(200, 200, 200, 255))
        for k, y in enumerate(range(top + 16, top + 260, 18)):
            draw.text((box[0] + 16, y), f"{k:02d} {TEXT * 3}", fill=(0, 0, 0, 255), font=font)
        draw.line((box[0] + 8, top + 140, box[2] - 8, top + 140), fill=(220, 60, 60, 255))
    return im


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """A photo-like picture: smooth colour blobs with a seeded sensor grain of up to 15 levels."""
    blobs = noise(width // 48 + 2, height // 48 + 2, "RGB", seed).resize(
        (width, height), Image.Resampling.BICUBIC
    )
    return ImageChops.add(blobs, noise(width, height, "RGB", seed + 1).point(lambda v: v // 16))


@cache
def animated(fmt: str, width: int, height: int, durations: tuple[int, ...], loop: int = 0) -> bytes:
    """An animation (GIF, PNG or WEBP) of smooth, distinct frames with these durations (ms)."""
    frames = [
        noise(width // 16 + 2, height // 16 + 2, "RGB", seed).resize(
            (width, height), Image.Resampling.BICUBIC
        )
        for seed in range(len(durations))
    ]
    if fmt == "GIF":  # Pillow's GIF writer would quantize with median cut, which is slow
        frames = [frame.quantize(256, Image.Quantize.FASTOCTREE) for frame in frames]
    first, *rest = frames
    return encode(first, fmt, save_all=True, append_images=rest, duration=list(durations), loop=loop)


def gif_xmp(data: bytes, packet: bytes) -> bytes:
    """An XMP application extension inserted before the first frame: the packet stored raw, then the
    258-byte "magic trailer" that lets a reader walking sub-blocks land on the terminator."""
    trailer = bytes([1, *range(255, -1, -1), 0])
    at = gif_descriptors(data)[0]
    return data[:at] + b"\x21\xff\x0bXMP DataXMP" + packet + trailer + data[at:]


def opened(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def has_no_metadata(data: bytes) -> None:
    with opened(data) as im:
        assert not im.getexif()
        assert not {"exif", "xmp", "icc_profile", "comment", "photoshop"} & set(im.info)
        assert not getattr(im, "text", None)
    for needle in (b"Exif", b"ICC_PROFILE", b"http://ns.adobe.com", b"iCCP", b"tEXt", b"iTXt", b"zTXt"):
        assert needle not in data
