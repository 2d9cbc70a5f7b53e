from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image, ImageChops, ImageCms

from attachstore.config import Limits
from attachstore.gate.character import Character, character, screenshot_like
from attachstore.gate.checks import Inspection, inspect
from attachstore.gate.normalize import Normalized, Target, Unfittable, fit
from tests.support import images
from tests.support.images import has_no_metadata, opened

DEFAULT = Target(2000, 4_000_000, 3_670_016)  # the admission defaults (config.Limits)
SMALL = Target(1000, 4_000_000, 3_670_016)  # the same, for smaller (faster) images


def durations(data: bytes) -> list[int]:
    with opened(data) as im:
        out = []
        for index in range(getattr(im, "n_frames", 1)):
            im.seek(index)
            im.load()  # a WebP frame's duration is known once it is decoded
            out.append(im.info["duration"])
        return out


def passes_gate(result: Normalized, target: Target) -> Inspection:
    """The gate's whole check of a result under the target's limits, refusing trailing bytes."""
    limits = Limits(max_side=target.max_side, max_pixels=target.max_pixels, max_image_bytes=target.max_bytes)
    found = inspect(result.data, result.media_type, limits, trailing_data="reject")
    assert (found.width, found.height) == (result.width, result.height)
    return found


def within(target: Target, result: Normalized) -> bool:
    return (
        max(result.width, result.height) <= target.max_side
        and result.width * result.height <= target.max_pixels
        and len(result.data) <= target.max_bytes
    )


def close(pixel: object, expected: tuple[int, ...], tolerance: int) -> bool:
    assert isinstance(pixel, tuple)
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, expected, strict=True))


# fit: still images


def test_an_oversize_phone_photo_comes_out_upright_srgb_and_clean() -> None:
    # 4000x3000 stored, orientation 6 (turn 90° clockwise to view), GPS tags, a Display P3 profile.
    data = images.photo_with_exif(4000, 3000, orientation=6, icc=images.display_p3())
    result = fit(data, "image/jpeg", DEFAULT)
    assert result.media_type == "image/jpeg"
    assert (result.width, result.height) == (1500, 2000)  # portrait now, 3:4 kept
    assert within(DEFAULT, result)
    assert result.steps == ("orientation", "colour", "metadata", "resized", "reencoded")
    assert passes_gate(result, DEFAULT).frames == 1
    has_no_metadata(result.data)
    with opened(result.data) as im:
        # The stored top-left corner is the viewed top-right one; its P3 colour is the same colour in sRGB.
        marker = images.p3_to_srgb(images.MARKER)
        assert marker != images.MARKER
        assert close(im.getpixel((1500 - 40, 40)), marker, 4)
        for corner in ((40, 40), (40, 2000 - 40), (1500 - 40, 2000 - 40)):
            r, g, b = im.getpixel(corner)  # type: ignore[misc]
            assert max(r, g, b) - min(r, g, b) <= 4  # grey blobs: far from the marker


@pytest.mark.parametrize(
    ("size", "target"),
    [
        ((4000, 3000), Target(2000, 4_000_000, 10**7)),
        ((3000, 3000), Target(2000, 1_000_000, 10**7)),
        ((300, 200), Target(2000, 10_000, 10**7)),
        ((5000, 1), Target(2000, 4_000_000, 10**7)),
        ((1, 3), Target(2, 4_000_000, 10**7)),
        ((700, 500), Target(100, 100, 10**7)),
    ],
)
def test_resizing_keeps_the_aspect_ratio_within_both_limits(size: tuple[int, int], target: Target) -> None:
    result = fit(images.encode(Image.new("L", size, 90), "PNG"), "image/png", target)
    assert within(target, result)
    assert result.steps == ("resized", "reencoded")
    long, short = max(size), min(size)
    got_long, got_short = max(result.width, result.height), min(result.width, result.height)
    assert (result.width >= result.height) == (size[0] >= size[1])
    assert got_short >= 1
    assert abs(got_short - got_long * short / long) <= 1  # the aspect ratio, to a pixel
    # As large as the limits allow: a longer side one pixel longer would break one of them.
    longer = got_long + 1
    shorter = max(1, round(longer * short / long))
    assert longer > target.max_side or longer * shorter > target.max_pixels or longer > long


def test_an_image_within_the_target_is_still_reencoded_and_never_upscaled() -> None:
    data = images.jpeg(300, 200)
    result = fit(data, "image/jpeg", DEFAULT)
    assert (result.width, result.height) == (300, 200)
    assert result.steps == ("reencoded",)
    assert passes_gate(result, DEFAULT)


def test_an_srgb_profile_is_dropped_without_converting() -> None:
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    data = images.photo_with_exif(400, 300, gps=False, icc=srgb)
    result = fit(data, "image/jpeg", DEFAULT)
    assert result.steps == ("metadata", "reencoded")
    has_no_metadata(result.data)
    with opened(result.data) as im:
        assert close(im.convert("RGB").getpixel((10, 10)), images.MARKER, 4)


