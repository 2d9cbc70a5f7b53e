"""Normalization at admission and route-sized request variants (docs/normalization.md), run in a decode worker
on an input that passed checks.inspect; the output passes the gate again. Deterministic (no clock, no
randomness, fixed encoder settings): outputs are content-addressed and cached."""

from __future__ import annotations

from io import BytesIO

from PIL import Image, ImageFile

from . import encode, resize, sources
from .animation import FORMATS, fit_animation
from .character import screenshot_like
from .colour import to_srgb
from .metadata import exif_orientation, has_metadata, quiet_pillow
from .target import Normalized, Target, Unfittable, steps

__all__ = ["Normalized", "Target", "Unfittable", "fit"]

_FORMATS = FORMATS | {"image/jpeg": "JPEG"}
_ROUNDS = 8  # the last round's sides are about a fifth of the first's (0.8 ** 7)
_LOSSLESS = (
    "image/png",
    "image/gif",
)  # screenshots and diagrams: a preview of one is a PNG whatever its pixels


def fit(data: bytes, media_type: str, target: Target, *, preview: bool = False) -> Normalized:
    """Raises Unfittable when a few shrink rounds do not get there. Pillow's decompression-bomb check stays as
    the caller has set it. A source (sources.NAMES) becomes a still PNG or JPEG: its primary image, first
    frame or first page, the steps led by "converted"."""
    if media_type in sources.NAMES:
        return _convert(data, media_type, target)
    # Pillow's warnings about metadata it cannot read are silenced: the gate has already decoded every frame.
    with quiet_pillow(), Image.open(BytesIO(data), formats=[_FORMATS[media_type]]) as im:
        orientation = exif_orientation(im.getexif())
        profile = im.info.get("icc_profile") or None
        metadata = profile is not None or has_metadata(data, media_type)
        if not preview and media_type != "image/jpeg" and getattr(im, "n_frames", 1) > 1:
            return fit_animation(im, media_type, target, orientation, profile, metadata)
        lossless = preview and media_type in _LOSSLESS
        return _fit_still(im, target, orientation, profile, metadata, lossless)


def _convert(data: bytes, media_type: str, target: Target) -> Normalized:
    # Decoded here for the first time (checks.inspect read its headers only). The orientation is read once
    # it is: libheif applies the HEIF transforms (irot, imir, clap) and leaves the EXIF orientation at 1,
    # Pillow's TIFF plugin turns the image upright as it loads and drops the tag, its AVIF plugin gives irot
    # and imir as the EXIF orientation.
    more = sources.read(data, media_type).frames > 1
    with quiet_pillow(), Image.open(BytesIO(data), formats=[sources.plugin(media_type)]) as im:
        # pi-heif keeps the orientation it reset as "original_orientation"
        declared = im.info.get("original_orientation") or exif_orientation(im.getexif())
        im.load()
        orientation = exif_orientation(im.getexif())
        profile = im.info.get("icc_profile") or None
        metadata = any(im.info.get(key) for key in ("icc_profile", "exif", "xmp", "photoshop"))
        out = _fit_still(im, target, orientation, profile, metadata)
    turned = ("orientation",) if declared != orientation else ()  # by the plugin, as it loaded
    steps = ("converted", *(("first_frame",) if more else ()), *turned, *out.steps)
    return Normalized(out.data, out.media_type, out.width, out.height, steps)


def _fit_still(
    im: ImageFile.ImageFile,
    target: Target,
    orientation: int,
    profile: bytes | None,
    metadata: bool,
    lossless: bool = False,
) -> Normalized:
    size = resize.upright(im.size, orientation)
    want = resize.bounded(size, target)
    box = None
    if im.format in ("JPEG", "MPO") and want != size:
        # libjpeg decodes at 1/2, 1/4 or 1/8 scale in the DCT, far faster than decoding it all; Pillow picks
        # the smallest scale still at least the wanted size, and the box maps the result onto the picture.
        drafted = im.draft(None, resize.upright(want, orientation))
        box = drafted[1] if drafted else None
    im.load()
    source = resize.opaque(resize.working_mode(im))
    kind: encode.Kind = "png" if lossless else _kind(source, im.format)
    colour, converted = to_srgb(source.mode, profile)
    for _ in range(_ROUNDS):
        frame = resize.prepare(source, im, resize.upright(want, orientation), orientation, colour, box)
        encoded = encode.still(frame, target.max_bytes, kind)
        if encoded.data is not None:
            done = steps(orientation, converted, metadata, want != size, encoded.palette)
            return Normalized(encoded.data, encoded.media_type, frame.width, frame.height, done)
        smaller = resize.shrunk(want)
        if smaller == want:
            break
        want = smaller
    raise Unfittable(
        f"the image cannot be brought within {target.max_bytes:,} bytes: at {frame.width}x{frame.height} "
        f"pixels, as {encoded.how}, it is still larger"
    )


def _kind(source: Image.Image, source_format: str | None) -> encode.Kind:
    if screenshot_like(source):
        return "png"
    if source_format == "WEBP":
        return "webp"
    return "png" if resize.has_alpha(source) else "jpeg"
