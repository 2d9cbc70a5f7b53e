"""A hostile corpus, built here from tests/support/images.py: every case ends in its documented code (SPEC
section 4), within its memory and time bounds, and the daemon keeps serving afterwards.

The decisions, case by case:
- Huge dimensions in a tiny file (PNG IHDR, GIF logical screen, JPEG SOF, WebP VP8X canvas, VP8L, VP8):
  IMAGE_DIMENSION_TOO_LARGE, or IMAGE_TOO_MANY_PIXELS under a max_pixels below max_side², from the header
  alone: nothing is allocated for the pixels.
- A size hidden behind a small header (a second SOF, a VP8X canvas over a larger bitstream, a frame larger
  than the APNG or WebP canvas): INVALID_IMAGE, from the decoder or from the gate's header-vs-decoder check.
- zTXt, iTXt and iCCP bombs: INVALID_IMAGE. Pillow inflates one chunk to at most MAX_TEXT_CHUNK (1 MiB) and
  all text to at most MAX_TEXT_MEMORY (64 MiB), then raises; with LOAD_TRUNCATED_IMAGES off (the gate's
  setting) that fails the image. Metadata of that size has no business in a chat image, so refusing the whole
  image is right, and the message says "decompression bomb".
- An IDAT stream that inflates far past the pixels the header declares: admitted. The decoder stops once the
  declared rows are filled, so the rest is never inflated; the pixels are exactly what the header says.
- GIF frames whose extent grows the canvas past the limits, and MPO pictures after the first that are larger
  than the limits: INVALID_IMAGE (the SPEC's "frame extent grows past limits"), not the header codes: the
  header (the logical screen, the first picture) was within the limits, and the size that breaks them is
  only found while decoding. Pillow's bomb check refuses the huge ones before allocating anything.
- An APNG declaring 2^31 frames: TOO_MANY_FRAMES, from the frame count before any frame is decoded.
- A progressive JPEG with thousands of scans, each a few bytes and each a pass over every block: nothing in
  it is malformed, so only the pool's time bound stops it: INVALID_IMAGE, and the worker is replaced.
- Truncations and byte flips anywhere: success or one of the gate's codes, never another exception; a cut
  is always INVALID_IMAGE (UNSUPPORTED_IMAGE_TYPE when the cut takes the magic bytes).
- Polyglots: bytes after the end of the image (HTML after a PNG's IEND, a ZIP after a JPEG's EOI) are
  admitted and kept with trailing_data="allow", and INVALID_IMAGE with "reject"; a payload inside the image
  (a GIF comment, a PNG tEXt chunk, a JPEG COM segment) is part of the image and admitted in both modes.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from attachstore.config import Limits
from attachstore.errors import Rejected
from attachstore.gate.checks import inspect
from attachstore.gate.pool import DecodePool
from attachstore.gate.probe import probe_header, sniff
from attachstore.refs import Ref
from tests.conftest import MakeClient
from tests.support import images
from tests.support.http import admit, admit_ok, error_of

DEFAULTS = Limits()
SMALL_PIXELS = Limits(max_pixels=1_000_000)
MiB = 2**20
HTML = b"<html><body><script>alert(document.domain)</script></body></html>\n"


def outcome(data: bytes, limits: Limits = DEFAULTS, trailing_data: str = "allow") -> Rejected | None:
    """The Rejected that inspect raises, or None if the image is admitted."""
    try:
        inspect(data, None, limits, trailing_data=trailing_data)
    except Rejected as e:
        error = e
    else:
        return None
    assert error.message
    assert "\n" not in error.message
    return error


def rejected(data: bytes, limits: Limits = DEFAULTS, trailing_data: str = "allow") -> Rejected:
    error = outcome(data, limits, trailing_data)
    assert error is not None, "admitted"
    return error


def peak_bytes(call: Callable[[], Any]) -> int:
    """The most memory Python objects held at once while `call` ran (zlib's output is such an object)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


# Decompression bombs: huge header dimensions in a tiny file


def _vp8l(width: int, height: int) -> bytes:
    return images.webp_claiming(width, height, images.webp(8, 8, lossless=True))


HEADER_BOMBS = {
    "PNG IHDR 100000x100000": (lambda: images.png_claiming(100_000, 100_000), DEFAULTS),
    "PNG IHDR 2^31-1 square": (lambda: images.png_claiming(2**31 - 1, 2**31 - 1), DEFAULTS),
    "PNG IHDR many pixels": (lambda: images.png_claiming(1500, 1500), SMALL_PIXELS),
    "GIF logical screen 65535x65535": (lambda: images.gif_screen(images.gif(8, 8), 65535, 65535), DEFAULTS),
    "GIF logical screen many pixels": (lambda: images.gif_screen(images.gif(8, 8), 1500, 1500), SMALL_PIXELS),
    "JPEG SOF 65535x65535": (lambda: images.jpeg_claiming(65535, 65535), DEFAULTS),
    "JPEG SOF many pixels": (lambda: images.jpeg_claiming(1500, 1500), SMALL_PIXELS),
    "WebP VP8X canvas 2^24 square": (lambda: images.webp_vp8x(2**24, 2**24, images.webp(8, 8)), DEFAULTS),
    "WebP VP8X canvas many pixels": (lambda: images.webp_vp8x(1500, 1500, images.webp(8, 8)), SMALL_PIXELS),
    "WebP VP8L 16384x16384": (lambda: _vp8l(16384, 16384), DEFAULTS),
    "WebP VP8L many pixels": (lambda: _vp8l(1500, 1500), SMALL_PIXELS),
    "WebP VP8 16383x16383": (lambda: images.webp_claiming(16383, 16383, images.webp(8, 8)), DEFAULTS),
}


@pytest.mark.parametrize(("make", "limits"), HEADER_BOMBS.values(), ids=HEADER_BOMBS.keys())
def test_header_bombs_are_refused_from_the_header(make: Callable[[], bytes], limits: Limits) -> None:
    data = make()
    assert len(data) < 1000
    errors: list[Rejected] = []
    assert peak_bytes(lambda: errors.append(rejected(data, limits))) < MiB  # no canvas was allocated
    expected = "IMAGE_TOO_MANY_PIXELS" if limits is SMALL_PIXELS else "IMAGE_DIMENSION_TOO_LARGE"
    assert errors[0].code == expected
    assert errors[0].hint is not None
    assert "shrink it to at most" in errors[0].hint


def _second_sof(width: int, height: int) -> bytes:
    """A JPEG with a second frame header after the first: Pillow sizes the image by the last one."""
    data = images.jpeg(8, 8)
    start = images.jpeg_sof(data)
    end = start + 2 + struct.unpack_from(">H", data, start + 2)[0]
    sof = bytearray(data[start:end])
    struct.pack_into(">HH", sof, 5, height, width)
    return data[:end] + bytes(sof) + data[end:]


def _apng_frame_past_the_canvas() -> bytes:
    data = images.apng(8, 6, 2)
    chunk = images.png_find(data, b"fcTL", 1)
    body = bytearray(data[chunk.body])
    struct.pack_into(">II", body, 4, 4000, 4000)
    return images.png_replace(data, chunk, images.png_chunk(b"fcTL", bytes(body)))


def _anmf_bitstream(width: int, height: int) -> bytes:
    """An animated WebP whose first frame's VP8 bitstream claims another size than the 16x12 canvas."""
    data = images.webp_animated(16, 12, 2)
    at = data.index(b"VP8 ", data.index(b"ANMF")) + 8 + 6
    return data[:at] + struct.pack("<HH", width, height) + data[at + 4 :]


HIDDEN_SIZES = {
    "JPEG second SOF 65535x65535": (lambda: _second_sof(65535, 65535), "decompression bomb"),
    "JPEG second SOF 10x1000": (
        lambda: _second_sof(10, 1000),
        "header says 8x8 but the decoder sees 10x1000",
    ),
    "WebP VP8X 8x8 over VP8L 16384x16384": (
        lambda: images.webp_vp8x(8, 8, _vp8l(16384, 16384)),
        "libwebp cannot parse it",
    ),
    "WebP ANMF bitstream 16383x16383": (lambda: _anmf_bitstream(16383, 16383), "libwebp cannot parse it"),
    "APNG fcTL 4000x4000 in 8x6": (_apng_frame_past_the_canvas, "APNG contains invalid frames"),
}


@pytest.mark.parametrize(("make", "says"), HIDDEN_SIZES.values(), ids=HIDDEN_SIZES.keys())
def test_sizes_hidden_behind_a_small_header_are_invalid(make: Callable[[], bytes], says: str) -> None:
    data = make()
    errors: list[Rejected] = []
    assert peak_bytes(lambda: errors.append(rejected(data))) < MiB
    assert errors[0].code == "INVALID_IMAGE"
    assert says in errors[0].message


def test_webp_anmf_size_is_not_what_is_decoded() -> None:
    # libwebp takes a frame's size from its bitstream, not from the ANMF header, and composes it on the
    # canvas: a huge ANMF size allocates nothing, so the file is admitted at the canvas size.
    data = images.webp_frame_size(images.webp_animated(16, 12, 2), 16000, 16000)
    found: list[Any] = []
    assert peak_bytes(lambda: found.append(inspect(data, None, DEFAULTS))) < MiB
    assert (found[0].width, found[0].height, found[0].frames) == (16, 12, 2)


# Decompression bombs in PNG metadata


@cache
def _zeros(n: int) -> bytes:
    return zlib.compress(bytes(n), 9)


def _text_bomb(kind: bytes, where: bytes = b"IDAT") -> bytes:
    """A PNG with a chunk of `kind` whose 200 MB of compressed zeros take about 200 KB."""
    bomb = _zeros(200_000_000)
    body = {
        b"zTXt": b"Comment\x00\x00" + bomb,
        b"iTXt": b"Comment\x00\x01\x00\x00\x00" + bomb,
        b"iCCP": b"icc\x00\x00" + bomb,
    }[kind]
    return images.png_insert(images.png(8, 8), where, images.png_chunk(kind, body))


def _many_texts() -> bytes:
    """70 zTXt chunks of just under 1 MiB each: each within MAX_TEXT_CHUNK, all past MAX_TEXT_MEMORY."""
    one = _zeros(MiB - 1)
    chunks = b"".join(images.png_chunk(b"zTXt", b"k%d\x00\x00" % i + one) for i in range(70))
    return images.png_insert(images.png(8, 8), b"IDAT", chunks)


TEXT_BOMBS = {
    "zTXt before IDAT": (lambda: _text_bomb(b"zTXt"), "inflates past 1,048,576 bytes", 8 * MiB),
    "zTXt after IDAT": (lambda: _text_bomb(b"zTXt", b"IEND"), "inflates past 1,048,576 bytes", 8 * MiB),
    "iTXt": (lambda: _text_bomb(b"iTXt"), "inflates past 1,048,576 bytes", 8 * MiB),
    "iCCP": (lambda: _text_bomb(b"iCCP"), "inflates past 1,048,576 bytes", 8 * MiB),
    "70 zTXt of 1 MiB": (_many_texts, "inflate past 67,108,864 bytes in all", 80 * MiB),
}


@pytest.mark.parametrize(("make", "says", "most"), TEXT_BOMBS.values(), ids=TEXT_BOMBS.keys())
def test_png_text_bombs_are_invalid_and_inflate_no_further_than_pillows_limits(
    make: Callable[[], bytes], says: str, most: int
) -> None:
    data = make()
    assert len(data) < 300_000
    errors: list[Rejected] = []
    assert peak_bytes(lambda: errors.append(rejected(data))) < most
    assert errors[0].code == "INVALID_IMAGE"
    assert says in errors[0].message
    assert "decompression bomb" in errors[0].message


def test_idat_inflating_past_its_pixels_is_admitted_without_inflating_it() -> None:
    data = images.png(8, 8)  # its 8 rows are the first 200 of these zero bytes: filter 0, black pixels
    idat = images.png_chunk(b"IDAT", _zeros(200_000_000))
    bomb = images.png_replace(data, images.png_find(data, b"IDAT"), idat)
    found: list[Any] = []
    assert peak_bytes(lambda: found.append(inspect(bomb, None, DEFAULTS))) < MiB
    assert (found[0].width, found[0].height) == (8, 8)


# Frames that grow past the limits


FRAME_BOMBS = {
    "GIF frame at 65000,65000": (
        lambda: images.gif_move_frame(images.gif_animated(32, 24, 3), 2, 65000, 65000),
        "frame 3 of 3: decoding would exceed the pixel limit",
    ),
    "GIF frame 65535x65535": (
        lambda: images.gif_frame_size(images.gif_animated(32, 24, 3), 1, 65535, 65535),
        "frame 2 of 3: decoding would exceed the pixel limit",
    ),
    "GIF first frame 65535x65535": (
        lambda: images.gif_frame_size(images.gif_animated(32, 24, 3), 0, 65535, 65535),
        "decoding would exceed the pixel limit",
    ),
    "GIF frame growing the canvas to 2022x24": (
        lambda: images.gif_move_frame(images.gif_animated(32, 24, 3), 1, 1990, 0),
        "frame 2 of 3: the frame grows the image to 2022x24",
    ),
    "MPO second picture 65535x65535": (
        lambda: images.mpo_claiming(images.mpo(16, 12, 2), 1, 65535, 65535),
        "frame 2 of 2: decoding would exceed the pixel limit",
    ),
    "MPO second picture 3000x12": (
        lambda: images.mpo_claiming(images.mpo(16, 12, 2), 1, 3000, 12),
        "frame 2 of 2: the frame grows the image to 3000x12",
    ),
}


@pytest.mark.parametrize(("make", "says"), FRAME_BOMBS.values(), ids=FRAME_BOMBS.keys())
def test_frames_growing_past_the_limits_are_invalid(make: Callable[[], bytes], says: str) -> None:
    data = make()
    header = probe_header(data)
    assert header is not None
    assert max(header.width, header.height) <= DEFAULTS.max_side  # the header alone passes
    errors: list[Rejected] = []
    assert peak_bytes(lambda: errors.append(rejected(data))) < MiB
    assert errors[0].code == "INVALID_IMAGE"
    assert says in errors[0].message


def test_apng_declaring_two_billion_frames() -> None:
    error = rejected(images.apng_declaring(images.apng(8, 6, 2), 2**31))
    assert error.code == "TOO_MANY_FRAMES"
    assert "2,147,483,648 frames" in error.message


# Truncations and flips in every region of every format


def _png_regions(data: bytes) -> list[int]:
    idat = images.png_find(data, b"IDAT")
    tables = images.png_find(data, b"PLTE" if b"PLTE" in data else b"IHDR")
    return [12, tables.offset + 8, idat.offset + 8, len(data) // 2, len(data) - 8]


def _apng_regions(data: bytes) -> list[int]:
    return [*_png_regions(data)[:3], images.png_find(data, b"fdAT").offset + 12, len(data) - 8]


def _jpeg_regions(data: bytes) -> list[int]:
    first_scan = images.jpeg_scans(data)[0][0]
    return [
        2,
        data.index(b"\xff\xdb"),
        data.index(b"\xff\xc4"),
        first_scan + 14,
        len(data) // 2,
        len(data) - 2,
    ]


def _mpo_regions(data: bytes) -> list[int]:
    second = images.mpo_pictures(data)[1]
    return [*_jpeg_regions(data)[:4], data.index(b"MPF\x00") + 8, second, second + 200, len(data) - 2]


def _gif_regions(data: bytes) -> list[int]:
    frames = images.gif_descriptors(data)
    return [6, 13, *(f + offset for f in frames[:2] for offset in (1, 12)), len(data) // 2, len(data) - 1]


def _webp_regions(data: bytes) -> list[int]:
    anmf = data.find(b"ANMF")
    return [4, 12, 20, *([anmf, anmf + 24] if anmf > 0 else [30]), len(data) // 2, len(data) - 4]


REGIONED = {
    "PNG palette": (lambda: images.png(12, 9, "P"), _png_regions),
    "PNG interlaced": (lambda: images.png(12, 9, "RGBA", interlace=1), _png_regions),
    "APNG": (lambda: images.apng(12, 9, 3), _apng_regions),
    "JPEG": (lambda: images.jpeg(12, 9), _jpeg_regions),
    "JPEG progressive": (lambda: images.jpeg(12, 9, progressive=True), _jpeg_regions),
    "MPO": (lambda: images.mpo(12, 9, 2), _mpo_regions),
    "GIF": (lambda: images.gif(12, 9), _gif_regions),
    "GIF animated": (lambda: images.gif_animated(12, 9, 3), _gif_regions),
    "WebP lossy": (lambda: images.webp(12, 9), _webp_regions),
    "WebP lossless": (lambda: images.webp(12, 9, lossless=True), _webp_regions),
    "WebP animated": (lambda: images.webp_animated(12, 9, 3), _webp_regions),
}


def _around(data: bytes, landmarks: list[int]) -> Iterator[int]:
    for landmark in landmarks:
        yield from (i for i in range(landmark - 2, landmark + 3) if 0 <= i < len(data))


@pytest.mark.parametrize(("make", "regions"), REGIONED.values(), ids=REGIONED.keys())
def test_truncation_in_every_region_is_invalid(
    make: Callable[[], bytes], regions: Callable[[bytes], list[int]]
) -> None:
    data = make()
    for cut in _around(data, regions(data)):
        for mode in ("allow", "reject"):
            error = rejected(data[:cut], trailing_data=mode)
            assert error.code == ("INVALID_IMAGE" if sniff(data[:cut]) else "UNSUPPORTED_IMAGE_TYPE"), cut


@pytest.mark.parametrize(("make", "regions"), REGIONED.values(), ids=REGIONED.keys())
def test_flips_in_every_region_end_in_a_documented_code(
    make: Callable[[], bytes], regions: Callable[[bytes], list[int]]
) -> None:
    data = make()
    for at in _around(data, regions(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = images.flip(data, at, mask)
            for mode in ("allow", "reject"):
                error = outcome(damaged, trailing_data=mode)
                if error is not None:
                    assert error.code in images.INSPECT_CODES, (at, mask, error.code)
                    continue
                header = probe_header(damaged)  # what is admitted has the size its header says
                found = inspect(damaged, None, DEFAULTS)
                assert header is not None
                assert (found.width, found.height) == (header.width, header.height)


# Polyglots


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("index.html", HTML)
    return out.getvalue()


AFTER_THE_END = {
    "PNG with HTML after IEND": (lambda: images.png(16, 12), HTML, "PNG"),
    "JPEG with a ZIP after EOI": (lambda: images.jpeg(16, 12), _zip(), "JPEG"),
    "MPO with a ZIP after its last picture": (lambda: images.mpo(16, 12, 2), _zip(), "JPEG"),
    "GIF with HTML after the trailer": (lambda: images.gif_animated(16, 12, 2), HTML, "GIF"),
    "WebP with HTML after the RIFF": (lambda: images.webp(16, 12), HTML, "WebP"),
    "JPEG with a second JPEG after EOI": (lambda: images.jpeg(16, 12), images.jpeg(8, 8), "JPEG"),
}


@pytest.mark.parametrize(("make", "payload", "name"), AFTER_THE_END.values(), ids=AFTER_THE_END.keys())
def test_payload_after_the_end_depends_on_trailing_data(
    make: Callable[[], bytes], payload: bytes, name: str
) -> None:
    image = make()
    polyglot = image + payload
    assert inspect(polyglot, None, DEFAULTS) == inspect(image, None, DEFAULTS)
    assert outcome(image, trailing_data="reject") is None
    error = rejected(polyglot, trailing_data="reject")
    assert error.code == "INVALID_IMAGE"
    assert f"{len(payload):,} bytes follow the end of the image" in error.message
    assert f"the {name} image ends at offset {len(image):,}" in error.message
    assert error.hint is not None
    assert "re-encode" in error.hint


INSIDE = {
    "GIF with <script> in a comment extension": lambda: images.gif_comment(
        images.gif_animated(16, 12, 2), HTML
    ),
    "PNG with HTML in a tEXt chunk": lambda: images.png_insert(
        images.png(16, 12), b"IDAT", images.png_chunk(b"tEXt", b"Comment\x00" + HTML)
    ),
    "JPEG with HTML in a COM segment": lambda: images.jpeg_insert(
        images.jpeg(16, 12), 2, images.jpeg_segment(0xFE, HTML)
    ),
    "JPEG with a ZIP in an APP segment": lambda: images.jpeg_insert(
        images.jpeg(16, 12), 2, images.jpeg_segment(0xEF, _zip())
    ),
}


@pytest.mark.parametrize("make", INSIDE.values(), ids=INSIDE.keys())
def test_payload_inside_the_image_is_admitted_in_both_modes(make: Callable[[], bytes]) -> None:
    data = make()
    assert HTML in data or b"PK" in data
    assert outcome(data) is None
    assert outcome(data, trailing_data="reject") is None


def test_ultra_hdr_gain_map_is_inside_the_image() -> None:
    # An Ultra HDR photo is a JPEG whose MP index lists a gain map picture after it; Pillow decodes only the
    # primary picture, but the gain map is part of the file, not bytes after its end.
    mpo = images.mpo(16, 12, 2)
    xmp = images.jpeg_segment(0xE1, b'http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta hdrgm:Version="1.0"/>')
    photo = mpo[:2] + xmp + mpo[2:]
    found = inspect(photo, None, DEFAULTS, trailing_data="reject")
    assert found.frames == 1
    error = rejected(photo + b"PK", trailing_data="reject")
    assert "2 bytes follow the end of the image" in error.message


def test_webp_riff_size_past_the_data_is_invalid_in_both_modes() -> None:
    data = bytearray(images.webp(16, 12))
    struct.pack_into("<I", data, 4, len(data) - 8 + 10)
    for mode in ("allow", "reject"):
        error = rejected(bytes(data), trailing_data=mode)
        assert error.code == "INVALID_IMAGE"
        assert "RIFF header says" in error.message


def test_unknown_trailing_data_mode_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="trailing_data"):
        inspect(images.png(4, 4), None, DEFAULTS, trailing_data="strip")


# Through the decode pool: the pathological ones, then a normal image still admits


POOL_CORPUS: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "PNG IHDR bomb": (lambda: images.png_claiming(100_000, 100_000), "allow", "IMAGE_DIMENSION_TOO_LARGE"),
    "WebP VP8X bomb": (
        lambda: images.webp_vp8x(2**24, 2**24, images.webp(8, 8)),
        "allow",
        "IMAGE_DIMENSION_TOO_LARGE",
    ),
    "zTXt bomb": (lambda: _text_bomb(b"zTXt"), "allow", "INVALID_IMAGE"),
    "iCCP bomb": (lambda: _text_bomb(b"iCCP"), "allow", "INVALID_IMAGE"),
    "70 zTXt of 1 MiB": (_many_texts, "allow", "INVALID_IMAGE"),
    "GIF frame bomb": (FRAME_BOMBS["GIF frame at 65000,65000"][0], "allow", "INVALID_IMAGE"),
    "MPO second picture bomb": (FRAME_BOMBS["MPO second picture 65535x65535"][0], "allow", "INVALID_IMAGE"),
    "APNG of 2^31 frames": (
        lambda: images.apng_declaring(images.apng(8, 6, 2), 2**31),
        "allow",
        "TOO_MANY_FRAMES",
    ),
    "PNG with HTML after IEND, rejected": (lambda: images.png(16, 12) + HTML, "reject", "INVALID_IMAGE"),
    "JPEG with a ZIP after EOI, rejected": (lambda: images.jpeg(16, 12) + _zip(), "reject", "INVALID_IMAGE"),
}
TIMEOUT = 2.0  # the time bound only the scan bomb is meant to reach
# The time bound of the jobs that must end by a limit or pass: no stall of a loaded machine reaches it.
AMPLE = 60.0
SCAN_BOMB_SCANS = 20_000  # some 300 KB; at about 2 ms a scan, 40 s of decoding, far past TIMEOUT


async def test_the_pool_survives_the_corpus_and_keeps_serving() -> None:
    pool = DecodePool(1, AMPLE)  # the pool reads its timeout for each job
    try:
        for name, (make, mode, expected) in POOL_CORPUS.items():
            with pytest.raises(Rejected) as info:
                await pool.inspect(make(), None, DEFAULTS, "sha256", trailing_data=mode)
            assert info.value.code == expected, name
            assert "longer than" not in info.value.message, name  # stopped by a limit, not by the clock

        # Nothing in the scan bomb is malformed: only the time bound stops it, and the worker is replaced.
        bomb = images.jpeg_scan_bomb(SCAN_BOMB_SCANS)
        pool.timeout = TIMEOUT
        with pytest.raises(Rejected) as info:
            await pool.inspect(bomb, None, DEFAULTS, "sha256")
        assert info.value.code == "INVALID_IMAGE"
        assert f"longer than {TIMEOUT:g} s" in info.value.message

        pool.timeout = AMPLE
        for mode in ("allow", "reject"):
            image = images.png(16, 12)
            passed = await pool.inspect(image, None, DEFAULTS, "sha256", trailing_data=mode)
            assert (passed.media_type, passed.width, passed.height) == ("image/png", 16, 12)
            assert passed.digest == Ref.of("sha256", image).digest
        polyglot = await pool.inspect(images.jpeg(16, 12) + _zip(), None, DEFAULTS, "sha256")
        assert polyglot.media_type == "image/jpeg"
    finally:
        await pool.close()


async def test_the_pool_refuses_an_unknown_trailing_data_mode() -> None:
    pool = DecodePool(1, AMPLE)
    try:
        with pytest.raises(ValueError, match="trailing_data"):
            await pool.inspect(images.png(4, 4), None, DEFAULTS, "sha256", trailing_data="strip")
    finally:
        await pool.close()


async def test_a_decode_worker_gets_none_of_the_daemons_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder exploit would run in the worker: it must not find the S3 keys or the index's password."""
    monkeypatch.setenv("ATTACHSTORE_S3_SECRET_ACCESS_KEY", "s3-secret")
    monkeypatch.setenv("ATTACHSTORE_INDEX_DSN", "postgresql://u:db-password@db/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("PGPASSWORD", "pg-secret")
    pool = DecodePool(1, AMPLE)
    try:
        await pool.inspect(images.png(4, 4), None, DEFAULTS, "sha256")
        [worker] = pool._idle
        environ = (Path("/proc") / str(worker.proc.pid) / "environ").read_bytes()
    finally:
        await pool.close()
    for secret in (b"s3-secret", b"db-password", b"aws-secret", b"pg-secret"):
        assert secret not in environ


# Through the HTTP app


async def test_an_admitted_polyglot_is_served_as_its_verified_type_only(make_client: MakeClient) -> None:
    client = await make_client()
    polyglot = images.png(16, 12) + HTML
    [a] = await admit_ok(client, polyglot)
    assert (a["media_type"], a["bytes"]) == ("image/png", len(polyglot))
    response = await client.get(f"/v1/attachments/{a['ref']}")
    assert response.status == 200
    assert await response.read() == polyglot  # kept byte for byte: the ref is the hash of what was sent
    assert response.headers["Content-Type"] == "image/png"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"


async def test_a_deployment_that_rejects_trailing_data(make_client: MakeClient) -> None:
    client = await make_client(admission={"trailing_data": "reject"})
    response = await admit(client, images.png(16, 12) + HTML)
    error = await error_of(response)
    assert (response.status, error["code"], error["index"]) == (422, "INVALID_IMAGE", 0)
    assert "follow the end of the image" in error["message"]
    await admit_ok(client, images.png(16, 12))