def test_a_profile_that_cannot_be_read_or_does_not_match_is_dropped() -> None:
    for data in (
        images.encode(Image.new("RGB", (20, 20), (1, 2, 3)), "PNG", icc_profile=b"not a profile"),
        images.encode(Image.new("L", (20, 20), 100), "PNG", icc_profile=images.display_p3()),  # RGB on grey
    ):
        result = fit(data, "image/png", DEFAULT)
        assert result.steps == ("metadata", "reencoded")
        has_no_metadata(result.data)
        with opened(result.data) as im, opened(data) as before:
            assert im.convert(before.mode).getpixel((3, 3)) == before.getpixel((3, 3))  # not converted


def test_a_grey_image_is_converted_through_its_grey_profile() -> None:
    data = images.encode(Image.new("L", (64, 64), 128), "PNG", icc_profile=images.linear_grey())
    result = fit(data, "image/png", DEFAULT)
    assert result.steps == ("colour", "metadata", "reencoded")
    with opened(result.data) as im:
        assert im.mode == "L"
        assert abs(im.getpixel((5, 5)) - 188) <= 1  # type: ignore[operator]  # linear 0.5 is sRGB's 188


def test_a_cmyk_jpeg_comes_out_rgb_with_the_right_colours() -> None:
    im = Image.new("CMYK", (64, 32), (0, 0, 0, 0))  # white, then red on the right
    im.paste((0, 255, 255, 0), (32, 0, 64, 32))
    result = fit(images.encode(im, "JPEG", quality=95), "image/jpeg", DEFAULT)
    with opened(result.data) as out:
        assert out.mode in ("RGB", "P")
        rgb = out.convert("RGB")
        assert close(rgb.getpixel((8, 16)), (255, 255, 255), 6)
        assert close(rgb.getpixel((56, 16)), (255, 0, 0), 6)


def test_a_16_bit_greyscale_png_is_scaled_not_clipped() -> None:
    im = Image.new("I;16", (8, 8), 257 * 200)
    result = fit(images.encode(im, "PNG"), "image/png", DEFAULT)
    with opened(result.data) as out:
        assert out.convert("L").getpixel((3, 3)) == 200


def test_a_screenshot_with_alpha_stays_transparent() -> None:
    data = images.encode(images.screenshot(2400, 1600), "PNG")
    result = fit(data, "image/png", DEFAULT)
    assert result.media_type == "image/png"
    assert (result.width, result.height) == (2000, 1333)
    assert passes_gate(result, DEFAULT)
    with opened(result.data) as im:
        rgba = im.convert("RGBA")
        assert rgba.getpixel((1990, 10))[3] == 0  # type: ignore[index]  # the background
        assert rgba.getpixel((10, 10))[3] == 255  # type: ignore[index]  # the first panel


def test_few_colours_become_an_exact_palette_png() -> None:
    for alpha in (False, True):
        im = images.screenshot(400, 300, alpha=alpha)
        result = fit(images.encode(im, "PNG"), "image/png", DEFAULT)
        assert result.media_type == "image/png"
        with opened(result.data) as out:
            assert out.mode == "P"
            # Exact where it shows: premultiplied, a clear pixel's colour does not count.
            assert (
                out.convert("RGBA").convert("RGBa").tobytes() == im.convert("RGBA").convert("RGBa").tobytes()
            )


def test_a_noisy_photo_climbs_down_the_quality_ladder() -> None:
    data = images.jpeg(400, 300, quality=95)
    source = images.noise(400, 300)
    best, worst = (len(images.encode(source, "JPEG", quality=q)) for q in (90, 50))
    max_bytes = (best + worst) // 2  # under quality 90, over quality 50
    target = Target(2000, 4_000_000, max_bytes)
    result = fit(data, "image/jpeg", target)
    assert result.media_type == "image/jpeg"
    assert (result.width, result.height) == (400, 300)  # a lower quality was enough: no shrinking
    assert result.steps == ("reencoded",)
    assert within(target, result)
    assert passes_gate(result, target)


