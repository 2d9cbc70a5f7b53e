from __future__ import annotations

import base64
import contextlib
import itertools
import random
import re
import re._parser
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image, ImageFile

from attachstore.config import Limits
from attachstore.errors import InvalidRequest, Rejected
from attachstore.gate import (
    ATTACH_AGAIN,
    READ_AGAIN,
    base64_decoded_size,
    canonical_type,
    check_batch,
    checks,
    containers,
    precheck,
)
from attachstore.gate.base64text import decode_base64
from attachstore.gate.checks import Inspection, inspect
from attachstore.gate.probe import probe_header, sniff
from tests.support import images

DEFAULTS = Limits()
ROOMY = Limits(max_image_bytes=16 * 2**20)  # for noisy 1600x1200 PNGs, larger than the default allows
NAMES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}


def rejected(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Rejected:
    """The Rejected that `call(*args, **kwargs)` raises; every rejection says what happened in one line."""
    with pytest.raises(Rejected) as info:
        call(*args, **kwargs)
    error = info.value
    assert error.message
    assert "\n" not in error.message
    assert error.hint is None or (error.hint and "\n" not in error.hint)
    return error


def code(data: bytes, declared: str | None = None, limits: Limits = DEFAULTS) -> str:
    return rejected(inspect, data, declared, limits).code


# Base64


@pytest.mark.parametrize("length", range(0, 12))
def test_base64_canonical_round_trip(length: int) -> None:
    data = random.Random(length).randbytes(length)
    text = base64.b64encode(data).decode()
    assert base64_decoded_size(text) == length
    assert decode_base64(text) == data  # the empty text too: it is an empty image, refused by the gate


def _bump_last_data_char(text: str) -> str:
    """Canonical base64 with nonzero bits left over before the padding."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    i = len(text.rstrip("=")) - 1
    return text[:i] + alphabet[alphabet.index(text[i]) + 1] + text[i + 1 :]


@pytest.mark.parametrize(
    ("text", "says", "hint"),
    [
        ("aGk", "not a multiple of 4", None),
        ("aGk==", "not a multiple of 4", None),
        ("aG=k", "padding before its end", None),
        ("=aGk", "padding before its end", None),
        ("aGk= ", "whitespace at offset 4", "line breaks"),
        (" aGk=", "whitespace at offset 0", "line breaks"),
        ("aGk=\n", "whitespace", "line breaks"),
        ("QUJD" * 19 + "\r\n" + "QUJD", "whitespace at offset 76", "line breaks"),
        ("a-k_", "URL-safe", "standard alphabet"),
        ("_-8=", "URL-safe", "standard alphabet"),
        ("aGk*", "not base64", None),
        ("aGké", "not base64", None),
        ("data:image/png;base64,aGk=", "data: URL", "after the comma"),
        ("DATA:image/png;base64,aGk=", "data: URL", "after the comma"),
        (_bump_last_data_char("aGk="), "not canonical", None),  # one '=' of padding
        (_bump_last_data_char("aA=="), "not canonical", None),  # two
    ],
)
def test_base64_rejections(text: str, says: str, hint: str | None) -> None:
    error = rejected(decode_base64, text)
    assert error.code == "INVALID_IMAGE_BASE64"
    assert error.status == 400
    assert says in error.message
    if hint:
        assert error.hint is not None
        assert hint in error.hint


def test_base64_of_an_image() -> None:
    data = images.png(16, 12)
    assert decode_base64(base64.b64encode(data).decode()) == data


def test_base64_decoded_size_never_negative_or_decodes() -> None:
    for text in ("", "=", "==", "a", "ab=", "a" * 10**6 + "=="):
        assert base64_decoded_size(text) >= 0
    assert base64_decoded_size("a" * 4 * 10**6) == 3 * 10**6


# Batch


def test_empty_batch_is_a_bad_request() -> None:
    with pytest.raises(InvalidRequest, match="at least one image"):
        check_batch([], DEFAULTS)


def test_batch_count() -> None:
    limits = Limits(max_batch_images=3)
    check_batch([1, 1, 1], limits)
    error = rejected(check_batch, [1, 1, 1, 1], limits)
    assert error.code == "TOO_MANY_IMAGES"
    assert "4 images" in error.message
    assert "3" in error.message


def test_batch_bytes() -> None:
    limits = Limits(max_batch_bytes=1000)
    check_batch([500, 500], limits)
    error = rejected(check_batch, [500, 501], limits)
    assert error.code == "IMAGES_TOO_LARGE"
    assert "1,001" in error.message
    assert "1,000" in error.message


def test_batch_count_comes_before_bytes() -> None:
    assert rejected(check_batch, [600] * 4, Limits(max_batch_images=3, max_batch_bytes=1000)).code == (
        "TOO_MANY_IMAGES"
    )


# Per-image prechecks


def test_image_bytes_boundary() -> None:
    data = images.png(16, 12)
    assert inspect(data, None, Limits(max_image_bytes=len(data))).width == 16
    error = rejected(inspect, data, None, Limits(max_image_bytes=len(data) - 1))
    assert error.code == "IMAGE_TOO_LARGE"
    assert error.hint is not None
    assert f"{len(data) - 1:,}" in error.hint
    assert f"{len(data):,}" in error.hint
    assert "shrink it to at most" in error.hint
    assert "read it again" in error.hint


def test_a_noisy_photo_sized_png_is_too_large_by_default() -> None:
    assert code(images.png(1600, 1200)) == "IMAGE_TOO_LARGE"


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (images.SVG, "the bytes are text markup (SVG, XML or HTML), not a raster image a model can take"),
        (images.PDF, "the bytes are PDF, a document, not a raster image a model can take"),
        (b"8BPS" + bytes(60), "a Photoshop document (PSD)"),
        (b"\x00\x00\x00\x18ftypmp42" + bytes(52), "an ISO media file of no image brand"),
        (b"\x00" * 64, "the bytes are not a recognised image format"),
        (b"", "the image is empty (0 bytes)"),
    ],
)
def test_unsupported_bytes(data: bytes, named: str) -> None:
    for convert in (False, True):
        error = rejected(inspect, data, None, DEFAULTS, convert=convert)
        assert error.code == "UNSUPPORTED_IMAGE_TYPE"
        assert named in error.message


@pytest.mark.parametrize(
    ("data", "named"), [(images.bmp(), "BMP"), (images.tiff(), "TIFF"), (images.HEIC, "HEIC")]
)
def test_sources_are_refused_where_the_image_must_be_stored_as_it_came(data: bytes, named: str) -> None:
    """An exact admission (transcript strip) or a re-index stores the bytes it is given, or nothing."""
    error = rejected(inspect, data, None, DEFAULTS)
    assert error.code == "UNSUPPORTED_IMAGE_TYPE"
    assert error.message == (
        f"the image is {named}, which can be stored only converted to PNG or JPEG, and this admission "
        "stores every image exactly as it came"
    )
    assert error.hint == "convert it to PNG, JPEG, GIF or WebP and read it again"


@pytest.mark.parametrize(
    "declared", ["image/x-icon", "image/svg+xml", "image/jxl", "application/pdf", "", "png"]
)
def test_unsupported_declared_type(declared: str) -> None:
    assert code(images.png(4, 4), declared) == "UNSUPPORTED_IMAGE_TYPE"


@pytest.mark.parametrize(
    ("alias", "data", "right"),
    [
        ("image/jpg", images.jpeg(4, 4), "image/jpeg"),
        ("image/pjpeg", images.jpeg(4, 4), "image/jpeg"),
        ("image/x-citrix-jpeg", images.jpeg(4, 4), "image/jpeg"),
        ("IMAGE/JPG; q=1", images.jpeg(4, 4), "image/jpeg"),
        ("image/mpo", images.mpo(4, 4), "image/jpeg"),
        ("image/x-png", images.png(4, 4), "image/png"),
        ("image/x-citrix-png", images.png(4, 4), "image/png"),
        ("image/apng", images.apng(4, 4, 2), "image/png"),
        ("image/apng", images.png(4, 4), "image/png"),  # a still PNG declared as APNG is still a PNG
        ("image/vnd.mozilla.apng", images.apng(4, 4, 2), "image/png"),
    ],
)
def test_aliases_are_accepted_as_what_they_name(alias: str, data: bytes, right: str) -> None:
    assert canonical_type(alias) == right
    assert inspect(data, alias, DEFAULTS).media_type == right


def test_an_alias_of_another_type_names_the_type_of_the_bytes_in_one_step() -> None:
    """The issue's loop: image/jpg on a PNG once led to "declare it as image/jpeg", then to a mismatch."""
    error = rejected(inspect, images.png(4, 4), "image/jpg", DEFAULTS)
    assert error.code == "IMAGE_TYPE_MISMATCH"
    assert error.message == "the image is declared as image/jpg but its bytes are PNG (image/png)"
    assert error.hint == "declare it as image/png, or leave the media type out"
    assert inspect(images.png(4, 4), "image/png", DEFAULTS).media_type == "image/png"  # and it holds


def test_an_unsupported_declared_type_on_known_bytes_names_them() -> None:
    error = rejected(inspect, images.png(4, 4), "image/x-icon", DEFAULTS)
    assert error.code == "UNSUPPORTED_IMAGE_TYPE"
    assert error.message.endswith("; the bytes are PNG")
    assert error.hint == "declare it as image/png, or leave the media type out"
    unknown = rejected(inspect, images.bmp(), "image/bmp", DEFAULTS)
    assert unknown.hint == "convert it to PNG, JPEG, GIF or WebP and read it again"


@pytest.mark.parametrize(
    ("again", "said"), [(READ_AGAIN, "read it again"), (ATTACH_AGAIN, "attach it again")]
)
def test_hints_that_ask_for_the_image_again_say_how_the_caller_gives_it(again: str, said: str) -> None:
    for data, limits in (
        (images.png(40, 30), Limits(max_image_bytes=100)),  # IMAGE_TOO_LARGE
        (images.png(40, 30), Limits(max_side=20)),  # IMAGE_DIMENSION_TOO_LARGE
        (images.png(40, 30), Limits(max_pixels=100)),  # IMAGE_TOO_MANY_PIXELS
        (images.bmp(), DEFAULTS),  # UNSUPPORTED_IMAGE_TYPE
        (b"", DEFAULTS),  # empty
        (images.png(4, 4) + b"tail", DEFAULTS),  # trailing data, refused below
    ):
        trailing = "reject" if data.endswith(b"tail") else "allow"
        error = rejected(inspect, data, None, limits, trailing_data=trailing, again=again)
        assert error.hint is not None
        assert error.hint.endswith(said), error.hint
        other = ATTACH_AGAIN if again == READ_AGAIN else READ_AGAIN
        assert other not in error.hint


@pytest.mark.parametrize("declared", ["image/png", "IMAGE/PNG", " image/png ", "image/png; charset=binary"])
def test_declared_type_is_normalised(declared: str) -> None:
    assert inspect(images.png(4, 4), declared, DEFAULTS).media_type == "image/png"


@pytest.mark.parametrize(
    ("data", "declared"),
    [
        (images.png(4, 4), "image/jpeg"),
        (images.jpeg(4, 4), "image/png"),
        (images.gif(4, 4), "image/webp"),
        (images.webp(4, 4), "image/gif"),
        (images.mpo(4, 4), "image/png"),
        (images.apng(4, 4, 2), "image/gif"),
    ],
)
def test_declared_type_mismatch(data: bytes, declared: str) -> None:
    error = rejected(inspect, data, declared, DEFAULTS)
    assert error.code == "IMAGE_TYPE_MISMATCH"
    assert declared in error.message


def test_precheck_returns_the_sniffed_type_from_the_head_alone() -> None:
    data = images.webp(4, 4)
    assert precheck(10**9, data[:64], "image/webp", Limits(max_image_bytes=10**9)) == "image/webp"


# Header checks


def test_side_boundary() -> None:
    data = images.png(40, 30)
    assert inspect(data, None, Limits(max_side=40)).width == 40
    error = rejected(inspect, data, None, Limits(max_side=39))
    assert error.code == "IMAGE_DIMENSION_TOO_LARGE"
    assert "40x30" in error.message
    assert error.hint is not None
    assert "39" in error.hint
    assert "40x30" in error.hint
    assert "shrink it to at most 39x29 and read it again" in error.hint


@pytest.mark.parametrize(
    "data",
    [
        images.png_claiming(100_000, 10),
        images.jpeg_claiming(2001, 1),
        images.gif_screen(images.gif(4, 4), 1, 2001),
    ],
)
def test_side_from_a_lying_header_is_refused_without_decoding(data: bytes) -> None:
    assert code(data) == "IMAGE_DIMENSION_TOO_LARGE"


def test_pixels_boundary() -> None:
    data = images.jpeg(40, 30)
    assert inspect(data, None, Limits(max_pixels=1200)).height == 30
    error = rejected(inspect, data, None, Limits(max_pixels=1199))
    assert error.code == "IMAGE_TOO_MANY_PIXELS"
    assert "1,200" in error.message
    assert "1,199" in error.message
    assert error.hint is not None
    assert "shrink it to at most" in error.hint


@pytest.mark.parametrize(
    ("width", "height", "limits", "expected", "fit"),
    [
        (2000, 1500, Limits(max_pixels=1_000_000), "IMAGE_TOO_MANY_PIXELS", "1154x866"),
        (2000, 1000, Limits(max_side=1000, max_pixels=400_000), "IMAGE_DIMENSION_TOO_LARGE", "894x447"),
        (1, 5000, DEFAULTS, "IMAGE_DIMENSION_TOO_LARGE", "1x2000"),
    ],
)
def test_shrink_hint_fits_both_limits(
    width: int, height: int, limits: Limits, expected: str, fit: str
) -> None:
    error = rejected(inspect, images.png_claiming(width, height), None, limits)
    assert error.code == expected
    assert error.hint is not None
    assert f"shrink it to at most {fit} and read it again" in error.hint
    w, h = map(int, fit.split("x"))
    assert max(w, h) <= limits.max_side
    assert w * h <= limits.max_pixels


def test_header_limits_are_inclusive_by_default() -> None:
    # 2000x2000 is exactly both default limits, so the header passes and the (4x4) pixel data fails.
    assert code(images.png_claiming(2000, 2000)) == "INVALID_IMAGE"
    assert code(images.png_claiming(2000, 2001)) == "IMAGE_DIMENSION_TOO_LARGE"


def test_unreadable_header_is_invalid() -> None:
    data = images.png_insert(images.png(4, 4), b"IHDR", images.png_chunk(b"tEXt", b"k\x00v"))
    error = rejected(inspect, data, None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "header" in error.message


# Frames


def test_frame_count_boundary() -> None:
    data = images.gif_animated(8, 6, 3)
    assert inspect(data, None, Limits(max_frames=3)).frames == 3
    error = rejected(inspect, data, None, Limits(max_frames=2))
    assert error.code == "TOO_MANY_FRAMES"
    assert "3 frames" in error.message


def test_animation_pixels_boundary() -> None:
    data = images.webp_animated(8, 6, 3)
    assert inspect(data, None, Limits(max_animation_pixels=144)).frames == 3
    error = rejected(inspect, data, None, Limits(max_animation_pixels=143))
    assert error.code == "TOO_MANY_FRAMES"
    assert "144" in error.message


def test_apng_declaring_two_billion_frames_is_refused_before_decoding() -> None:
    assert code(images.apng_declaring(images.apng(8, 6, 2), 2**31)) == "TOO_MANY_FRAMES"


# Decoding: what gets in


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: images.png(1, 1), ("image/png", 1, 1, 1)),
        (lambda: images.png(1600, 1200), ("image/png", 1600, 1200, 1)),
        (lambda: images.png(7, 5, "RGBA"), ("image/png", 7, 5, 1)),
        (lambda: images.png(7, 5, "P"), ("image/png", 7, 5, 1)),
        (lambda: images.png(7, 5, "L", interlace=1), ("image/png", 7, 5, 1)),
        (lambda: images.jpeg(1, 1), ("image/jpeg", 1, 1, 1)),
        (lambda: images.jpeg(1600, 1200), ("image/jpeg", 1600, 1200, 1)),
        (lambda: images.jpeg(7, 5, "L"), ("image/jpeg", 7, 5, 1)),
        (lambda: images.jpeg(7, 5, "CMYK"), ("image/jpeg", 7, 5, 1)),
        (lambda: images.jpeg(7, 5, progressive=True), ("image/jpeg", 7, 5, 1)),
        (lambda: images.gif(1, 1), ("image/gif", 1, 1, 1)),
        (lambda: images.gif(1600, 1200), ("image/gif", 1600, 1200, 1)),
        (lambda: images.webp(1, 1), ("image/webp", 1, 1, 1)),
        (lambda: images.webp(1600, 1200), ("image/webp", 1600, 1200, 1)),
        (lambda: images.webp(7, 5, lossless=True), ("image/webp", 7, 5, 1)),
        (lambda: images.webp(7, 5, "RGBA"), ("image/webp", 7, 5, 1)),
        (lambda: images.gif_animated(32, 24, 5), ("image/gif", 32, 24, 5)),
        (lambda: images.webp_animated(32, 24, 4), ("image/webp", 32, 24, 4)),
        (lambda: images.apng(32, 24, 3), ("image/png", 32, 24, 3)),
        (lambda: images.apng(32, 24, 2, default_image=True), ("image/png", 32, 24, 3)),
        (lambda: images.mpo(32, 24, 3), ("image/jpeg", 32, 24, 3)),
        (lambda: images.mpo(32, 24, 2, later=(16, 12)), ("image/jpeg", 32, 24, 2)),
        (lambda: images.jpeg(64, 48, restart_marker_blocks=1), ("image/jpeg", 64, 48, 1)),
        (lambda: images.jpeg(64, 48, progressive=True, restart_marker_rows=1), ("image/jpeg", 64, 48, 1)),
        (lambda: images.jpeg(7, 5)[:-2] + b"\xff\xff\xff\xd9", ("image/jpeg", 7, 5, 1)),  # fill bytes
        (  # a whole JPEG (an EXIF thumbnail, say) inside an APP1 segment
            lambda: images.jpeg_insert(images.jpeg(7, 5), 2, images.jpeg_segment(0xE1, images.jpeg(4, 4))),
            ("image/jpeg", 7, 5, 1),
        ),
    ],
)
def test_inspect_accepts(make: Callable[[], bytes], expected: tuple[str, int, int, int]) -> None:
    assert inspect(make(), None, ROOMY) == Inspection(*expected)
    assert inspect(make(), expected[0], ROOMY) == Inspection(*expected)
    # The container walks find each one's end exactly where its bytes end.
    assert inspect(make(), None, ROOMY, trailing_data="reject") == Inspection(*expected)
    error = rejected(inspect, make() + b"\x00", None, ROOMY, trailing_data="reject")
    assert (error.code, error.hint) == (
        "INVALID_IMAGE",
        "re-encode the image, or cut it at its end, and read it again",
    )
    assert error.message.startswith(f"1 byte follows the end of the image (the {NAMES[expected[0]]} image")


