"""The encodings normalize.fit chooses between for a still image (docs/normalization.md, "Encoding").
Deterministic: fixed encoder settings, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from typing import Any, Literal

from PIL import Image, ImageChops

JPEG_LADDER = (90, 85, 75, 65, 50)
WEBP_LADDER = (90, 80, 70, 60, 50)
PNG_LEVEL = 6  # zlib's default: most of what level 9 saves, in a fraction of its time
PALETTE = 256
# "png": the image keeps every pixel (screenshots, line art, text, alpha); "jpeg" / "webp": a photo.
Kind = Literal["png", "jpeg", "webp"]


@dataclass(frozen=True, slots=True)
class Encoded:
    data: bytes | None  # None: over the byte limit
    media_type: str
    how: str  # the last encoding tried, for the message when nothing fits: "a PNG", "a JPEG of quality 50"
    palette: bool = False  # the colours were reduced to a palette (the one lossy step of "png")


def still(im: Image.Image, max_bytes: int, kind: Kind) -> Encoded:
    if kind == "png":
        return _lossless(im, max_bytes)
    lossy = _lossy(im, max_bytes, kind)
    # Never larger than a lossless encoding that fits: the PNG is written only as far as it could win.
    png = _png(im, max_bytes if lossy.data is None else len(lossy.data))
    return png if png.data is not None else lossy


def _lossless(im: Image.Image, max_bytes: int) -> Encoded:
    full = _png(im, max_bytes)
    if full.data is not None or im.mode == "L":  # one byte a pixel already: a palette saves nothing
        return full
    reduced = (im.convert("RGBA") if im.mode == "LA" else im).quantize(PALETTE, Image.Quantize.FASTOCTREE)
    data = _save(reduced, "PNG", max_bytes, compress_level=PNG_LEVEL)
    return Encoded(data, "image/png", f"a PNG of {PALETTE} colours", palette=True)


def _png(im: Image.Image, most: int) -> Encoded:
    return Encoded(_save(_exact_palette(im), "PNG", most, compress_level=PNG_LEVEL), "image/png", "a PNG")


def _lossy(im: Image.Image, max_bytes: int, kind: Kind) -> Encoded:
    tries: list[tuple[str, str, dict[str, Any]]]
    if kind == "webp":
        tries = [
            ("WEBP", f"a WebP of quality {q}", {"quality": q, "method": 4, "alpha_quality": 100})
            for q in WEBP_LADDER
        ]
    else:
        tries = [
            ("JPEG", f"a JPEG of quality {q}", {"quality": q, "optimize": True, "subsampling": "4:2:0"})
            for q in JPEG_LADDER
        ]
    for fmt, how, options in tries:
        data = _save(im, fmt, max_bytes, **options)
        if data is not None:
            return Encoded(data, f"image/{kind}", how)
    return Encoded(None, f"image/{kind}", tries[-1][1])


def _exact_palette(im: Image.Image) -> Image.Image:
    """`im` itself where a palette would not come out exact: one colour at two levels of partial alpha, which
    a quantizer of RGB cannot tell apart, or a colour the quantizer moved."""
    colours: list[tuple[int, Any]] | None = im.getcolors(PALETTE) if im.mode in ("RGB", "RGBA") else None
    if colours is None:
        return im
    if im.mode == "RGB":
        alphas = {colour: 255 for _, colour in colours}
        rgb = expected = im
    else:
        alphas = {}
        for _, colour in colours:
            if colour[3] and alphas.setdefault(colour[:3], colour[3]) != colour[3]:
                return im
        # A fully transparent pixel's colour is invisible: they all get one the image does not show, so
        # that a colour can be both opaque and transparent (black text on a clear background). There is
        # one: alpha 0 is one of the 256 colours at most, so at most 255 others are visible.
        alpha = im.getchannel("A")
        rgb = im.convert("RGB")
        if len(alphas) < len(colours):
            clear = next(c for v in range(256) if (c := (0, 0, v)) not in alphas)
            alphas[clear] = 0
            rgb.paste(clear, mask=alpha.point(lambda a: 255 if a == 0 else 0))
        expected = rgb.copy()
        expected.putalpha(alpha)
    paletted = rgb.quantize(len(alphas), Image.Quantize.MEDIANCUT)
    if im.mode == "RGBA":
        palette = paletted.getpalette() or []
        entries = (tuple(palette[i : i + 3]) for i in range(0, len(palette), 3))
        paletted.info["transparency"] = bytes(alphas.get(entry, 255) for entry in entries)
    if ImageChops.difference(paletted.convert(im.mode), expected).getbbox(alpha_only=False) is not None:
        return im
    return paletted


class _OverLimit(Exception):
    pass


class _Bounded(BytesIO):
    def __init__(self, most: int | None) -> None:
        super().__init__()
        self.most = most

    def write(self, data: Any) -> int:
        written = super().write(data)
        if self.most is not None and self.tell() > self.most:
            raise _OverLimit
        return written


def _save(im: Image.Image, fmt: str, most: int | None, **options: Any) -> bytes | None:
    out = _Bounded(most)
    try:
        im.save(out, fmt, **options)
    except _OverLimit:
        return None
    return out.getvalue()