def test_dimensions_shrink_when_the_lowest_quality_is_too_large() -> None:
    data = images.jpeg(400, 300, quality=95)
    target = Target(2000, 4_000_000, len(images.encode(images.noise(400, 300), "JPEG", quality=50)) // 3)
    result = fit(data, "image/jpeg", target)
    assert within(target, result)
    assert result.width < 400
    assert abs(result.width - result.height * 4 / 3) <= 1
    assert result.steps == ("resized", "reencoded")
    assert passes_gate(result, target)


def test_an_impossible_target_is_unfittable() -> None:
    with pytest.raises(Unfittable) as info:
        fit(images.jpeg(400, 300), "image/jpeg", Target(2000, 4_000_000, 100))
    message = str(info.value)
    assert "100 bytes" in message
    assert "\n" not in message


def test_a_multi_picture_jpeg_is_fitted_from_its_first_picture() -> None:
    data = images.mpo(400, 300, later=(100, 100))
    result = fit(data, "image/jpeg", Target(200, 4_000_000, 10**7))
    assert (result.width, result.height) == (200, 150)
    assert "metadata" in result.steps  # the later pictures and their index are gone


# fit: animations


@pytest.mark.parametrize(
    ("fmt", "media_type"), [("GIF", "image/gif"), ("WEBP", "image/webp"), ("PNG", "image/png")]
)
def test_an_animation_keeps_its_frames_and_timing(fmt: str, media_type: str) -> None:
    timing = (40, 80, 120, 160)
    data = images.animated(fmt, 300, 200, timing, loop=3)
    target = Target(150, 4_000_000, 3_670_016)
    result = fit(data, media_type, target)
    assert result.media_type == media_type
    assert (result.width, result.height) == (150, 100)
    assert result.steps == ("resized", "reencoded")
    assert passes_gate(result, target).frames == 4
    assert durations(result.data) == list(timing)
    with opened(result.data) as im:
        assert im.info["loop"] == 3


def test_an_animation_over_the_byte_limit_shrinks_or_is_unfittable() -> None:
    data = images.gif_animated(120, 80, 3)  # noise: a GIF of it barely compresses
    target = Target(2000, 4_000_000, len(data) // 3)
    result = fit(data, "image/gif", target)
    assert within(target, result)
    assert result.width < 120
    assert passes_gate(result, target).frames == 3
    with pytest.raises(Unfittable, match="animation"):
        fit(data, "image/gif", Target(2000, 4_000_000, 200))


# fit: the same bytes every time


def fingerprints() -> list[str]:
    """The media type and sha256 of fit's output for a JPEG photo, a WebP photo with alpha, a screenshot
    reduced to a palette and an animated GIF: each encoder must give the same bytes every time, in any
    process."""
    screenshot = images.encode(with_gradient(images.ui_screenshot(720, 450)), "PNG")
    cases = [
        (images.photo_with_exif(800, 600, orientation=6, icc=images.display_p3()), "image/jpeg", 500, 10**7),
        (images.encode(photo_with_alpha(300, 200), "WEBP", quality=90), "image/webp", 200, 10**7),
        (screenshot, "image/png", 500, len(full_colour_png(screenshot, (500, 312))) - 1),
        (images.animated("GIF", 200, 100, (40, 80)), "image/gif", 100, 10**7),
    ]
    out = []
    for data, media_type, side, size in cases:
        result = fit(data, media_type, Target(side, 4_000_000, size))
        out.append(f"{result.media_type} {' '.join(result.steps)} {hashlib.sha256(result.data).hexdigest()}")
    return out


def test_fit_is_deterministic_even_in_another_process() -> None:
    first = fingerprints()
    assert [line.split()[0] for line in first] == ["image/jpeg", "image/webp", "image/png", "image/gif"]
    assert "palette" in first[2].split()
    assert fingerprints() == first
    code = "from tests.gate.test_normalize import fingerprints; print('\\n'.join(fingerprints()))"
    root = Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert child.stdout.splitlines() == first


# fit: the character of the image decides its encoding


def with_gradient(im: Image.Image) -> Image.Image:
    """`im` with a title bar shaded left to right, as some themes draw it: hundreds of colours, most
    neighbours still equal."""
    bar = Image.linear_gradient("L").rotate(90).resize((im.width, 40)).convert("RGB")
    out = im.copy()
    out.paste(bar, (0, 0))
    return out


def photo_with_alpha(width: int, height: int) -> Image.Image:
    im = images.photo(width, height).convert("RGBA")
    im.putalpha(Image.linear_gradient("L").resize((width, height)))
    return im


def full_colour_png(data: bytes, size: tuple[int, int]) -> bytes:
    with opened(data) as im:
        return images.encode(im.resize(size, Image.Resampling.LANCZOS), "PNG", compress_level=6)


def test_a_retina_screenshot_stays_a_png_whose_text_is_the_reference_downscale() -> None:
    source = images.ui_screenshot(2880, 1800)
    result = fit(images.encode(source, "PNG"), "image/png", DEFAULT)
    assert result.media_type == "image/png"
    assert (result.width, result.height) == (2000, 1250)
    assert result.steps == ("resized", "reencoded")  # lossless: no "palette"
    assert passes_gate(result, DEFAULT)
    reference = source.resize((2000, 1250), Image.Resampling.LANCZOS)
    with opened(result.data) as im:
        stored = im.convert("RGB")
    # Tolerance: 0 levels, in every pixel. The text is exactly what the filter makes of it, which a JPEG
    # is not: its ringing moves the glyphs' pixels by tens of levels.
    assert ImageChops.difference(stored, reference).getbbox() is None
    jpeg = Image.open(BytesIO(images.encode(reference, "JPEG", quality=90))).convert("RGB")
    assert max(hi for _, hi in ImageChops.difference(jpeg, reference).getextrema()) > 40
    # And the text keeps its contrast: a line of 11-pixel glyphs, 7.6 pixels high now, still reaches black.
    line = stored.crop((380, 70, 1400, 82)).convert("L")
    assert line.getextrema()[0] <= 40


def test_a_screenshot_with_alpha_stays_a_png_with_its_alpha() -> None:
    source = images.ui_screenshot(1440, 900, alpha=True)
    result = fit(images.encode(source, "PNG"), "image/png", SMALL)
    assert result.media_type == "image/png"
    reference = source.resize((1000, 625), Image.Resampling.LANCZOS)
    with opened(result.data) as im:
        stored = im.convert("RGBA")
    assert stored.getchannel("A").tobytes() == reference.getchannel("A").tobytes()
    assert stored.getpixel((0, 0))[3] == 0  # type: ignore[index]  # the clear corner
    assert stored.convert("RGBa").tobytes() == reference.convert("RGBa").tobytes()


def test_a_photo_becomes_a_jpeg() -> None:
    result = fit(images.encode(images.photo(1200, 800), "PNG"), "image/png", SMALL)
    assert result.media_type == "image/jpeg"
    assert (result.width, result.height) == (1000, 667)
    assert result.steps == ("resized", "reencoded")
    assert passes_gate(result, SMALL)


def test_a_webp_photo_stays_a_webp_and_keeps_its_alpha() -> None:
    result = fit(images.encode(photo_with_alpha(1200, 800), "WEBP", quality=90), "image/webp", SMALL)
    assert result.media_type == "image/webp"
    with opened(result.data) as im:
        assert im.convert("RGBA").getchannel("A").getextrema()[0] < 10  # the gradient's clear end


def test_a_png_screenshot_over_the_byte_limit_is_reduced_to_a_palette_not_made_a_jpeg() -> None:
    data = images.encode(with_gradient(images.ui_screenshot(1440, 900)), "PNG")
    full = full_colour_png(data, (1000, 625))
    target = Target(1000, 4_000_000, len(full) - 1)
    result = fit(data, "image/png", target)
    assert result.media_type == "image/png"
    assert result.steps == ("resized", "palette", "reencoded")
    assert (result.width, result.height) == (1000, 625)  # the palette was enough: no shrinking
    assert within(target, result)
    with opened(result.data) as im:
        assert im.mode == "P"
    # Where the full-colour PNG fits, no palette: the step is taken only when needed.
    assert fit(data, "image/png", Target(1000, 4_000_000, len(full))).steps == ("resized", "reencoded")


def test_a_lossless_png_wins_over_a_jpeg_that_is_larger() -> None:
    # Three grey levels at random: photo-like by its pixels (a third of the neighbours equal), yet a PNG
    # of it (1.6 bits a pixel) is far smaller than any JPEG of it.
    rng = random.Random(7)
    im = Image.frombytes("L", (800, 600), bytes(rng.choice((0, 128, 255)) for _ in range(800 * 600)))
    assert not screenshot_like(im)
    result = fit(images.encode(im, "PNG"), "image/png", DEFAULT)
    assert result.media_type == "image/png"
    assert len(result.data) <= len(images.encode(im, "JPEG", quality=90, optimize=True))


@pytest.mark.parametrize("quality", [50, 75, 95])
def test_the_character_survives_a_jpeg_round_trip(quality: int) -> None:
    screenshot = Image.open(BytesIO(images.encode(images.ui_screenshot(1440, 900), "JPEG", quality=quality)))
    assert screenshot_like(screenshot.convert("RGB"))
    photo = Image.open(BytesIO(images.encode(images.photo(1440, 900), "JPEG", quality=quality)))
    assert not screenshot_like(photo.convert("RGB"))


def test_the_character_of_degenerate_images() -> None:
    assert character(Image.new("RGB", (1, 50))) == Character(1.0, 0.0)  # one pixel wide: nothing to compare
    assert character(Image.new("CMYK", (10, 10), (1, 2, 3, 4))).flat == 1.0
    assert character(images.noise(64, 64, "LA")).flat < 0.05
    smooth_blobs = Image.open(BytesIO(images.photo_with_exif(800, 600))).convert("RGB")
    found = character(smooth_blobs)  # noiseless: over half its neighbours equal, but most of the rest close
    assert found.flat >= 0.5
    assert not found.screenshot_like
