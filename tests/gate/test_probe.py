from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable

import pytest
from PIL import Image

from attachstore.gate.containers import JPEG_HEADER_STEPS, HeaderTooDeep
from attachstore.gate.probe import MEDIA_TYPES, Header, probe_header, sniff
from tests.support import images

# (name, factory) pairs: every format and variant the gate admits, small and large.
SAMPLES: dict[str, Callable[[], bytes]] = {
    "png 1x1": lambda: images.png(1, 1),
    "png rgba": lambda: images.png(7, 5, "RGBA"),
    "png palette": lambda: images.png(7, 5, "P"),
    "png gray interlaced": lambda: images.png(7, 5, "L", interlace=1),
    "png large": lambda: images.png(1600, 1200),
    "apng": lambda: images.apng(9, 7, 3),
    "apng default image": lambda: images.apng(9, 7, 2, default_image=True),
    "jpeg 1x1": lambda: images.jpeg(1, 1),
    "jpeg gray": lambda: images.jpeg(7, 5, "L"),
    "jpeg cmyk": lambda: images.jpeg(7, 5, "CMYK"),
    "jpeg progressive": lambda: images.jpeg(7, 5, progressive=True),
    "jpeg large": lambda: images.jpeg(1600, 1200),
    "mpo": lambda: images.mpo(9, 7, 3),
    "gif 1x1": lambda: images.gif(1, 1),
    "gif large": lambda: images.gif(1600, 1200),
    "gif animated": lambda: images.gif_animated(9, 7, 3),
    "webp lossy 1x1": lambda: images.webp(1, 1),
    "webp lossless": lambda: images.webp(7, 5, lossless=True),
    "webp alpha (VP8X)": lambda: images.webp(7, 5, "RGBA"),
    "webp large": lambda: images.webp(1600, 1200),
    "webp animated": lambda: images.webp_animated(9, 7, 3),
}
SMALL = [name for name in SAMPLES if "large" not in name]


def pillow_header(data: bytes) -> Header:
    with Image.open(io.BytesIO(data)) as im:
        kind = {"MPO": "image/jpeg"}.get(im.format or "", f"image/{(im.format or '').lower()}")
        return Header(kind, im.width, im.height)


@pytest.mark.parametrize("name", SAMPLES)
def test_probe_agrees_with_pillow(name: str) -> None:
    data = SAMPLES[name]()
    header = probe_header(data)
    assert header == pillow_header(data)
    assert header is not None
    assert header.media_type in MEDIA_TYPES
    assert sniff(data) == header.media_type


@pytest.mark.parametrize("name", SMALL)
def test_every_prefix_gives_none_or_the_header(name: str) -> None:
    data = SAMPLES[name]()
    full = probe_header(data)
    seen = False
    for n in range(len(data)):  # every length, not only up to 64: a JPEG frame header comes later
        got = probe_header(data[:n])
        assert got in (None, full), n
        seen = seen or got is not None
        if seen:  # once the header is complete, more bytes don't change it
            assert got == full, n
    assert seen


@pytest.mark.parametrize(
    ("name", "need"),
    [
        ("png 1x1", 29),
        ("gif 1x1", 13),
        ("webp lossy 1x1", 30),
        ("webp lossless", 25),
        ("webp alpha (VP8X)", 30),
    ],
)
def test_fixed_headers_need_exactly_their_bytes(name: str, need: int) -> None:
    data = SAMPLES[name]()
    assert probe_header(data[: need - 1]) is None
    assert probe_header(data[:need]) == probe_header(data)


def test_jpeg_header_needs_the_whole_frame_header() -> None:
    data = images.jpeg(7, 5)
    sof = images.jpeg_sof(data)
    length = struct.unpack_from(">H", data, sof + 2)[0]
    assert probe_header(data[: sof + 2 + length - 1]) is None
    assert probe_header(data[: sof + 2 + length]) == Header("image/jpeg", 7, 5)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBP", "image/webp"),
        (b"RIFF\x00\x00\x00\x00WAVE", None),
        (b"\x89PNG\r\n\x1a", None),
        (b"\xff\xd8", None),
        (b"GIF88a", None),
        (b"", None),
        (images.SVG, None),
        (images.PDF, None),
        (images.HEIC, None),
    ],
)
def test_sniff(data: bytes, expected: str | None) -> None:
    assert sniff(data) == expected


