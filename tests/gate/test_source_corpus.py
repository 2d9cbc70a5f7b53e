"""Real HEIC/HEIF, AVIF, BMP and TIFF files from public suites (tests/gate/corpus/sources/SOURCES.md says
where each is from and what it exercises), admitted through the HTTP app with the default configuration:
each is stored as a type providers take, within the limits, and its pixels are those of an independent
decode of its primary image (the first page, the first frame), upright and in sRGB. The damaged ones are
refused with their code.

The reference decode is this module's own, with the libraries a reader would use (pi-heif for HEIF, Pillow
for the rest), so that it does not share the gate's mistakes: it takes the image as its decoder shows it,
applies the orientation (libheif applies irot/imir itself; Pillow reports an AVIF's irot/imir, like a TIFF's
Orientation, as an EXIF orientation), converts an embedded ICC profile to sRGB, and reduces 16-bit samples
to their high byte. It is then resized to the stored size and compared, composited on grey so that the
colour under a fully transparent pixel does not count, with its alpha compared apart.
"""

from __future__ import annotations

import io
from pathlib import Path

import aiohttp
import pi_heif
import pytest
from PIL import Image, ImageChops, ImageCms, ImageOps, ImageStat

from attachstore.config import Limits
from tests.support.http import Client, error_of
from tests.support.images import has_no_metadata, opened

SOURCES = Path(__file__).parent / "corpus" / "sources"
LIMITS = Limits()  # the defaults: what the client fixture's app admits under

# (file under SOURCES, the type its bytes are, its primary image's upright size)
ADMITTED = [
    ("heic/RGB_8__128x128.heif", "image/heic", (128, 128)),
    ("heic/RGB_10__128x128.heif", "image/heic", (128, 128)),
    ("heic/RGBA_10__128x128.heif", "image/heic", (128, 128)),
    ("heic/zPug_3.heic", "image/heic", (64, 64)),
    ("heic/empty_icc.heic", "image/heic", (1025, 900)),
    ("heic/arrow.heic", "image/heic", (3024, 4032)),
    ("heic/blue_grid_alpha.heic", "image/heic", (320, 240)),
    ("heic/blue_gh_issue_692.heic", "image/heif", (320, 240)),
    ("avif/kodim03_yuv420_8bpc.avif", "image/avif", (768, 512)),
    ("avif/paris_10bpc.avif", "image/avif", (403, 302)),
    ("avif/abc_color_irot_alpha_irot.avif", "image/avif", (256, 512)),
    ("avif/colors-animated-8bpc.avif", "image/avif", (150, 150)),
    ("avif/sofa_grid1x5_420.avif", "image/avif", (1024, 770)),
    ("avif/paris_icc_exif_xmp.avif", "image/avif", (403, 302)),
    ("bmp/pal1.bmp", "image/bmp", (127, 64)),
    ("bmp/pal4.bmp", "image/bmp", (127, 64)),
    ("bmp/pal4rle.bmp", "image/bmp", (127, 64)),
    ("bmp/pal8.bmp", "image/bmp", (127, 64)),
    ("bmp/pal8rle.bmp", "image/bmp", (127, 64)),
    ("bmp/pal8topdown.bmp", "image/bmp", (127, 64)),
    ("bmp/pal8os2.bmp", "image/bmp", (127, 64)),
    ("bmp/rgb16-565.bmp", "image/bmp", (127, 64)),
    ("bmp/rgb24.bmp", "image/bmp", (127, 64)),
    ("bmp/rgb32.bmp", "image/bmp", (127, 64)),
    ("bmp/rgba32.bmp", "image/bmp", (127, 64)),
    ("tiff/hopper_lzw.tif", "image/tiff", (128, 128)),
    ("tiff/hopper_g4_500.tif", "image/tiff", (500, 500)),
    ("tiff/tiff_16bit_RGB.tiff", "image/tiff", (100, 40)),
    ("tiff/16bit.MM.deflate.tif", "image/tiff", (64, 64)),
    ("tiff/tiff_16bit_RGBa.tiff", "image/tiff", (100, 40)),
    ("tiff/minisblack-2c-8b-alpha.tiff", "image/tiff", (64, 64)),
    ("tiff/multipage.tiff", "image/tiff", (10, 10)),
    ("tiff/quad-tile.jpg.tiff", "image/tiff", (512, 384)),
    ("tiff/tiff_strip_cmyk_jpeg.tif", "image/tiff", (100, 100)),
]

# (file under SOURCES, the code the gate refuses it with)
REFUSED = [
    ("heic/corrupted.heic", "INVALID_IMAGE"),
    ("avif/invalid_color10x10_alpha5x5.avif", "INVALID_IMAGE"),
    ("bmp/shortfile.bmp", "INVALID_IMAGE"),
    ("bmp/badbitcount.bmp", "INVALID_IMAGE"),
    ("bmp/reallybig.bmp", "IMAGE_DIMENSION_TOO_LARGE"),  # 3,000,000 x 2,000,000 in its header
    ("tiff/crash-0c7e0e8e11ce787078f00b5b0ca409a167f070e0.tif", "INVALID_IMAGE"),
    ("tiff/crash-2020-10-test.tif", "INVALID_IMAGE"),
    ("tiff/oom-225817ca0f8c663be7ab4b9e717b02c661e66834.tif", "INVALID_IMAGE"),
]

