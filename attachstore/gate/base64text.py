"""The base64 text of a JSON upload: only canonical base64 is decoded (SPEC section 4), and a refusal says
what is wrong with the text."""

from __future__ import annotations

import binascii
import re

import pybase64

from ..errors import Rejected
from .shared import SharedBuffer

_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/=]")


def decode_base64(text: str) -> bytes:
    """Canonical base64 only (docs/design.md, "The gate"), so that re-encoding gives back the identical text.
    The empty text gives no bytes, which the gate refuses as an empty image, as over multipart."""
    if text[:5].lower() == "data:":
        raise _bad_base64(
            "the image is a data: URL, not bare base64",
            "send only the base64 text after the comma, and the media type in its own field",
        )
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except ValueError:  # binascii.Error, or a str that is not ASCII
        raise _base64_problem(text) from None
    # Strict mode has checked the alphabet and the padding. It lets through nonzero bits in the unused low
    # bits before '=', which only the last 4 characters can hold: re-encoding those is re-encoding it all.
    tail = 3 - _padding(text)
    if binascii.b2a_base64(data[-tail:], newline=False) != text[-4:].encode("ascii"):
        raise _bad_base64("the base64 text is not canonical: the bits left over before the '=' are not zero")
    return data


_CHUNK = 1 << 16  # characters per decoded piece: a multiple of 4


def decode_base64_shared(text: str) -> SharedBuffer:
    """Whatever the pieces find wrong is settled by decode_base64 on the whole text, so the refusals (and what
    is accepted) are exactly its own."""
    last = max(0, len(text) - 4)  # only the last 4 characters may hold '=', or bits left over
    if text[:5].lower() == "data:" or len(text) % 4 or "=" in text[:last]:
        return SharedBuffer.of(decode_base64(text))  # raises, with the words for what is wrong
    buf = SharedBuffer()
    try:
        for start in range(0, len(text), _CHUNK):
            buf.write(pybase64.b64decode(text[start : start + _CHUNK], validate=True))
        tail = text[last:]
        canonical = binascii.b2a_base64(binascii.a2b_base64(tail), newline=False) == tail.encode("ascii")
    except ValueError:  # binascii.Error, or a str that is not ASCII
        canonical = False
    if not canonical:
        buf.close()
        return SharedBuffer.of(decode_base64(text))
    return buf


def base64_decoded_size(text: str) -> int:
    # exact for canonical base64, an estimate otherwise (decode_base64 refuses those later)
    return max(0, len(text) * 3 // 4 - _padding(text))


def _padding(text: str) -> int:
    return 2 if text.endswith("==") else 1 if text.endswith("=") else 0


def _bad_base64(message: str, hint: str | None = None) -> Rejected:
    return Rejected("INVALID_IMAGE_BASE64", message, hint=hint)


def _base64_problem(text: str) -> Rejected:
    bad = _NOT_BASE64.search(text)
    if bad is not None:
        char, at = bad.group(), bad.start()
        if char in "-_":
            return _bad_base64(
                f"the base64 text uses the URL-safe alphabet ({char!r} at offset {at:,})",
                "use the standard alphabet ('+' and '/' rather than '-' and '_') with '=' padding",
            )
        if char.isspace():
            return _bad_base64(
                f"the base64 text contains whitespace at offset {at:,}", "remove all line breaks and spaces"
            )
        return _bad_base64(f"the base64 text contains {char!r} at offset {at:,}, which is not base64")
    if len(text) % 4:
        return _bad_base64(
            f"the base64 text is {len(text):,} characters, not a multiple of 4: its '=' padding is wrong"
        )
    return _bad_base64("the base64 text has '=' padding before its end")
