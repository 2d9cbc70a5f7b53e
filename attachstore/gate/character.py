"""What kind of picture a still image is, read from its pixels: screenshot-like or photo-like, which
decides how normalize.fit encodes it. The measures, their thresholds and what they were measured on:
docs/normalization.md, "Encoding".
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
    width, height = im.size
    if width < 2:  # an image one pixel wide is all flat
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
    return character(im).screenshot_like
