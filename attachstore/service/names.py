"""The display name an admitted image keeps (SPEC section 8), and its extension once normalization changed its
type."""

from __future__ import annotations

import re
import unicodedata

MAX_NAME_LENGTH = 255
# What a display name may not carry, since it is shown to people: control characters (Cc), format characters
# (Cf: the bidi controls that reorder what is shown, as in "evil\u202egnp.exe", zero-width spaces, the BOM,
# soft hyphens, tags), surrogates (Cs) and line or paragraph separators (Zl, Zp); also the letters and
# joiners that show as nothing (Hangul fillers, Khmer inherent vowels, the combining grapheme joiner). ZWJ
# and ZWNJ stay: Persian and the Indic scripts spell with them, emoji sequences join with them, and neither
# reorders nor hides anything. Every other space becomes one plain space, so that no run of them pushes an
# extension out of sight.
_DROPPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_KEPT = frozenset("\u200c\u200d")
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")
_SPACES = re.compile(r"\s+")
# The extensions of the four types, the first the one a renamed image gets; and aliases of them.
_EXTENSIONS = {
    "image/png": ("png", "apng"),
    "image/jpeg": ("jpg", "jpeg", "jpe", "jfif", "pjpeg", "pjp"),
    "image/gif": ("gif",),
    "image/webp": ("webp",),
}
# The sources' extensions (HEIC, HEIF, AVIF, BMP, TIFF): stored converted, always under another type.
_SOURCES = ("heic", "heif", "hif", "heics", "heifs", "avif", "avifs", "bmp", "dib", "tif", "tiff")
_TYPE_OF = {ext: media_type for media_type, exts in _EXTENSIONS.items() for ext in exts} | dict.fromkeys(
    _SOURCES, "a source"
)


def display_name(name: str | None) -> str | None:
    if name is None:
        return None
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if not base.isprintable() or not _INVISIBLE.isdisjoint(base):  # else nothing to drop (the usual case)
        base = "".join(
            c for c in base if c in _KEPT or (c not in _INVISIBLE and unicodedata.category(c) not in _DROPPED)
        )
    return _SPACES.sub(" ", base).strip()[:MAX_NAME_LENGTH].rstrip() or None


def renamed(name: str | None, media_type: str) -> str | None:
    """'photo.png' stored as a JPEG is 'photo.jpg', and so is 'photo.heic'; a name without an image extension
    of another type stays as it is."""
    if name is None:
        return None
    stem, dot, extension = name.rpartition(".")
    named = _TYPE_OF.get(extension.lower()) if dot and stem else None
    if named is None or named == media_type:
        return name
    extension = _EXTENSIONS[media_type][0]
    return f"{stem[: MAX_NAME_LENGTH - len(extension) - 1]}.{extension}"