@pytest.mark.parametrize("mode", ["allow", "reject"])
def test_trailing_bytes_after_the_image(mode: str) -> None:
    for data in (images.png(4, 4), images.jpeg(4, 4), images.gif(4, 4), images.webp(4, 4)):
        assert inspect(data, None, DEFAULTS, trailing_data=mode).width == 4
        if mode == "allow":  # kept and ignored, as the decoders ignore them
            assert inspect(data + b"trailing", None, DEFAULTS, trailing_data=mode).width == 4
        else:
            error = rejected(inspect, data + b"trailing", None, DEFAULTS, trailing_data="reject")
            assert error.code == "INVALID_IMAGE"
            assert "8 bytes follow the end of the image" in error.message
            assert f"ends at offset {len(data):,}" in error.message


def test_trailing_data_is_checked_after_the_frame_count() -> None:
    # The SPEC's order: TOO_MANY_FRAMES comes before any INVALID_IMAGE, bytes after the end included.
    data = images.apng_declaring(images.apng(8, 6, 2), 2**31) + b"trailing"
    assert rejected(inspect, data, None, DEFAULTS, trailing_data="reject").code == "TOO_MANY_FRAMES"


def test_jpeg_without_an_end_is_invalid_when_trailing_data_is_refused() -> None:
    # Where the walk cannot find the end of a JPEG, bytes after it cannot be told apart: refused.
    data = images.jpeg(16, 12)
    broken = data[:-2] + b"\xff\x00"  # the EOI turned into stuffed scan data
    error = rejected(inspect, broken, None, DEFAULTS, trailing_data="reject")
    assert error.code == "INVALID_IMAGE"
    assert "the picture at offset 0 has no EOI marker" in error.message


