"""Inline images and placeholders: what is taken apart, what is refused because it could not be written back
exactly, and that a placeholder gives back the very text it replaced."""

from __future__ import annotations

import base64

import pytest

from attachstore.transcripts import inline
from attachstore.transcripts.inline import Finder, Inline, Unusable
from tests.support.images import jpeg, png

PNG = png(9, 7, seed=3)
JPEG = jpeg(9, 7, seed=4)
REF = "sha256:" + "ab" * 32


def b64(data: bytes) -> bytes:
    return base64.b64encode(data)


def slashed(data: bytes) -> bytes:
    text = b64(data)
    assert b"/" in text
    return text.replace(b"/", b"\\/")


@pytest.mark.parametrize(
    "raw",
    [
        b"data:image/png;base64," + b64(PNG),
        b"DATA:Image/PNG;BASE64," + b64(PNG),
        b"data:image/png;name=shot.png;base64," + b64(PNG),
        b"data:image\\/jpeg;base64," + slashed(JPEG),
        b64(JPEG),
        slashed(JPEG),
    ],
)
def test_a_placeholder_gives_back_the_text_it_replaced(raw: bytes) -> None:
    found = inline.image(raw)
    assert isinstance(found, Inline)
    assert found.data in (PNG, JPEG)
    text = found.placeholder(REF)
    assert text.startswith(b"attachstore:" + REF.encode())
    assert not text.startswith((b"http:", b"https:"))
    assert b'"' not in text
    assert b"\\" not in text.replace(b"\\/", b"")
    back = inline.placeholder(text)
    assert back is not None
    assert back.ref == REF
    assert back.raw(found.data) == raw


def test_declared_media_type_of_a_data_url() -> None:
    found = inline.image(b"data:image/JPEG;charset=x;base64," + b64(JPEG))
    assert isinstance(found, Inline)
    assert found.declared == "image/jpeg"
    assert isinstance(bare := inline.image(b64(JPEG)), Inline)
    assert bare.declared is None


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b64(PNG)[:-4] + b64(PNG)[-4:].replace(b"=", b"") + b"\\n", "escapes other than"),
        (slashed(JPEG).replace(b"\\/", b"/", 1), "both as '/'"),
        (b64(PNG + b"\0")[:-2], "not valid base64"),
        (b64(PNG + b"\0")[:-3] + b"B==", "not canonical"),
        (b"data:image/png;utf8,<svg/>", "not base64"),
        (b"data:image/png;base64,", "empty"),
    ],
)
def test_what_could_not_be_written_back_exactly_is_refused(raw: bytes, why: str) -> None:
    found = inline.image(raw)
    assert isinstance(found, Unusable), found
    assert found.code == "INVALID_IMAGE_BASE64"
    assert why in found.message


def test_placeholders_are_recognized_exactly() -> None:
    assert inline.placeholder(b"attachstore:" + REF.encode()) is not None
    assert inline.placeholder(b"attachstore:" + REF.encode() + b";esc=1;data:image/png;base64,") is not None
    for text in (
        b"attachstore:" + REF.upper().encode(),
        b"attachstore:" + REF.encode() + b" ",
        b"attachstore:md5:" + b"ab" * 16,
        b"attachstore:" + REF.encode() + b";data:image/png;base64",
        b"see attachstore:" + REF.encode(),
    ):
        assert inline.placeholder(text) is None, text


def test_the_finder_wants_images_by_their_first_bytes() -> None:
    finder = Finder(frozenset({b"data"}), cap=1 << 20)

    def wanted(head: bytes, key: bytes | None, final: bool = False) -> bool | None:
        return finder.wanted(head[:32], 0, key, final)

    assert wanted(b"data:image/png;base64,AAAA", None) is True
    assert wanted(b"data:ima", None) is None  # not yet known
    assert wanted(b"data:ima", None, final=True) is False
    assert wanted(b"data:text/plain;base64,", None) is False
    assert wanted(b64(PNG), b"data") is True
    assert wanted(slashed(JPEG), b"data") is True
    assert wanted(b64(PNG), b"text") is False  # not a key of the format
    assert wanted(b64(b"%PDF-1.4 not an image"), b"data") is False
    assert wanted(b"iVBOR", b"data", final=True) is False  # too short to be one
    assert wanted(b"attachstore:sha256:", None) is True
