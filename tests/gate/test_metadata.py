"""Lossless removal of metadata (attachstore/gate/metadata.py): the same pixels, frame by frame, and the gate
takes the result."""

from __future__ import annotations

import pytest
from PIL import Image, PngImagePlugin

from attachstore.config import Limits
from attachstore.gate.checks import inspect
from attachstore.gate.metadata import has_metadata, strip_metadata
from attachstore.gate.normalize import Target, fit
from tests.support import images
from tests.support.images import has_no_metadata, opened

ROOMY = Limits(max_image_bytes=16 * 2**20)

DEFAULT = Target(2000, 4_000_000, 3_670_016)  # the admission defaults (config.Limits)


def frames(data: bytes) -> list[bytes]:
    """The decoded pixels of every frame."""
    with opened(data) as im:
        out = []
        for index in range(getattr(im, "n_frames", 1)):
            im.seek(index)
            out.append(im.tobytes())
        return out


def stripped(data: bytes, media_type: str) -> bytes:
    """strip_metadata's result, checked: same pixels in every frame, and the gate takes it."""
    result = strip_metadata(data, media_type)
    before = frames(data)
    if media_type == "image/jpeg":
        before = before[:1]  # a multi-picture JPEG keeps its first picture
    assert frames(result) == before
    inspect(result, media_type, ROOMY, trailing_data="reject")
    return result


def test_strip_jpeg_keeps_orientation_and_profile_and_nothing_else() -> None:
    photo = images.photo_with_exif(400, 300, orientation=6, icc=images.display_p3())
    sos = photo.index(b"\xff\xda")
    app13 = images.jpeg_segment(0xED, b"Photoshop 3.0\x008BIM\x04\x04\x00\x00\x00\x00\x00\x00")
    extended = images.jpeg_segment(0xE1, b"http://ns.adobe.com/xmp/extension/\x00" + b"0" * 40)
    data = images.jpeg_insert(photo, sos, app13 + extended + images.jpeg_segment(0xFE, b"second comment"))
    result = stripped(data, "image/jpeg")
    with opened(result) as im, opened(data) as before:
        assert dict(im.getexif()) == {0x0112: 6}  # GPS, the camera model: gone
        assert not im.getexif().get_ifd(0x8825)
        assert im.info["icc_profile"] == before.info["icc_profile"]
        assert {"jfif", "exif", "icc_profile"} <= set(im.info)
        assert not {"xmp", "comment", "photoshop"} & set(im.info)
    for needle in (b"http://ns.adobe.com", b"Photoshop", b"comment", b"Test camera"):
        assert needle not in result


def test_strip_jpeg_with_orientation_1_keeps_no_exif() -> None:
    result = stripped(images.photo_with_exif(64, 48), "image/jpeg")
    assert b"Exif" not in result
    with opened(result) as im:
        assert not im.getexif()


@pytest.mark.parametrize(
    "exif",
    [
        b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x05\x01\x12",  # an IFD cut short
        b"Exif\x00\x00not a TIFF header",
        b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x01\x00"  # one tag: orientation 9, which does not exist
        b"\x12\x01\x03\x00\x01\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00",
    ],
)
def test_a_damaged_exif_block_or_orientation_is_dropped(exif: bytes) -> None:
    # (Pillow warns when it opens these, so the input is not decoded here: the result is compared as bytes.)
    data = images.jpeg_insert(images.jpeg(40, 30), 2, images.jpeg_segment(0xE1, exif))
    assert strip_metadata(data, "image/jpeg") == images.jpeg(40, 30)
    fitted = fit(data, "image/jpeg", DEFAULT)
    assert fitted.steps == ("metadata", "reencoded")
    has_no_metadata(fitted.data)


