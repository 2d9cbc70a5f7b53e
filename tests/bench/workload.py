"""The images and request bodies the scenarios send, made in memory (deterministic: seeded)."""

from __future__ import annotations

import base64
import json
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache

from PIL import Image, ImageDraw, ImageFont

from tests.support.images import encode, jpeg, noise, png

BOUNDARY = "attachstore-bench-7f3a9c01e5d24b68"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


@dataclass(frozen=True)
class Item:
    name: str
    media_type: str
    data: bytes


def read_images(n: int) -> list[Item]:
    """About 300 KB each: 600x400 noise, JPEG quality 95 (noise is what a photo is in the worst case)."""
    return [Item(f"read-{i}.jpg", "image/jpeg", jpeg(600, 400, seed=1000 + i, quality=95)) for i in range(n)]


def render_images(n: int) -> list[Item]:
    """About 600 KB each (800 KB of base64): 900x560 noise, JPEG quality 95."""
    return [
        Item(f"render-{i}.jpg", "image/jpeg", encode(noise(900, 560, seed=2000 + i), "JPEG", quality=95))
        for i in range(n)
    ]


def tiny_pngs(n: int, start: int = 0) -> list[Item]:
    """64x64 noise PNGs (about 12 KB), all different: new admissions for the scale scenario."""
    return [
        Item(f"tiny-{start + i}.png", "image/png", png(64, 64, seed=500_000 + start + i)) for i in range(n)
    ]


# -- the admit mix ------------------------------------------------------------------------------------------

WORDS = "abcdefghijklmnopqrstuvwxyz     ABCDEFGHIJ0123456789(){}[]=.,:;_-/"


@cache
def screenshot_base() -> Image.Image:
    """1280x800, like a screen: flat panels, lines of text, a few coloured widgets, one small photo."""
    rng = random.Random("screenshot")
    im = Image.new("RGB", (1280, 800), (246, 246, 248))
    d = ImageDraw.Draw(im)
    d.rectangle((0, 0, 1280, 36), fill=(40, 44, 52))
    d.rectangle((0, 36, 240, 800), fill=(230, 232, 236))
    font = ImageFont.load_default()
    for y in range(48, 790, 16):
        left = "".join(rng.choice(WORDS) for _ in range(rng.randint(10, 30)))
        d.text((8, y), left, fill=(60, 60, 70), font=font)
        right = "".join(rng.choice(WORDS) for _ in range(rng.randint(40, 150)))
        d.text(
            (256, y), right, fill=(rng.randint(0, 120), rng.randint(0, 120), rng.randint(0, 160)), font=font
        )
    for _ in range(6):
        x, y = rng.randint(300, 1100), rng.randint(60, 700)
        colour = (rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255))
        d.rectangle((x, y, x + rng.randint(60, 180), y + rng.randint(20, 90)), fill=colour)
    im.paste(noise(160, 120, seed=7), (1080, 640))
    return im


@cache
def photo_base() -> Image.Image:
    """2000x1500 noise: the JPEG of the mix (quality 85: about 2.3 MB, under the 3.5 MiB limit)."""
    return noise(2000, 1500, seed=11)


@cache
def webp_base() -> Image.Image:
    """1024x768, photo-like: a gradient under blurred coarse noise."""
    base = Image.linear_gradient("L").resize((1024, 768)).convert("RGB")
    return Image.blend(base, noise(256, 192, seed=13).resize((1024, 768), Image.Resampling.BILINEAR), 0.6)


KINDS = ("png", "jpeg", "webp")


def _vary(im: Image.Image, k: int) -> Image.Image:
    """A copy with a few pixels set from `k`: a different image, so every admission is a new object."""
    im = im.copy()
    rng = random.Random(k)
    for _ in range(4):
        im.putpixel(
            (rng.randrange(im.width), rng.randrange(im.height)),
            (rng.randrange(256), rng.randrange(256), rng.randrange(256)),
        )
    return im


def admit_image(i: int) -> Item:
    """Image `i` of the admit mix: PNG screenshot, JPEG photo, WebP, PNG, ..., each one different."""
    kind, k = KINDS[i % 3], i // 3
    if kind == "png":
        return Item(f"screen-{k}.png", "image/png", encode(_vary(screenshot_base(), k), "PNG"))
    if kind == "jpeg":
        return Item(f"photo-{k}.jpg", "image/jpeg", encode(_vary(photo_base(), k), "JPEG", quality=85))
    return Item(f"image-{k}.webp", "image/webp", encode(_vary(webp_base(), k), "WEBP", quality=80, method=0))


def admit_images(n: int, processes: int = 2) -> list[Item]:
    if n <= 6 or processes <= 1:
        return [admit_image(i) for i in range(n)]
    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(admit_image, range(n), chunksize=max(1, n // (4 * processes))))


def multipart(item: Item, source: str = "user") -> bytes:
    """One image as the multipart form of POST /v1/attachments."""
    return b"".join(
        [
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="source"\r\n\r\n{source}\r\n'.encode(),
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="{item.name}"\r\n'
            f"Content-Type: {item.media_type}\r\n\r\n".encode(),
            item.data,
            f"\r\n--{BOUNDARY}--\r\n".encode(),
        ]
    )


def json_body(item: Item, source: str = "user") -> bytes:
    """One image as the JSON body of POST /v1/attachments (its bytes as base64)."""
    image = {"data": base64.b64encode(item.data).decode("ascii"), "media_type": item.media_type}
    return json.dumps({"source": source, "images": [image | {"name": item.name}]}).encode()