@pytest.mark.parametrize("make", [images.bmp, images.tiff])
def test_other_formats_are_not_sniffed(make: Callable[[], bytes]) -> None:
    assert sniff(make()) is None
    assert probe_header(make()) is None


def test_never_raises_on_noise_after_a_magic() -> None:
    rng = random.Random(7)
    magics = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"RIFF\x00\x00\x00\x00WEBP"]
    fourccs = [b"VP8 ", b"VP8L", b"VP8X", b"VP8Z"]
    for i in range(4000):
        magic = magics[i % 4]
        if magic.startswith(b"RIFF"):
            magic += fourccs[i // 4 % 4]
        tail = rng.randbytes(rng.randrange(0, 80))
        if magic == b"\xff\xd8\xff":  # make the JPEG walker take many segments and markers
            tail = bytes(rng.choice((0xFF, 0xC0, 0xD0, 0x00, 0x01, 0x02, 0xDA)) for _ in tail)
        header = probe_header(magic + tail)
        assert header is None or (header.width > 0 and header.height > 0)


def test_never_raises_on_damaged_headers() -> None:
    rng = random.Random(8)
    for name in SMALL:
        data = SAMPLES[name]()[:200]
        for _ in range(300):
            damaged = images.flip(data, rng.randrange(len(data)), rng.randrange(1, 256))
            header = probe_header(damaged)
            assert header is None or (header.width > 0 and header.height > 0)


# PNG


def test_png_needs_ihdr_first() -> None:
    data = images.png(4, 4)
    text = images.png_chunk(b"tEXt", b"k\x00v")
    assert probe_header(images.png_insert(data, b"IHDR", text)) is None


@pytest.mark.parametrize(("width", "height"), [(0, 4), (4, 0), (2**31, 4), (4, 2**32 - 1)])
def test_png_out_of_range_sizes(width: int, height: int) -> None:
    assert probe_header(images.png_claiming(width, height)) is None


def test_png_largest_size() -> None:
    assert probe_header(images.png_claiming(2**31 - 1, 1)) == Header("image/png", 2**31 - 1, 1)


# GIF


def test_gif_logical_screen_is_the_size() -> None:
    assert probe_header(images.gif_screen(images.gif(4, 4), 65535, 3)) == Header("image/gif", 65535, 3)
    assert probe_header(images.gif_screen(images.gif(4, 4), 0, 0)) is None


# JPEG


def test_jpeg_fill_bytes_and_standalone_markers() -> None:
    data = images.jpeg(7, 5)
    # Extra 0xFF fill before a marker, and TEM / RST markers (no length) between segments.
    assert probe_header(images.jpeg_insert(data, 2, b"\xff\xff\xff")) == Header("image/jpeg", 7, 5)
    assert probe_header(images.jpeg_insert(data, 2, b"\xff\x01\xff\xd3")) == Header("image/jpeg", 7, 5)


def _markers_to_sof(data: bytes) -> int:
    """The markers a walk passes from the SOI to the frame header, the frame header's included."""
    pos, markers, sof = 2, 1, images.jpeg_sof(data)
    while pos < sof:
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
        markers += 1
    return markers


def test_a_bounded_probe_takes_at_most_a_fixed_number_of_steps() -> None:
    """Every read probes the header on the event loop: a step for each marker and each fill byte, at most
    JPEG_HEADER_STEPS of them however the bytes are shaped."""
    data = images.jpeg(7, 5)
    room = JPEG_HEADER_STEPS - _markers_to_sof(data)
    assert probe_header(images.jpeg_padded(data, segments=room), bounded=True) == Header("image/jpeg", 7, 5)
    assert probe_header(images.jpeg_padded(data, fill=room), bounded=True) == Header("image/jpeg", 7, 5)
    for deep in (
        images.jpeg_padded(data, segments=room + 1),
        images.jpeg_padded(data, fill=room + 1),
        images.jpeg_padded(data, segments=room // 2, fill=room - room // 2 + 1),
        images.jpeg_padded(data, segments=917_000),  # 3.6 MB of empty COM segments
        images.jpeg_padded(data, fill=3_600_000),
    ):
        with pytest.raises(HeaderTooDeep, match=f"{JPEG_HEADER_STEPS:,}"):
            probe_header(deep, bounded=True)
        # Unbounded, the walk goes on to the frame header: objects admitted before the bound stay readable.
        assert probe_header(deep) == Header("image/jpeg", 7, 5)


def test_a_bounded_probe_answers_none_where_an_unbounded_one_does() -> None:
    data = images.jpeg(7, 5)
    for broken in (
        data[:40],
        images.jpeg_insert(data, 2, b"\x00\x00"),
        images.jpeg_padded(data, fill=10)[:30],
    ):
        assert probe_header(broken, bounded=True) is None
        assert probe_header(broken) is None
    for name, make in SAMPLES.items():
        assert probe_header(make(), bounded=True) == probe_header(make()), name


@pytest.mark.parametrize("marker", [0xC4, 0xC8, 0xCC])
def test_jpeg_dht_jpg_dac_are_not_frame_headers(marker: int) -> None:
    # A segment in the SOF range that isn't one, whose body would read as a 9999x9999 frame header.
    fake = bytes([0xFF, marker, 0x00, 0x0B, 0x08, 0x27, 0x0F, 0x27, 0x0F, 0x01, 0x11, 0x00, 0x00])
    assert probe_header(images.jpeg_insert(images.jpeg(7, 5), 2, fake)) == Header("image/jpeg", 7, 5)


def test_jpeg_sof_variants() -> None:
    data = images.jpeg(7, 5)
    sof = images.jpeg_sof(data)
    for marker in (0xC1, 0xC2, 0xC3, 0xC5, 0xC7, 0xC9, 0xCB, 0xCD, 0xCF):
        out = bytearray(data)
        out[sof + 1] = marker
        assert probe_header(bytes(out)) == Header("image/jpeg", 7, 5)


@pytest.mark.parametrize(
    "segment",
    [
        b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00",  # a scan before any frame header
        b"\xff\xd9",  # end of image
        b"\xff\xd8",  # a second start of image
        b"\xff\x00",  # a stuffed byte outside a scan
        b"\xff\xe0\x00\x01",  # a length that can't count itself
        b"\x00\x00",  # junk where a marker must be
    ],
)
def test_jpeg_malformed_before_the_frame_header(segment: bytes) -> None:
    assert probe_header(images.jpeg_insert(images.jpeg(7, 5), 2, segment)) is None


def test_jpeg_frame_header_must_be_consistent() -> None:
    data = images.jpeg(7, 5)
    sof = images.jpeg_sof(data)
    assert probe_header(images.flip(data, sof + 3, 0x01)) is None  # length no longer matches the components
    assert probe_header(images.jpeg_claiming(7, 0, data)) is None
    assert probe_header(images.jpeg_claiming(65535, 1, data)) == Header("image/jpeg", 65535, 1)


def test_jpeg_segment_running_past_the_end() -> None:
    assert probe_header(b"\xff\xd8\xff\xe0\xff\xff" + bytes(100)) is None


# WebP


def test_webp_lossy_needs_a_key_frame_and_start_code() -> None:
    data = images.webp(7, 5)
    assert data[12:16] == b"VP8 "
    assert probe_header(images.flip(data, 20, 0x01)) is None  # an inter frame
    assert probe_header(images.flip(data, 24, 0x01)) is None  # start code


def test_webp_lossless_signature_and_version() -> None:
    data = images.webp(7, 5, lossless=True)
    assert data[12:16] == b"VP8L"
    assert probe_header(images.flip(data, 20, 0x01)) is None
    assert probe_header(images.flip(data, 24, 0x20)) is None  # version bits


def test_webp_extended_canvas_is_24_bits() -> None:
    data = bytearray(images.webp(7, 5, "RGBA"))
    assert data[12:16] == b"VP8X"
    data[24:30] = b"\xff\xff\xff\x00\x00\x00"
    assert probe_header(bytes(data)) == Header("image/webp", 2**24, 1)


def test_webp_unknown_first_chunk() -> None:
    data = bytearray(images.webp(7, 5))
    data[12:16] = b"VP8Z"
    assert probe_header(bytes(data)) is None
