"""Inline images as transcripts write them, and the placeholders that stand for them once stripped: what
counts as one, what can be written back byte for byte, and the placeholder's form
`attachstore:<ref>[;esc=1][;<the data URL's prefix>]` are in docs/transcripts.md, "What strip does"."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from ..gate import sniff, sniff_source
from .policy import HEAD

SCHEME = b"attachstore:"
_PREFIX_MAX = 256  # the longest data URL prefix kept in a placeholder
PLACEHOLDER_MAX = len(SCHEME) + 7 + 64 + len(b";esc=1") + 1 + _PREFIX_MAX
_PLACEHOLDER = re.compile(
    rb"attachstore:((?:sha256|blake3):[0-9a-f]{64})(;esc=1)?(?:;((?i:data:)[^\n\"]*,))?"
)
_DATA_IMAGE = (b"data:image/", b"data:image\\/")
_DATA_URL = re.compile(rb"data:image(?:/|\\/)([^;,]*)((?:;[^;,]*)*);base64,", re.IGNORECASE)
_BASE64_HEAD = re.compile(rb"(?:[A-Za-z0-9+]|\\?/)*")
_MAGIC_CHARS = 16  # base64 characters that decode to the 12 bytes sniff needs
_BASE64_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


@dataclass(frozen=True, slots=True)
class Inline:
    prefix: bytes  # a data URL's text up to and including its comma, as written; b"" for a base64 field
    declared: str | None  # the data URL's media type
    data: bytes
    escaped: bool  # every '/' of the base64 written '\/'

    def placeholder(self, ref: str) -> bytes:
        text = SCHEME + ref.encode("ascii")
        if self.escaped:
            text += b";esc=1"
        return text + (b";" + self.prefix if self.prefix else b"")


@dataclass(frozen=True, slots=True)
class Unusable:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Placeholder:
    ref: str
    escaped: bool
    prefix: bytes

    def base64(self, data: bytes | bytearray) -> bytes:
        text = base64.b64encode(data)
        return text.replace(b"/", b"\\/") if self.escaped else text

    def raw(self, data: bytes | bytearray) -> bytes:
        return self.prefix + self.base64(data)


def placeholder(raw: bytes) -> Placeholder | None:
    match = _PLACEHOLDER.fullmatch(raw) if len(raw) <= PLACEHOLDER_MAX else None
    if match is None:
        return None
    return Placeholder(match.group(1).decode("ascii"), match.group(2) is not None, match.group(3) or b"")


def is_data_url(raw: bytes) -> bool:
    return raw[:12].lower().startswith(_DATA_IMAGE)


def image(raw: bytes) -> Inline | Unusable:
    prefix, declared = b"", None
    if is_data_url(raw):
        comma = raw.find(b",", 0, _PREFIX_MAX + 1)
        match = _DATA_URL.fullmatch(raw, 0, comma + 1) if comma > 0 else None
        if match is None:
            return Unusable("INVALID_IMAGE_BASE64", "the data: URL is not base64, or its header is too long")
        prefix = raw[: comma + 1]
        declared = "image/" + match.group(1).decode("latin-1").lower()
    text = raw[len(prefix) :]
    escaped = False
    if b"\\" in text:
        if text.count(b"\\") != text.count(b"\\/"):
            return Unusable(
                "INVALID_IMAGE_BASE64",
                "the base64 text holds JSON escapes other than \\/: it cannot be written back byte for byte",
            )
        if text.count(b"/") != text.count(b"\\/"):
            return Unusable(
                "INVALID_IMAGE_BASE64",
                "the base64 text writes '/' both as '/' and as '\\/': it cannot be written back exactly",
            )
        text = text.replace(b"\\/", b"/")
        escaped = True
    if not text:
        return Unusable("INVALID_IMAGE_BASE64", "the base64 text is empty")
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return Unusable("INVALID_IMAGE_BASE64", "the base64 text is not valid base64")
    if base64.b64encode(data) != text:
        return Unusable(
            "INVALID_IMAGE_BASE64",
            "the base64 text is not canonical: it could not be written back byte for byte",
        )
    return Inline(prefix, declared, data, escaped)


class Finder:
    """The scanner's policy for strip: inline images, and the placeholders of an earlier strip. Bare base64
    that looks like an image under a key of another format (`watched`) is not taken, but counted by its key
    in `unclaimed`, so that the run can name the format that would take it. `sources`: bare base64 of a
    HEIC, HEIF, AVIF, BMP or TIFF counts too (repair converts them; strip cannot store them)."""

    def __init__(
        self,
        keys: frozenset[bytes],
        cap: int,
        watched: frozenset[bytes] = frozenset(),
        *,
        sources: bool = False,
    ) -> None:
        self.keys = keys
        self.cap = cap
        self.watched = watched - keys
        self.unclaimed: dict[bytes, int] = {}
        self.sources = sources

    def may_want(self, first: int, level: int, key: bytes | None) -> bool:
        bare = key in self.keys or key in self.watched
        return first in b"adD" or (bare and (first in _BASE64_CHARS or first == 0))

    def wanted(self, head: bytes, level: int, key: bytes | None, final: bool) -> bool | None:
        verdicts = [_starts(head, SCHEME, final), _starts(head[:12].lower(), _DATA_IMAGE[0], final)]
        verdicts.append(_starts(head[:12].lower(), _DATA_IMAGE[1], final))
        if key in self.keys:
            verdicts.append(_base64_image(head, final, self.sources))
        if any(verdicts):
            return True
        if None in verdicts:
            return None
        if key is not None and key in self.watched:
            looks = _base64_image(head, final)
            if looks is None:
                return None
            if looks:
                self.unclaimed[key] = self.unclaimed.get(key, 0) + 1
        return False


class Placeholders:
    cap = PLACEHOLDER_MAX

    def may_want(self, first: int, level: int, key: bytes | None) -> bool:
        return first == SCHEME[0]

    def wanted(self, head: bytes, level: int, key: bytes | None, final: bool) -> bool | None:
        return _starts(head, SCHEME, final)


def _starts(head: bytes, prefix: bytes, final: bool) -> bool | None:
    if head.startswith(prefix):
        return True
    return None if not final and prefix.startswith(head) else False


def _base64_image(head: bytes, final: bool, sources: bool = False) -> bool | None:
    match = _BASE64_HEAD.match(head)
    text = match.group() if match else b""
    chars = text.replace(b"\\/", b"/")
    if len(chars) >= _MAGIC_CHARS:
        if sniff(base64.b64decode(chars[:_MAGIC_CHARS])) is not None:
            return True
        if not sources:
            return False
        if sniff_source(base64.b64decode(chars[: len(chars) // 4 * 4])) is not None:
            return True
        more = len(head) < HEAD and len(text) == len(head) and not final
        return None if more else False
    if len(text) < len(head) or final:  # something else follows: too short to be an image
        return False
    return None