def test_jpeg_walk_is_linear_in_runs_of_0xff(monkeypatch: pytest.MonkeyPatch) -> None:
    # A marker search written as "0xFF+ then a code" backtracks over a run once for every byte of it: a 1 MB
    # run took hours. Counted, not timed: the search has a fixed width, so each place it tries costs the
    # regex engine a fixed number of steps; and fill bytes, stuffing and restart markers by the megabyte add
    # no search to the walk, whose searches never pass over a byte twice.
    marker = containers.MARKER
    assert re._parser.parse(marker.pattern).getwidth() == (2, 2)  # no repetition: nothing to backtrack over
    searched: list[tuple[int, int]] = []  # (from, to) of each search of the walk

    class Counted:
        def search(self, data: bytes, pos: int) -> re.Match[bytes] | None:
            found = marker.search(data, pos)
            searched.append((pos, len(data) if found is None else found.end()))
            return found

    monkeypatch.setattr(containers, "MARKER", Counted())
    data = images.jpeg(16, 12)
    inspect(data, None, DEFAULTS, trailing_data="reject")
    undamaged = len(searched)
    assert undamaged > 0  # the walk is the one under test
    scan_end = images.jpeg_scans(data)[0][1]
    for filler in (
        b"\xff" * 2**20 + b"\x00",
        b"\xff\x00" * 2**19,
        b"\xff\xd0" * 2**19,
        b"\xff\xff\x00" * 2**18,
    ):
        damaged = data[:scan_end] + filler + data[scan_end:]
        searched.clear()
        with contextlib.suppress(Rejected):
            inspect(damaged, None, DEFAULTS, trailing_data="reject")
        assert len(searched) == undamaged
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(searched))
        assert searched[-1][1] == len(damaged)  # through the filler to the EOI