# Out of 255, against the reference decode resized to the stored size. Measured with today's fit
# (normalize._fit_still) on these files as Pillow and pi-heif's Pillow plugin open them: the largest mean
# absolute difference of any band was 0.00 for a PNG (lossless: what could remain is the order in which
# resizing, colour conversion and 16-bit reduction happen) and 2.65 for a JPEG (quality 90, 4:2:0 chroma);
# the largest difference of a band's mean was 0.39. Quantization noise averages out of the mean, a colour
# mistake does not: skipping the Display P3 profile of empty_icc.heic moves a band's mean by 1.92 while its
# mean absolute difference stays at 3.39.
TOLERANCE = {"image/png": 2.0, "image/jpeg": 4.0}
BIAS = 0.75
DAMAGED = (OSError, ValueError, TypeError, RuntimeError, Image.DecompressionBombError)


def reference(data: bytes, media_type: str) -> Image.Image:
    """The primary image (first page, first frame), upright, in sRGB, as RGB or RGBA."""
    if media_type in ("image/heic", "image/heif"):
        heif = pi_heif.open_heif(io.BytesIO(data))
        im = heif[heif.primary_index].to_pillow()
    else:
        im = Image.open(io.BytesIO(data))
        im.load()
    im = ImageOps.exif_transpose(im)
    if im.mode.startswith("I;16"):
        im = Image.frombytes("L", im.size, im.tobytes("raw", "I;16B")[::2])
    elif im.mode == "La":  # associated alpha: Pillow converts La only to LA
        im = im.convert("LA")
    alpha = im.mode in ("LA", "RGBA", "PA") or "transparency" in im.info
    profile = im.info.get("icc_profile")
    im = im.convert("RGBA" if alpha else "RGB")
    if profile:
        source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
        srgb = ImageCms.createProfile("sRGB")
        im = ImageCms.profileToProfile(im, source, srgb, outputMode=im.mode)
    return im


def compared(stored: Image.Image, expected: Image.Image) -> tuple[float, float]:
    """The largest mean absolute difference of any band (colours composited on grey, then alpha), and the
    largest difference between a colour band's means."""
    grey = Image.new("RGBA", expected.size, (128, 128, 128, 255))
    a, b = stored.convert("RGBA"), expected.convert("RGBA")
    on_grey = [Image.alpha_composite(grey, im).convert("RGB") for im in (a, b)]
    absolute = ImageStat.Stat(ImageChops.difference(*on_grey)).mean
    absolute += ImageStat.Stat(ImageChops.difference(a.getchannel("A"), b.getchannel("A"))).mean
    means = [ImageStat.Stat(im).mean for im in on_grey]
    return max(absolute), max(abs(x - y) for x, y in zip(*means, strict=True))


async def post_file(client: Client, name: str, data: bytes) -> aiohttp.ClientResponse:
    """A multipart upload that declares no type: the bytes say what the file is."""
    form = aiohttp.FormData()
    form.add_field("source", "user")
    form.add_field("image", data, filename=Path(name).name, content_type="application/octet-stream")
    return await client.post("/v1/attachments", data=form)


@pytest.mark.parametrize(("name", "media_type", "size"), ADMITTED)
def test_the_reference_decode_of_each_source(name: str, media_type: str, size: tuple[int, int]) -> None:
    assert reference((SOURCES / name).read_bytes(), media_type).size == size


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's, about the damaged TIFF tags it skips
@pytest.mark.parametrize("name", [name for name, _ in REFUSED])
def test_the_refused_sources_do_not_decode(name: str) -> None:
    media_type = "image/" + Path(name).parent.name
    with pytest.raises(DAMAGED):
        reference((SOURCES / name).read_bytes(), media_type)


@pytest.mark.parametrize(("name", "media_type", "size"), ADMITTED)
async def test_each_source_is_stored_as_a_provider_type_close_to_its_decode(
    client: Client, name: str, media_type: str, size: tuple[int, int]
) -> None:
    data = (SOURCES / name).read_bytes()
    response = await post_file(client, name, data)
    assert response.status == 201, await response.text()
    [a] = (await response.json())["attachments"]
    original, steps = a["normalized"]["original"], a["normalized"]["steps"]
    assert (original["media_type"], original["bytes"]) == (media_type, len(data))
    assert sorted((original["width"], original["height"])) == sorted(size)  # before or after irot
    assert "converted" in steps
    assert a["media_type"] in TOLERANCE
    assert a["frames"] == 1
    assert max(a["width"], a["height"]) <= LIMITS.max_side
    assert a["width"] * a["height"] <= LIMITS.max_pixels
    assert a["bytes"] <= LIMITS.max_image_bytes

    stored = await (await client.get(f"/v1/attachments/{a['ref']}")).read()
    assert len(stored) == a["bytes"]
    has_no_metadata(stored)
    expected = reference(data, media_type)
    with opened(stored) as im:
        kind = a["media_type"].removeprefix("image/").upper()
        assert (im.format, im.size) == (kind, (a["width"], a["height"]))
        # The aspect ratio is the upright one (an unapplied rotation swaps it) and only a fit shrinks it.
        assert abs(im.width / im.height / (size[0] / size[1]) - 1) < 0.01
        assert im.width <= size[0]
        if expected.mode == "RGBA" and expected.getextrema()[3][0] < 255:
            assert a["media_type"] == "image/png"  # transparency is kept
        if im.size != expected.size:
            expected = expected.resize(im.size, Image.Resampling.LANCZOS)
        absolute, bias = compared(im, expected)
        assert absolute <= TOLERANCE[a["media_type"]]
        assert bias <= BIAS


@pytest.mark.parametrize(("name", "code"), REFUSED)
async def test_each_damaged_source_is_refused_with_its_code(client: Client, name: str, code: str) -> None:
    response = await post_file(client, name, (SOURCES / name).read_bytes())
    error = await error_of(response)
    assert (response.status, error["code"], error["index"]) == (422, code, 0)
