"""What a provider's API finds wrong with an inline image, the same checks for every fake model: the bytes'
signature against the declared media type, a format the provider does not take, bytes that do not decode, a
side over its limit. Each protocol module puts a `Fault` into its provider's own words and error body."""

from __future__ import annotations

import enum
import io
from collections.abc import Collection

import PIL.Image

# Signatures of the formats the providers name; an ISO media file (`ftyp`) is a HEIC or an AVIF.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)


class Fault(enum.Enum):
    MISMATCH = "the bytes are not the declared media type"
    FORMAT = "a format the provider does not take"
    UNDECODABLE = "the bytes do not decode"
    SIDE = "a side over the provider's limit"


def sniffed(data: bytes) -> str | None:
    """The media type the bytes' signature says, or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp":
        return "image/avif" if data[8:12] in (b"avif", b"avis") else "image/heic"
    return next((kind for magic, kind in _SIGNATURES if data.startswith(magic)), None)


def fault(declared: str | None, data: bytes, formats: Collection[str], max_side: int | None) -> Fault | None:
    """What the provider refuses this image for, checked in the order the APIs check (the first found), or
    None where it takes it. `formats` are the media types it takes; `max_side` None where it sets no side."""
    found = sniffed(data)
    if found is not None and declared is not None and found != declared:
        return Fault.MISMATCH
    if (found or declared) not in formats:
        return Fault.FORMAT
    try:
        with PIL.Image.open(io.BytesIO(data)) as image:
            image.load()
            size = image.size
    except (OSError, SyntaxError, ValueError, PIL.Image.DecompressionBombError):
        return Fault.UNDECODABLE
    if found is None:
        return Fault.MISMATCH
    if max_side is not None and max(size) > max_side:
        return Fault.SIDE
    return None