@pytest.mark.parametrize("padding", [{"segments": 2_000}, {"fill": 2_000}, {"segments": 917_000}])
def test_a_jpeg_frame_header_past_what_encoders_write_is_invalid(padding: dict[str, int]) -> None:
    """Every read of an admitted image probes its header on the event loop; the gate refuses a JPEG whose
    frame header only a long walk reaches (empty segments or fill bytes by the thousand), so that no
    admitted image costs more than a fixed number of steps there."""
    with pytest.raises(Rejected) as info:
        inspect(images.jpeg_padded(images.jpeg(16, 16), **padding), None, DEFAULTS)
    assert info.value.code == "INVALID_IMAGE"
    assert "1,024 markers and fill bytes" in info.value.message
    assert info.value.hint is not None


def test_a_jpeg_with_as_many_segments_as_encoders_write_is_admitted() -> None:
    # An ICC profile split into its most chunks (255 APP2 segments), EXIF, XMP and then some.
    data = images.jpeg_padded(images.jpeg(16, 16), segments=900)
    assert inspect(data, None, DEFAULTS).media_type == "image/jpeg"


def test_mpo_end_is_the_end_of_its_last_picture() -> None:
    data = images.mpo(16, 12, 3)
    assert inspect(data, None, DEFAULTS, trailing_data="reject").frames == 3
    error = rejected(inspect, data + images.jpeg(4, 4), None, DEFAULTS, trailing_data="reject")
    assert f"ends at offset {len(data):,}" in error.message
    # Without a readable MP index (here its TIFF byte order is damaged), the pictures after the first are
    # bytes after the end: Pillow reads such a file as one JPEG as well.
    at = data.index(b"MPF\x00") + 4
    unindexed = data[:at] + b"XX" + data[at + 2 :]
    first_end = images.mpo_pictures(data)[1]
    error = rejected(inspect, unindexed, None, DEFAULTS, trailing_data="reject")
    assert f"ends at offset {first_end:,}" in error.message