def test_strip_png_drops_text_time_and_exif_but_keeps_colour_chunks() -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "an editor")
    info.add_text("Comment", "zipped", zip=True)
    info.add_itxt("XML:com.adobe.xmp", "<x:xmpmeta/>")
    exif = Image.Exif()
    exif[0x0112] = 3
    exif.get_ifd(0x8825)[1] = "N"
    data = images.encode(
        images.noise(40, 30), "PNG", pnginfo=info, exif=exif, icc_profile=images.display_p3()
    )
    data = images.png_insert(data, b"IDAT", images.png_chunk(b"tIME", bytes([7, 232, 1, 1, 0, 0, 0])))
    result = stripped(data, "image/png")
    assert [chunk.kind for chunk in images.png_chunks(result)] == [
        b"IHDR",
        b"iCCP",
        b"eXIf",
        b"IDAT",
        b"IEND",
    ]
    with opened(result) as im:
        assert dict(im.getexif()) == {0x0112: 3}
        assert not im.text  # type: ignore[attr-defined]


def test_strip_webp_drops_exif_and_xmp_and_fixes_the_header() -> None:
    for orientation in (1, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        exif[0x0110] = "Test camera"
        options = {"exif": exif, "xmp": b"<x:xmpmeta/>", "icc_profile": images.display_p3()}
        data = images.encode(images.noise(40, 30, "RGBA"), "WEBP", **options)
        assert data[20] & 0x0C == 0x0C  # EXIF and XMP flags
        result = stripped(data, "image/webp")
        assert int.from_bytes(result[4:8], "little") == len(result) - 8
        assert b"XMP " not in result
        assert result[20] & 0x30 == 0x30  # ICC and alpha flags kept
        assert result[20] & 0x04 == 0
        with opened(result) as im:
            assert im.info["icc_profile"] == images.display_p3()
            if orientation == 1:
                assert b"EXIF" not in result
                assert result[20] & 0x08 == 0
            else:
                assert dict(im.getexif()) == {0x0112: 8}
                assert result[20] & 0x08


def test_strip_gif_drops_comments_and_xmp() -> None:
    data = images.gif_xmp(images.gif_comment(images.gif_animated(40, 30, 3), b"a comment"), b"<x:xmpmeta/>")
    result = stripped(data, "image/gif")
    assert result == images.gif_animated(40, 30, 3)


def test_strip_a_multi_picture_jpeg_keeps_the_first_picture() -> None:
    data = images.mpo(64, 48, frames=3)
    result = stripped(data, "image/jpeg")
    assert b"MPF\x00" not in result
    assert len(result) < len(data) // 2
    with opened(result) as im:
        assert im.format == "JPEG"
        assert getattr(im, "n_frames", 1) == 1


def test_strip_cuts_bytes_after_the_end() -> None:
    for data, media_type in ((images.jpeg(16, 16), "image/jpeg"), (images.png(16, 16), "image/png")):
        assert stripped(data + b"payload", media_type) == data


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (images.jpeg(40, 30), "image/jpeg"),
        (images.png(40, 30, "RGBA"), "image/png"),
        (images.apng(40, 30, 3), "image/png"),
        (images.gif_animated(40, 30, 3), "image/gif"),
        (images.webp(40, 30), "image/webp"),
        (images.webp_animated(40, 30, 3), "image/webp"),
        (images.encode(images.noise(40, 30), "WEBP", icc_profile=images.display_p3()), "image/webp"),
    ],
)
def test_strip_returns_a_clean_image_itself(data: bytes, media_type: str) -> None:
    assert strip_metadata(data, media_type) is data


def test_bytes_after_the_end_are_cut_but_are_not_metadata() -> None:
    data = images.png(16, 16) + b"payload"
    assert not has_metadata(data, "image/png")
    assert strip_metadata(data, "image/png") == images.png(16, 16)
    assert has_metadata(images.gif_comment(images.gif_animated(8, 8, 2), b"hi"), "image/gif")


def test_a_jpeg_without_an_eoi_loses_its_metadata_and_nothing_else() -> None:
    # The segment walk stops where the picture is damaged: what it passed is edited, nothing after is cut.
    clean = images.jpeg(16, 12)
    broken = clean[:-2] + b"\xff\x00"  # the EOI turned into stuffed scan data
    data = images.jpeg_insert(broken, 2, images.jpeg_segment(0xFE, b"a comment"))
    assert has_metadata(data, "image/jpeg")
    assert strip_metadata(data, "image/jpeg") == broken
