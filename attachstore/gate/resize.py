"""The geometry of normalize.fit and the frames it encodes: sizes within a target, the modes every step
takes, and one frame resized, in sRGB and upright (docs/normalization.md). Pure functions."""

from __future__ import annotations

from math import sqrt

from PIL import Image

from .colour import Conversion
from .target import Target

SHRINK = 0.8  # a round takes a fifth off both sides
# What EXIF orientations 2-8 ask for to show the picture upright, as ImageOps.exif_transpose does it.
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def upright(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    return (size[1], size[0]) if orientation >= 5 else size


def bounded(size: tuple[int, int], target: Target) -> tuple[int, int]:
    width, height = size
    scale = min(1.0, target.max_side / max(width, height), sqrt(target.max_pixels / (width * height)))
    if scale >= 1.0:
        return size
    longest, shortest = max(size), min(size)
    side = max(1, round(longest * scale))
    other = max(1, round(side * shortest / longest))
    while side > 1 and (side > target.max_side or side * other > target.max_pixels):  # rounded up too far
        side -= 1
        other = max(1, round(side * shortest / longest))
    return (side, other) if width >= height else (other, side)


def shrunk(size: tuple[int, int]) -> tuple[int, int]:
    return max(1, round(size[0] * SHRINK)), max(1, round(size[1] * SHRINK))


def working_mode(im: Image.Image) -> Image.Image:
    mode = im.mode
    if mode in ("L", "RGB") and "transparency" in im.info:  # a tRNS colour key
        return im.convert(mode + "A")
    if mode in ("L", "LA", "RGB", "RGBA", "CMYK"):
        return im
    if mode in ("La", "RGBa"):  # alpha premultiplied (a TIFF's associated alpha): Pillow unmultiplies it
        return im.convert(mode[:-1] + "A")
    if mode.startswith("I"):  # 16-bit greyscale, which convert("L") would clip rather than scale
        # Through "I" first: point() takes no big-endian 16-bit pixels (a TIFF's I;16B).
        wide = im if mode in ("I", "I;16") else im.convert("I")
        return wide.point(lambda v: v / 257 + 0.5).convert("L")
    if mode == "1":
        return im.convert("L")
    return im.convert("RGBA" if im.has_transparency_data else "RGB")  # P, PA, and anything rarer


def opaque(im: Image.Image) -> Image.Image:
    if im.mode in ("LA", "RGBA") and not has_alpha(im):
        return im.convert(im.mode[:-1])
    return im


def has_alpha(im: Image.Image) -> bool:
    return im.mode in ("LA", "RGBA") and im.getextrema()[-1] != (255, 255)


def prepare(
    source: Image.Image,
    opened: Image.Image,
    stored: tuple[int, int],
    orientation: int,
    colour: Conversion | None,
    box: tuple[float, float, float, float] | None,
) -> Image.Image:
    frame = source
    if stored != source.size or box is not None:
        frame = frame.resize(stored, Image.Resampling.LANCZOS, box=box)
    if colour is not None:
        frame = colour(frame)
    if orientation != 1:
        frame = frame.transpose(_TRANSPOSE[orientation])
    if frame is opened:
        frame = frame.copy()
    frame.info = {}  # the encoders would take a profile, a comment or a transparency from it
    return frame
