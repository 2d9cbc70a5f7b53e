"""Sources the gate converts (gate/sources.py, gate/boxes.py): what their headers say, the bombs refused from
the headers alone, and the conversion a decode worker makes of each (worker.run, as the pool runs it).
HEIC decodes are shown on real files by tests/gate/test_source_corpus.py; here a HEIF is its boxes."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from collections.abc import Callable

import pytest
from PIL import Image, ImageChops

from attachstore.config import Admission, Limits
from attachstore.errors import Rejected
from attachstore.gate import sources
from attachstore.gate.checks import canonical_type, inspect, precheck
from attachstore.gate.containers import Malformed
from attachstore.gate.worker import Failed, Job, Passed, run
from tests.gate.test_hostile import MiB, peak_bytes
from tests.support import images
from tests.support import sources as craft

DEFAULTS = Limits()
FIT = Admission().fit_limits(DEFAULTS)  # the widest bounds the gate takes a source within


def admitted(data: bytes, declared: str | None = None, *, fit: bool = True, convert: bool = True) -> Passed:
    outcome = run(Job(data, declared, DEFAULTS, "sha256", fit_limits=FIT if fit else None, convert=convert))
    assert isinstance(outcome, Passed), outcome
    return outcome


def refused(data: bytes, declared: str | None = None, *, fit: bool = True, convert: bool = True) -> Failed:
    outcome = run(Job(data, declared, DEFAULTS, "sha256", fit_limits=FIT if fit else None, convert=convert))
    assert isinstance(outcome, Failed), outcome
    return outcome


def stored(outcome: Passed) -> Image.Image:
    assert outcome.data is not None
    im = Image.open(io.BytesIO(outcome.data))
    im.load()
    return im


def tiff(*frames: Image.Image, **options: object) -> bytes:
    first, *rest = frames
    return images.encode(first, "TIFF", save_all=True, append_images=rest, **options)


# Recognising a source from its first bytes


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (craft.ftyp(b"heic", b"mif1", b"heic"), "image/heic"),
        (craft.ftyp(b"heix", b"mif1"), "image/heic"),
        (craft.ftyp(b"mif1", b"heic"), "image/heic"),
        (craft.ftyp(b"msf1", b"hevc"), "image/heic"),
        (craft.ftyp(b"mif1", b"miaf"), "image/heif"),
        (craft.ftyp(b"avif", b"mif1", b"miaf"), "image/avif"),
        (craft.ftyp(b"avis", b"msf1"), "image/avif"),
        (craft.ftyp(b"mif1", b"avif"), "image/avif"),
        (craft.ftyp(b"mp42", b"isom"), None),  # a video
        (craft.ftyp(b"qt  "), None),
        (craft.bmp(4, 4), "image/bmp"),
        (craft.bmp(4, -4), "image/bmp"),
        (b"BMW is not a bitmap" + bytes(40), None),
        (craft.tiff(4, 4), "image/tiff"),
        (b"MM\x00*" + bytes(60), "image/tiff"),
        (b"II+\x00" + bytes(60), None),  # BigTIFF
        (images.png(4, 4), None),  # one of the four: not a source
    ],
)
def test_sniff(head: bytes, expected: str | None) -> None:
    assert sources.sniff(head[:64].ljust(64, b"\x00")) == expected


# What the headers say


def test_a_heif_primary_image_has_the_size_of_its_ispe() -> None:
    found = sources.read(craft.heif((4032, 3024), others=[(320, 240)]), "image/heic")
    assert (found.width, found.height, found.frames, found.tiles, found.largest) == (
        4032,
        3024,
        1,
        0,
        (4032, 3024),
    )


def test_a_grid_is_read_with_its_tiles() -> None:
    data = craft.heif((1000, 700), kind=b"grid", tiles=6, tile=(512, 256), grid=(3, 2, 1000, 700))
    found = sources.read(data, "image/heic")
    assert (found.width, found.height, found.tiles, found.largest) == (1000, 700, 6, (1000, 700))


@pytest.mark.parametrize(
    ("tiles", "tile", "grid", "says"),
    [
        (5, (512, 256), (3, 2, 1000, 700), "its grid of 3x2 tiles refers to 5 images"),
        (6, (512, 256), (3, 2, 1100, 700), "does not make 1100x700"),  # the tiles do not cover it
        (6, (512, 256), (3, 2, 500, 700), "does not make 500x700"),  # a column of tiles past it
        (6, None, (3, 2, 1000, 700), "the tiles of its grid are not all of one size"),
    ],
)
def test_a_grid_that_does_not_add_up_is_malformed(
    tiles: int, tile: tuple[int, int] | None, grid: tuple[int, int, int, int], says: str
) -> None:
    data = craft.heif((grid[2], grid[3]), kind=b"grid", tiles=tiles, tile=tile, grid=grid)
    with pytest.raises(Malformed, match=says):
        sources.read(data, "image/heic")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (craft.ftyp(b"heic", b"mif1"), "neither a primary image nor an image sequence"),
        (craft.heif((64, 64))[:-5], "runs past the end"),
        (craft.box(b"free") + craft.heif((64, 64)), "does not start with a file type"),
        (craft.heif((64, 64)).replace(b"ispe", b"ispx"), "has no size"),
        (craft.heif((64, 64), kind=b"grid", tiles=1, tile=(64, 64)), "descriptor has no location"),
    ],
)
def test_damaged_heif_boxes(data: bytes, says: str) -> None:
    with pytest.raises(Malformed, match=says):
        sources.read(data, "image/heic")


def test_an_avif_made_by_pillow_reads_as_it_was_made() -> None:
    still = images.encode(images.photo(120, 80), "AVIF")
    assert sources.read(still, "image/avif")[:4] == ("image/avif", 120, 80, 1)
    frames = [images.photo(48, 32, seed) for seed in range(3)]
    animated = images.encode(frames[0], "AVIF", save_all=True, append_images=frames[1:], duration=100)
    assert sources.read(animated, "image/avif")[:4] == ("image/avif", 48, 32, 3)


def test_tiff_pages_are_counted_and_their_chain_bounded() -> None:
    assert sources.read(craft.tiff(40, 30, pages=3), "image/tiff")[:4] == ("image/tiff", 40, 30, 3)
    first = struct.unpack_from("<I", craft.tiff(40, 30), 4)[0]
    looped = craft.tiff(40, 30, pages=2, chain=first)  # the second page points back at the first
    with pytest.raises(Malformed, match="comes back"):
        sources.read(looped, "image/tiff")
    with pytest.raises(Malformed, match="more than 4,096 pages"):
        sources.read(craft.tiff(4, 4, pages=sources.MAX_PAGES + 1), "image/tiff")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (craft.tiff(4, 4, samples=9), "9 samples of 8 bits"),
        (craft.tiff(4, 4, bits=64), "1 samples of 64 bits"),
        (craft.tiff(4, 4)[:40], "truncated"),
        (b"II*\x00" + (1 << 30).to_bytes(4, "little"), "outside the file"),
        (craft.bmp(0, 4), "a size of 0x4"),
        (craft.bmp(4, 0), "a size of 4x0"),
        (craft.bmp(4, 4, bits=7), "7 bits a pixel"),
        (craft.bmp(4, 4)[:30], "truncated"),
    ],
)
def test_damaged_tiff_and_bmp_headers(data: bytes, says: str) -> None:
    with pytest.raises(Malformed, match=says):
        sources.read(data, sources.sniff(data[:64].ljust(64, b"\x00")) or "")


def test_a_top_down_bmp_has_a_positive_height() -> None:
    assert sources.read(craft.bmp(5, -3), "image/bmp")[:3] == ("image/bmp", 5, 3)
    made = images.encode(images.noise(6, 2), "BMP")
    assert sources.read(made, "image/bmp")[:3] == ("image/bmp", 6, 2)


# Bombs: refused from the headers, before any decoder sees the bytes

SOURCE_BOMBS = {
    "HEIF grid of 65,280 tiles": (
        lambda: craft.heif((256, 255), kind=b"grid", tiles=255 * 256, grid=(255, 256, 256, 255)),
        "TOO_MANY_FRAMES",
    ),
    "AVIF 65535x65535": (
        lambda: craft.heif((65535, 65535), major=b"avif", compatible=(b"mif1",), kind=b"av01"),
        "IMAGE_DIMENSION_TOO_LARGE",
    ),
    "HEIF grid whose output is 65535x65535, its ispe 64x64": (
        lambda: craft.heif((64, 64), kind=b"grid", tiles=256, tile=(4096, 4096), grid=(16, 16, 65535, 65535)),
        "IMAGE_DIMENSION_TOO_LARGE",
    ),
    "HEIF thumbnail of 60000x60000 beside a small image": (
        lambda: craft.heif((64, 64), others=[(60000, 60000)]),
        "IMAGE_DIMENSION_TOO_LARGE",
    ),
    "HEIF 8192x8192 tile of a 64x64 grid": (
        lambda: craft.heif((64, 64), kind=b"grid", tiles=1, tile=(8192, 8192), grid=(1, 1, 64, 64)),
        "IMAGE_TOO_MANY_PIXELS",
    ),
    "TIFF strip of 100000x100000 in 30 bytes": (
        lambda: craft.tiff(100_000, 100_000),
        "IMAGE_DIMENSION_TOO_LARGE",
    ),
    "TIFF 8192x8192 of 16-bit samples": (
        lambda: craft.tiff(8192, 8192, samples=4, bits=16),
        "IMAGE_TOO_MANY_PIXELS",
    ),
    "TIFF tile of 65536x65536 in a 16x16 image": (
        lambda: craft.tiff(16, 16, tile=(65536, 65536)),
        "IMAGE_DIMENSION_TOO_LARGE",
    ),
    "BMP of 2^31 pixels": (lambda: craft.bmp(65536, -32768), "IMAGE_DIMENSION_TOO_LARGE"),
    "BMP of 8000x8400": (lambda: craft.bmp(8000, 8400), "IMAGE_DIMENSION_TOO_LARGE"),
}


@pytest.mark.parametrize(("make", "code"), SOURCE_BOMBS.values(), ids=SOURCE_BOMBS.keys())
def test_source_bombs_are_refused_from_the_headers(
    make: Callable[[], bytes], code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = make()
    limits = FIT if code != "IMAGE_TOO_MANY_PIXELS" else Limits(max_side=8192, max_pixels=8192 * 4096)

    def no_decoder(media_type: str) -> str:
        raise AssertionError(f"a decoder was asked for a {media_type} bomb")

    monkeypatch.setattr(sources, "plugin", no_decoder)
    errors: list[Rejected] = []

    def check() -> None:
        with pytest.raises(Rejected) as e:
            inspect(data, None, limits, convert=True)
        errors.append(e.value)

    # What the reader keeps is bounded by the format (65,535 tiles at most), not by the size claimed.
    assert peak_bytes(check) < 8 * MiB
    assert errors[0].code == code, errors[0]
    assert len(data) < 2 * MiB


def test_a_tiff_of_8192_square_16_bit_samples_is_within_the_fit_bounds() -> None:
    """The pixel bomb above is one only under smaller limits: under the defaults' source bounds the same
    header passes to the decoder."""
    found = sources.read(craft.tiff(8192, 8192, samples=4, bits=16), "image/tiff")
    assert found.width * found.height <= FIT.max_pixels


# Conversion, in a decode worker's run


def test_a_bmp_photo_becomes_a_jpeg() -> None:
    data = images.encode(images.photo(300, 200), "BMP")
    out = admitted(data)
    assert out.media_type == "image/jpeg"
    assert out.original is not None
    assert (out.original.media_type, out.original.bytes, out.original.width, out.original.height) == (
        "image/bmp",
        len(data),
        300,
        200,
    )
    assert out.steps == ["converted", "reencoded"]
    assert (out.width, out.height) == (300, 200)


def test_a_bmp_screenshot_becomes_a_png_of_the_same_pixels() -> None:
    shot = images.screenshot(200, 120, alpha=False)
    out = admitted(images.encode(shot, "BMP"))
    assert out.media_type == "image/png"
    assert ImageChops.difference(stored(out).convert("RGB"), shot).getbbox() is None


def test_a_tiff_with_alpha_becomes_a_png_that_keeps_it() -> None:
    shot = images.screenshot(120, 90, alpha=True)
    out = admitted(tiff(shot, compression="tiff_deflate"))
    assert out.media_type == "image/png"
    assert ImageChops.difference(stored(out).convert("RGBA"), shot).getbbox() is None


def test_a_multi_page_tiff_is_stored_as_its_first_page() -> None:
    pages = [images.screenshot(80, 60, alpha=False), images.ui_screenshot(80, 60), images.photo(80, 60)]
    out = admitted(tiff(*pages, compression="tiff_lzw"))
    assert out.steps[:2] == ["converted", "first_frame"]
    assert ImageChops.difference(stored(out).convert("RGB"), pages[0]).getbbox() is None


def test_a_tiff_orientation_is_applied() -> None:
    out = admitted(tiff(images.photo(200, 100), tiffinfo={0x0112: 6}))  # turn right to show it upright
    assert (out.width, out.height) == (100, 200)
    assert out.steps == ["converted", "orientation", "reencoded"]
    turned = images.photo(200, 100).transpose(Image.Transpose.ROTATE_270)
    assert ImageChops.difference(stored(out).convert("RGB"), turned).getextrema()[0][1] < 40


def test_a_tiff_in_display_p3_is_converted_to_srgb() -> None:
    colour = (200, 60, 40)
    out = admitted(tiff(Image.new("RGB", (40, 30), colour), icc_profile=images.display_p3()))
    assert "colour" in out.steps
    got = stored(out).convert("RGB").getpixel((20, 15))
    assert isinstance(got, tuple)
    assert max(abs(a - b) for a, b in zip(got, images.p3_to_srgb(colour), strict=True)) <= 2


def test_a_16_bit_grey_tiff_is_scaled_not_clipped() -> None:
    ramp = Image.frombytes("I;16", (256, 1), b"".join((v * 257).to_bytes(2, "little") for v in range(256)))
    out = admitted(tiff(ramp))
    assert stored(out).convert("L").tobytes() == bytes(range(256))


def test_an_avif_is_converted_and_an_animated_one_gives_its_first_frame() -> None:
    still = admitted(images.encode(images.photo(160, 120), "AVIF"))
    assert (still.media_type, still.original and still.original.media_type) == ("image/jpeg", "image/avif")
    frames = [Image.new("RGB", (64, 48), colour) for colour in ((250, 0, 0), (0, 250, 0), (0, 0, 250))]
    animated = images.encode(frames[0], "AVIF", save_all=True, append_images=frames[1:], duration=100)
    out = admitted(animated)
    assert out.steps[:2] == ["converted", "first_frame"]
    red = stored(out).convert("RGB").getpixel((32, 24))
    assert isinstance(red, tuple)
    assert red[0] > 200
    assert max(red[1:]) < 40


def test_a_large_source_is_fitted_to_the_limits() -> None:
    out = admitted(images.encode(images.photo(3000, 2000), "BMP"))
    assert (out.width, out.height) == (2000, 1333)
    assert out.steps == ["converted", "resized", "reencoded"]
    assert out.original is not None
    assert (out.original.width, out.original.height) == (3000, 2000)


def test_with_oversize_reject_a_source_within_the_limits_is_still_converted() -> None:
    assert admitted(images.encode(images.photo(300, 200), "BMP"), fit=False).media_type == "image/jpeg"
    error = refused(images.encode(Image.new("1", (2400, 1600)), "BMP"), fit=False)
    assert error.code == "IMAGE_DIMENSION_TOO_LARGE"


def test_a_damaged_source_fails_in_its_conversion_as_invalid_image() -> None:
    data = images.encode(images.photo(64, 48), "BMP")
    error = refused(data[: len(data) // 2])
    assert error.code == "INVALID_IMAGE"
    assert error.message.startswith("the BMP image is damaged: ")


def test_without_convert_a_source_is_refused() -> None:
    error = refused(images.encode(images.photo(64, 48), "BMP"), convert=False)
    assert error.code == "UNSUPPORTED_IMAGE_TYPE"
    assert "can be stored only converted" in error.message


# Declared types


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ("image/heic", "image/heic"),
        ("image/heic-sequence", "image/heic"),
        ("image/heif-sequence", "image/heif"),
        ("image/avif-sequence", "image/avif"),
        ("IMAGE/X-MS-BMP", "image/bmp"),
        ("image/x-bmp", "image/bmp"),
        ("image/x-windows-bmp", "image/bmp"),
        ("image/x-tiff; a=b", "image/tiff"),
    ],
)
def test_source_aliases(declared: str, named: str) -> None:
    assert canonical_type(declared) == named


@pytest.mark.parametrize("declared", ["image/heic", "image/heif", "image/heif-sequence", None])
def test_heic_and_heif_are_right_for_each_other(declared: str | None) -> None:
    for head in (craft.ftyp(b"heic", b"mif1"), craft.ftyp(b"mif1", b"miaf")):
        assert precheck(100, head.ljust(64, b"\x00"), declared, DEFAULTS, convert=True) in sources.KIN


@pytest.mark.parametrize(
    ("data", "declared", "hint"),
    [
        (craft.bmp(4, 4), "image/avif", "declare it as image/bmp, or leave the media type out"),
        (craft.ftyp(b"avif", b"mif1"), "image/heic", "declare it as image/avif, or leave the media type out"),
        (craft.tiff(4, 4), "image/png", "declare it as image/tiff, or leave the media type out"),
        (images.png(4, 4), "image/tiff", "declare it as image/png, or leave the media type out"),
    ],
)
def test_a_declaration_that_disagrees_with_the_bytes_names_them(
    data: bytes, declared: str, hint: str
) -> None:
    with pytest.raises(Rejected) as e:
        precheck(len(data), data.ljust(64, b"\x00"), declared, DEFAULTS, convert=True)
    assert (e.value.code, e.value.hint) == ("IMAGE_TYPE_MISMATCH", hint)


# pi-heif is loaded by the decode worker only


def test_the_daemon_never_loads_pi_heif_and_a_decode_worker_does() -> None:
    script = (
        "import sys, attachstore.server, attachstore.gate, attachstore.service\n"
        "assert 'pi_heif' not in sys.modules, 'loaded by the daemon'\n"
        "from attachstore.gate import sources\n"
        "assert sources.plugin('image/heic') == 'HEIF'\n"
        "assert 'pi_heif' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
