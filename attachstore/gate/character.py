"""What kind of picture a still image is, read from its pixels: screenshot-like (interfaces, text, line art,
diagrams, charts) or photo-like, which decides how normalize.fit encodes it (docs/normalization.md).

The measures are taken on the pairs of horizontally neighbouring pixels of up to 256 rows spread evenly over
the image, by the largest difference of the pair in any band: the share of pairs that are exactly equal
(`flat`) and the share that differ by 1 to 8 levels (`smooth`). What a program draws has large runs of one
exact colour (backgrounds, panels, the inside of glyphs and lines) that meet at sharp edges; a photo has
noise and gradients, so that its neighbours rarely match exactly and mostly differ a little. Measured on 26
screenshots, diagrams and charts as PNG: flat 0.76 to 0.99, smooth 0.00 to 0.17 (0.58 to 0.94 and 0.04 to
0.28 after a JPEG round trip); on photos, flat 0.04 to 0.14 and smooth 0.52 to 0.57; a noiseless synthetic
photo (smooth blobs) has flat 0.64 and smooth 0.36 (docs/normalization.md#encoding has the table).
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image, ImageChops

FLAT_AT_LEAST = 0.5  # screenshot-like: at least half of the pairs equal ...
SMOOTH_UNDER = 0.25  # ... and under a quarter of them differing a little
SMALL = 8  # the largest difference, in levels, that counts as smooth
SAMPLE_ROWS = 256  # rows read, spread evenly; all of them in a shorter image


@dataclass(frozen=True, slots=True)
class Character:
    flat: float
    smooth: float

    @property
    def screenshot_like(self) -> bool:
        return self.flat >= FLAT_AT_LEAST and self.smooth < SMOOTH_UNDER


def character(im: Image.Image) -> Character:
    """The measures of `im` (in L, LA, RGB, RGBA or CMYK); an image one pixel wide is all flat."""
    width, height = im.size
    if width < 2:
        return Character(1.0, 0.0)
    rows = min(height, SAMPLE_ROWS)
    sample = Image.new(im.mode, (width, rows))
    for i in range(rows):
        y = i * height // rows
        sample.paste(im.crop((0, y, width, y + 1)), (0, i))
    left, right = sample.crop((0, 0, width - 1, rows)), sample.crop((1, 0, width, rows))
    bands = ImageChops.difference(left, right).split()
    largest = bands[0]
    for band in bands[1:]:
        largest = ImageChops.lighter(largest, band)
    counts = largest.histogram()
    pairs = (width - 1) * rows
    return Character(counts[0] / pairs, sum(counts[1 : SMALL + 1]) / pairs)


def screenshot_like(im: Image.Image) -> bool:
    """Whether `im` reads as drawn by a program rather than photographed."""
    return character(im).screenshot_like
