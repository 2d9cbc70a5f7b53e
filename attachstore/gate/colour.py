"""An image's colours in sRGB: the conversion through its embedded ICC profile that normalize.fit applies
(docs/normalization.md). Pure functions; the result carries no profile."""

from __future__ import annotations

from collections.abc import Callable
from io import BytesIO

from PIL import Image, ImageChops, ImageCms

# The pairs of profile colour space and image mode that are converted to sRGB; a profile that does not
# match the image's mode is dropped.
_MATCHING = frozenset({("RGB", "RGB"), ("RGB", "RGBA"), ("GRAY", "L"), ("GRAY", "LA"), ("CMYK", "CMYK")})

Conversion = Callable[[Image.Image], Image.Image]


def to_srgb(mode: str, profile: bytes | None) -> tuple[Conversion | None, bool]:
    """None: nothing to do. A profile that is sRGB already, cannot be read or does not match the mode is only
    dropped."""
    embedded = _read_profile(profile)
    space = embedded.profile.xcolor_space.strip() if embedded else ""
    if embedded is not None and (space, mode) in _MATCHING:
        try:
            return _conversion(mode, embedded, space)
        except ImageCms.PyCMSError:  # a profile lcms reads but cannot build a transform from
            pass
    if mode == "CMYK":
        return (lambda im: im.convert("RGB")), False
    return None, False


def _conversion(mode: str, embedded: ImageCms.ImageCmsProfile, space: str) -> tuple[Conversion | None, bool]:
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    intent = ImageCms.Intent.PERCEPTUAL
    if space == "CMYK":
        cmyk = ImageCms.buildTransform(embedded, srgb, "CMYK", "RGB", intent)
        return (lambda im: _transformed(im, cmyk)), True
    if space == "GRAY":
        # A grey profile is a tone curve: read it off a ramp once, then apply it as a lookup table.
        ramp = Image.frombytes("L", (256, 1), bytes(range(256)))
        grey = ImageCms.buildTransform(embedded, srgb, "L", "RGB", intent)
        curve = list(_transformed(ramp, grey).convert("L").tobytes())
        return (lambda im: im.point(curve + list(range(256)) * (len(im.mode) - 1))), True
    if _is_srgb(embedded, srgb):
        return None, False
    rgb = ImageCms.buildTransform(embedded, srgb, mode, mode, intent)
    return (lambda im: _transformed(im, rgb)), True


def _is_srgb(embedded: ImageCms.ImageCmsProfile, srgb: ImageCms.ImageCmsProfile) -> bool:
    # sRGB under another name: 125 colours through it come out as they went in
    levels = (0, 64, 128, 192, 255)
    probe = Image.frombytes(
        "RGB", (125, 1), bytes(v for r in levels for g in levels for b in levels for v in (r, g, b))
    )
    exact = ImageCms.buildTransform(embedded, srgb, "RGB", "RGB", ImageCms.Intent.RELATIVE_COLORIMETRIC)
    differences = ImageChops.difference(_transformed(probe, exact), probe).getextrema()
    return all(isinstance(band, tuple) and band[1] <= 1 for band in differences)


def _read_profile(profile: bytes | None) -> ImageCms.ImageCmsProfile | None:
    if profile is None:
        return None
    try:
        return ImageCms.ImageCmsProfile(BytesIO(profile))
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return None


def _transformed(im: Image.Image, transform: ImageCms.ImageCmsTransform) -> Image.Image:
    out = ImageCms.applyTransform(im, transform)
    if out is None:  # only with inPlace=True
        raise RuntimeError("ImageCms.applyTransform returned no image")
    return out
