"""Display names (service/admission.py `display_name`): a name is shown to people, so nothing in it may
change what is shown around it or hide part of it: control and format characters go, as do the invisible
letters and runs of spaces that can push an extension out of sight."""

from __future__ import annotations

import unicodedata

import pytest

from attachstore.service.names import display_name, renamed


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("evil\u202egnp.exe", "evilgnp.exe"),  # RIGHT-TO-LEFT OVERRIDE: shown as "evilexe.png"
        ("\u202bshot\u202c.png", "shot.png"),  # embedding and its POP
        ("a\u2066b\u2067c\u2068d\u2069.png", "abcd.png"),  # the isolates
        ("\u200e\u200f\u061cname.png", "name.png"),  # the marks: LRM, RLM, ALM
        ("in\u200bvis\u2060ible\ufeff.png", "invisible.png"),  # zero width space, word joiner, BOM
        ("soft\u00adhyphen.png", "softhyphen.png"),
        ("tag\U000e0041\U000e007f.png", "tag.png"),  # tag characters
        ("c1\u0085\u009b.png", "c1.png"),  # C1 controls, which the old pattern let through
        ("line\u2028para\u2029.png", "linepara.png"),
        ("\u3164\u115f\u1160\uffa0.png", ".png"),  # Hangul fillers: letters that show as nothing
        ("a\u034fb.png", "ab.png"),  # COMBINING GRAPHEME JOINER
        ("invoice.pdf\u2003\u2003\u00a0                .exe", "invoice.pdf .exe"),
        ("\u3000wide\u3000", "wide"),
        ("a\r\nb\t.png", "ab.png"),
        (
            "lone\udc80.png",
            "lone.png",
        ),  # a surrogate (from a multipart filename decoded with surrogateescape)
        ("\u202e", None),
    ],
)
def test_what_could_change_or_hide_what_is_shown_goes(given: str, kept: str | None) -> None:
    assert display_name(given) == kept


@pytest.mark.parametrize(
    "name",
    [
        "Bildschirmfoto ü 2026.png",
        "نامه\u200cها.png",  # Persian: ZERO WIDTH NON-JOINER belongs to the spelling
        "family \U0001f468\u200d\U0001f469\u200d\U0001f467.png",  # an emoji ZWJ sequence
        "\u2764\ufe0f.png",  # a variation selector picks the emoji presentation
        "שלום.png",  # right-to-left text itself is fine: only the controls that force an order go
        "e\u0301.png",
    ],
)
def test_names_in_any_script_are_kept(name: str) -> None:
    assert display_name(name) == name


def test_no_format_or_control_character_survives() -> None:
    every = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in {"Cc", "Cf", "Cs"})
    assert display_name(f"a{every}b.png") == "a\u200c\u200db.png"


def test_the_path_and_the_length_rules_still_hold() -> None:
    assert display_name("C:\\Users\\me\\\u202eshot.png") == "shot.png"
    assert display_name("x" * 300 + "\u202e") == "x" * 255
    assert display_name(" \u200b ") is None


@pytest.mark.parametrize(
    ("name", "media_type", "shown"),
    [
        ("retina.png", "image/png", "retina.png"),  # still a PNG: as it was
        ("photo.png", "image/jpeg", "photo.jpg"),
        ("photo.jpeg", "image/jpeg", "photo.jpeg"),  # another name of the same type
        ("anim.gif", "image/png", "anim.png"),
        ("x.webp", "image/png", "x.png"),
        ("scan.JFIF", "image/png", "scan.png"),
        ("photo.png", "image/webp", "photo.webp"),
        ("IMG_0042.HEIC", "image/jpeg", "IMG_0042.jpg"),  # a converted source
        ("scan.tif", "image/png", "scan.png"),
        ("logo.bmp", "image/png", "logo.png"),
        ("still.avif", "image/jpeg", "still.jpg"),
        ("shot", "image/jpeg", "shot"),  # no extension: nothing to correct
        ("notes.txt", "image/jpeg", "notes.txt"),  # not an image extension: the name is the user's
        (".png", "image/jpeg", ".png"),  # a dot file, not an extension
        (None, "image/jpeg", None),
    ],
)
def test_a_name_takes_the_extension_of_the_stored_type(
    name: str | None, media_type: str, shown: str | None
) -> None:
    assert renamed(name, media_type) == shown


def test_a_renamed_name_keeps_within_the_length() -> None:
    long = "x" * 251 + ".png"
    assert renamed(long, "image/webp") == "x" * 250 + ".webp"