# Decoding: what is damaged


@pytest.mark.parametrize(
    "make",
    [
        lambda: images.png(16, 12),
        lambda: images.jpeg(16, 12),
        lambda: images.gif(16, 12),
        lambda: images.webp(16, 12),
        lambda: images.apng(16, 12, 3),
        lambda: images.gif_animated(16, 12, 3),
        lambda: images.webp_animated(16, 12, 3),
        lambda: images.mpo(16, 12, 2),
    ],
)
def test_truncated_anywhere_is_invalid(make: Callable[[], bytes]) -> None:
    data = make()
    inspect(data, None, DEFAULTS)
    for n in range(len(data)):  # including cuts between two frames, which Pillow alone takes for the end
        error = rejected(inspect, data[:n], None, DEFAULTS)
        assert error.code == ("INVALID_IMAGE" if sniff(data[:n]) else "UNSUPPORTED_IMAGE_TYPE"), n


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (images.truncate(images.png(64, 48), -1), "truncated"),
        (images.truncate(images.jpeg(64, 48), -1), "truncated"),
        (images.truncate(images.gif(64, 48), -10), "truncated"),
        (images.truncate(images.gif(64, 48), -1), "ends before the trailer"),
        (images.truncate(images.webp(64, 48), -1), "truncated or malformed"),
    ],
)
def test_truncation_says_so(data: bytes, says: str) -> None:
    error = rejected(inspect, data, None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert says in error.message


def test_flipped_byte_in_png_pixel_data() -> None:
    data = images.png(64, 48)
    idat = images.png_find(data, b"IDAT")
    error = rejected(inspect, images.flip(data, idat.offset + 8 + idat.length // 2), None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "CRC in chunk IDAT" in error.message


def test_damaged_zlib_stream_with_a_good_crc() -> None:
    error = rejected(inspect, images.png_damaged_idat(images.png(64, 48)), None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "broken data stream" in error.message


@pytest.mark.parametrize(
    ("make", "chunk"),
    [
        (lambda: images.png_bad_crc(images.png(8, 8), b"IHDR"), "IHDR"),
        (lambda: images.png_bad_crc(images.png(8, 8), b"IDAT"), "IDAT"),
        (lambda: images.png_bad_crc(images.png(8, 8), b"IEND"), "IEND"),
        (lambda: images.png_bad_crc(images.apng(8, 8, 3), b"fdAT", 1), "fdAT"),
        (lambda: images.png_bad_crc(images.apng(8, 8, 3), b"fcTL", 2), "fcTL"),
        (lambda: images.png_bad_crc(images.png_insert(images.png(8, 8), b"IDAT", _text()), b"tEXt"), "tEXt"),
        (lambda: images.png_bad_crc(images.png_insert(images.png(8, 8), b"IEND", _text()), b"tEXt"), "tEXt"),
    ],
)
def test_every_chunk_crc_is_checked(make: Callable[[], bytes], chunk: str) -> None:
    error = rejected(inspect, make(), None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert f"bad CRC in chunk {chunk}" in error.message


def _text() -> bytes:
    return images.png_chunk(b"tEXt", b"Comment\x00hello")


def test_png_chunk_type_must_be_letters() -> None:
    data = images.png_insert(images.png(8, 8), b"IEND", images.png_chunk(b"t3Xt", b""))
    error = rejected(inspect, data, None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "chunk type" in error.message


@pytest.mark.parametrize(
    "declared",
    [
        5,  # Pillow would run out of frames
        2,  # Pillow would decode two and never look at the third
        0,  # Pillow warns and falls back to the IDAT image alone
        2**31 + 1,  # likewise
    ],
)
def test_apng_frame_count_must_match(declared: int) -> None:
    error = rejected(inspect, images.apng_declaring(images.apng(8, 6, 3), declared), None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert f"declares {declared:,} frames but there are 3 fcTL chunks" in error.message


def test_apng_repeated_or_late_actl() -> None:
    data = images.apng(8, 6, 2)
    actl = data[images.png_find(data, b"acTL").offset : images.png_find(data, b"acTL").end]
    for damaged in (images.png_insert(data, b"IDAT", actl), images.png_insert(data, b"IEND", actl)):
        error = rejected(inspect, damaged, None, DEFAULTS)
        assert error.code == "INVALID_IMAGE"
        assert "acTL" in error.message
    late = images.png_insert(images.png_replace(data, images.png_find(data, b"acTL"), b""), b"IEND", actl)
    error = rejected(inspect, late, None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "misplaced" in error.message


def test_gif_frame_growing_the_canvas_within_limits_is_accepted() -> None:
    data = images.gif_move_frame(images.gif_animated(32, 24, 3), 1, 8, 0)  # frame 2 spans x 8..40
    assert inspect(data, None, DEFAULTS) == Inspection("image/gif", 32, 24, 3)


def test_gif_frame_growing_the_canvas_past_the_side_limit() -> None:
    data = images.gif_move_frame(images.gif_animated(32, 24, 3), 1, 8, 0)
    error = rejected(inspect, data, None, Limits(max_side=39))
    assert error.code == "INVALID_IMAGE"
    assert "frame 2 of 3" in error.message
    assert "40x24" in error.message


def test_gif_frames_growing_past_the_animation_limit() -> None:
    data = images.gif_move_frame(images.gif_animated(32, 24, 3), 1, 8, 0)
    error = rejected(inspect, data, None, Limits(max_animation_pixels=3 * 32 * 24))
    assert error.code == "INVALID_IMAGE"
    assert "frame 3 of 3" in error.message


def test_gif_frame_growing_the_canvas_to_a_bomb() -> None:
    data = images.gif_move_frame(images.gif_animated(32, 24, 3), 2, 65000, 65000)
    error = rejected(inspect, data, None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "frame 3 of 3" in error.message
    assert "decompression bomb" in error.message


def test_gif_first_frame_outside_the_logical_screen() -> None:
    data = images.gif_move_frame(images.gif_animated(32, 24, 2), 0, 4, 4)
    error = rejected(inspect, data, None, DEFAULTS)
    assert error.code == "INVALID_IMAGE"
    assert "header says 32x24 but the decoder sees 36x28" in error.message


def test_mpo_frames_are_held_to_the_limits_each() -> None:
    data = images.mpo(16, 12, 2, later=(64, 8))
    assert inspect(data, None, Limits(max_side=64)).frames == 2
    error = rejected(inspect, data, None, Limits(max_side=63))
    assert error.code == "INVALID_IMAGE"
    assert "frame 2 of 2" in error.message
    assert code(data, None, Limits(max_animation_pixels=16 * 12 + 64 * 8 - 1)) == "INVALID_IMAGE"


def test_jpeg_scan_shorter_than_its_header_is_not_detected() -> None:
    # A known limit, kept visible: libjpeg fills missing rows with grey and only warns, and Pillow does not
    # surface the warning, so a JPEG that reaches its EOI early decodes "successfully" at the header's size.
    data = images.jpeg_claiming(16, 16, images.jpeg(8, 8))
    assert inspect(data, None, DEFAULTS) == Inspection("image/jpeg", 16, 16, 1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: images.png(12, 9),
        lambda: images.jpeg(12, 9),
        lambda: images.gif(12, 9),
        lambda: images.webp(12, 9),
        lambda: images.webp(12, 9, lossless=True),
        lambda: images.apng(12, 9, 2),
        lambda: images.gif_animated(12, 9, 2),
        lambda: images.webp_animated(12, 9, 2),
        lambda: images.mpo(12, 9, 2),
    ],
)
def test_damage_anywhere_raises_only_rejected(make: Callable[[], bytes]) -> None:
    # Formats without checksums (JPEG, GIF, lossy WebP) can decode garbage without noticing; what matters is
    # that nothing but Rejected ever comes out and that an accepted image has the size its header says.
    data = make()
    rng = random.Random(len(data))
    messages = []
    for _ in range(150):
        damaged = images.flip(data, rng.randrange(len(data)), rng.randrange(1, 256))
        try:
            found = inspect(damaged, None, DEFAULTS)
        except Rejected as e:
            messages.append(e.message)
            continue
        header = probe_header(damaged)  # a flipped frame header can change the size, consistently
        assert header is not None
        assert (found.media_type, found.width, found.height) == (
            header.media_type,
            header.width,
            header.height,
        )
    assert messages
    assert not [m for m in messages if "\n" in m]


# Order: where two checks fail, the earlier one in the SPEC's table decides


@pytest.mark.parametrize(
    ("data", "declared", "limits", "expected"),
    [
        (images.bmp(16, 16), None, Limits(max_image_bytes=100), "IMAGE_TOO_LARGE"),
        (images.png(16, 16), "image/bmp", Limits(max_image_bytes=100), "IMAGE_TOO_LARGE"),
        (images.png(16, 16), "image/jpeg", Limits(max_image_bytes=100), "IMAGE_TOO_LARGE"),
        (images.bmp(16, 16), "image/png", DEFAULTS, "UNSUPPORTED_IMAGE_TYPE"),
        (images.png(16, 16), "image/x-icon", DEFAULTS, "UNSUPPORTED_IMAGE_TYPE"),
        (images.png(16, 16), "image/bmp", DEFAULTS, "IMAGE_TYPE_MISMATCH"),
        (images.png_claiming(100_000, 100_000), "image/jpeg", DEFAULTS, "IMAGE_TYPE_MISMATCH"),
        (images.png_claiming(100_000, 100_000), None, DEFAULTS, "IMAGE_DIMENSION_TOO_LARGE"),
        (
            images.apng_declaring(images.apng(40, 30, 2), 2**31),
            None,
            Limits(max_pixels=1000),
            "IMAGE_TOO_MANY_PIXELS",
        ),
        (
            images.png_bad_crc(images.apng_declaring(images.apng(8, 6, 2), 2**31), b"fdAT"),
            None,
            DEFAULTS,
            "TOO_MANY_FRAMES",
        ),
        (
            images.png_bad_crc(images.png(16, 16), b"IDAT"),
            "image/png",
            Limits(max_side=8),
            "IMAGE_DIMENSION_TOO_LARGE",
        ),
    ],
)
def test_first_failing_check_decides(
    data: bytes, declared: str | None, limits: Limits, expected: str
) -> None:
    assert code(data, declared, limits) == expected


def test_decoded_format_must_match_the_sniffed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Unreachable while one Pillow plugin is tried per sniffed type; the backstop still has to work.
    monkeypatch.setitem(checks._DECODED_TYPE, "GIF", "image/png")
    error = rejected(inspect, images.gif(4, 4), None, DEFAULTS)
    assert error.code == "IMAGE_TYPE_MISMATCH"


# Pillow's process-wide settings


def test_pillow_settings_are_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 123)
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    # A lenient global setting must not make the gate lenient.
    assert code(images.truncate(images.jpeg(64, 48), -1)) == "INVALID_IMAGE"
    inspect(images.png(4, 4), None, DEFAULTS)
    assert Image.MAX_IMAGE_PIXELS == 123
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True


def test_pillow_warnings_do_not_escape() -> None:
    # Pillow warns while opening this one; under `-W error` a leaked warning would fail the test.
    assert code(images.apng_declaring(images.apng(8, 6, 3), 0)) == "INVALID_IMAGE"
