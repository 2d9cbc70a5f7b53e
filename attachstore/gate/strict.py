"""Pillow as the gate runs it: its process-wide limits held to the gate's while an image decodes, and what
it raises told in one line (docs/design.md, "The gate")."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from PIL import Image, ImageFile, PngImagePlugin, UnidentifiedImageError

from ..config import Limits
from .containers import Malformed


class Damaged(Exception): ...  # str(e) is the one line that says how


@contextmanager
def strict_pillow(limits: Limits) -> Iterator[None]:
    saved = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
    Image.MAX_IMAGE_PIXELS = limits.max_pixels  # Pillow's own bomb check agrees with ours
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated image must fail, not decode to grey
    try:
        with warnings.catch_warnings():
            # Pillow warns about metadata it skips (EXIF, an MPO index it falls back from): the pixels are
            # unaffected, so those pass. A bomb warning fails. (An acTL Pillow warns about and ignores is
            # caught by the chunk walk, which compares it with the frames that are there.)
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = saved


def reason(e: BaseException) -> str:
    if isinstance(e, (Damaged, Malformed)):
        return str(e)
    if isinstance(e, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return "decoding would exceed the pixel limit (a decompression bomb)"
    if isinstance(e, UnidentifiedImageError):
        return "the decoder cannot read its header"
    if isinstance(e, MemoryError):
        return "the decoder ran out of memory"
    text = " ".join(str(e).split())[:200]  # one line, bounded
    if "MAX_TEXT_CHUNK" in text:  # Pillow inflates a zTXt, iTXt or iCCP chunk no further than its limit
        limit = PngImagePlugin.MAX_TEXT_CHUNK
        return f"a compressed text or ICC profile chunk inflates past {limit:,} bytes (a decompression bomb)"
    if "MAX_TEXT_MEMORY" in text:
        limit = PngImagePlugin.MAX_TEXT_MEMORY
        return f"its text chunks inflate past {limit:,} bytes in all (a decompression bomb)"
    if text == "could not create decoder object":  # Pillow's words for libwebp refusing the file
        return "libwebp cannot parse it: the file is truncated or malformed"
    if isinstance(e, (OSError, SyntaxError, ValueError, EOFError)) and text:
        return text  # Pillow's own messages: "image file is truncated", "broken PNG file", ...
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
