"""Normalization at admission and route-sized request variants, as pure functions (docs/normalization.md).

They run inside a decode worker process (worker.py): no asyncio and no I/O. The caller has already passed the
input through gate.inspect, so it is a whole, decodable image of the media type it names, and it passes the
output through the gate again, with the target's limits, before storing it.

`fit` decodes once, applies the EXIF orientation, converts to sRGB, drops all metadata, resizes and encodes
until the target is met. (Removing metadata without touching the pixels is metadata.py's strip_metadata.) It
is deterministic (no clock, no randomness, fixed encoder settings): outputs are content-addressed and cached,
so the same input must always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from math import sqrt
from typing import Any

from PIL import Image, ImageChops, ImageCms, ImageFile, PngImagePlugin

from .metadata import exif_orientation, has_metadata, quiet_pillow

_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WEBP"}
_JPEG_LADDER = (90, 85, 75, 65, 50)
_WEBP_LADDER = (90, 80, 70, 60, 50)
_ANIMATED_WEBP_QUALITY = 80  # animations only shrink: a ladder would encode every frame five times a round
_SHRINK = 0.8  # a round takes a fifth off both sides
_ROUNDS = 8  # the last round's sides are about a fifth of the first's (0.8 ** 7)
_PNG_LEVEL = 6  # zlib's default: most of what level 9 saves, in a fraction of its time
_LOSSLESS = ("image/png", "image/gif")  # screenshots and diagrams: a preview of one is tried as a PNG first
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
# The pairs of profile colour space and image mode that are converted to sRGB; a profile that does not
# match the image's mode is dropped.
_MATCHING = frozenset({("RGB", "RGB"), ("RGB", "RGBA"), ("GRAY", "L"), ("GRAY", "LA"), ("CMYK", "CMYK")})


class Unfittable(Exception):
    """The image cannot be brought within the target; str(e) is a one-line message a user or model can
    read."""


@dataclass(frozen=True, slots=True)
class Target:
    max_side: int  # pixels on the longest side
    max_pixels: int  # width * height
    max_bytes: int  # encoded size


@dataclass(frozen=True, slots=True)
class Normalized:
    data: bytes
    media_type: str  # image/png | image/jpeg | image/webp | image/gif
    width: int
    height: int
    # What was done, in this order: "orientation", "colour", "metadata", "resized", "reencoded".
    steps: tuple[str, ...]


def fit(data: bytes, media_type: str, target: Target, *, preview: bool = False) -> Normalized:
    """The image upright, in sRGB, without metadata, resized (Lanczos, never up) within max_side and
    max_pixels and encoded within max_bytes; raises Unfittable when a few shrink rounds do not get there.

    A still image becomes a PNG (a palette PNG for 256 colours or fewer) when it has alpha or few colours and
    that fits, else a JPEG (opaque) or a lossy WebP (alpha) at the first quality of a ladder that fits; if
    none does, its sides shrink by a fifth and the ladder runs again. An animation (GIF, APNG, animated WebP)
    keeps its format, frames, durations, loop count and disposal, and only shrinks. Of a JPEG with several
    pictures (MPO) only the first is used. The "metadata" step means the input held something
    strip_metadata removes, or an ICC profile. Pillow's decompression-bomb check stays as the caller has set
    it (Image.MAX_IMAGE_PIXELS and the warning filters).

    A `preview` (for host UIs, docs/api.md) is always a still image: the first frame of an animation. A PNG
    or GIF source (screenshots, diagrams) is tried as a PNG first whatever its colours, so that its text
    stays sharp."""
    # Pillow's warnings about metadata it cannot read are silenced: the gate has already decoded every frame.
    with quiet_pillow(), Image.open(BytesIO(data), formats=[_FORMATS[media_type]]) as im:
        orientation = exif_orientation(im.getexif())
        profile = im.info.get("icc_profile") or None
        metadata = profile is not None or has_metadata(data, media_type)
        if not preview and media_type != "image/jpeg" and getattr(im, "n_frames", 1) > 1:
            return _fit_animation(im, media_type, target, orientation, profile, metadata)
        lossless = preview and media_type in _LOSSLESS
        return _fit_still(im, target, orientation, profile, metadata, lossless)


def _fit_still(
    im: ImageFile.ImageFile,
    target: Target,
    orientation: int,
    profile: bytes | None,
    metadata: bool,
    lossless: bool = False,
) -> Normalized:
    size = _upright(im.size, orientation)
    want = _bounded(size, target)
    box = None
    if im.format in ("JPEG", "MPO") and want != size:
        # libjpeg decodes at 1/2, 1/4 or 1/8 scale in the DCT, far faster than decoding it all; Pillow picks
        # the smallest scale still at least the wanted size, and the box maps the result onto the picture.
        drafted = im.draft(None, _upright(want, orientation))
        box = drafted[1] if drafted else None
    im.load()
    source = _opaque(_working_mode(im))
    colour, converted = _colour(source.mode, profile)
    for _ in range(_ROUNDS):
        frame = _prepare(source, im, _upright(want, orientation), orientation, colour, box)
        encoded = _encode_still(frame, target.max_bytes, lossless)
        if len(encoded.data) <= target.max_bytes:
            steps = _steps(orientation, converted, metadata, want != size)
            return Normalized(encoded.data, encoded.media_type, frame.width, frame.height, steps)
        smaller = _shrunk(want)
        if smaller == want:
            break
        want = smaller
    raise Unfittable(
        f"the image cannot be brought within {target.max_bytes:,} bytes: at {frame.width}x{frame.height} "
        f"pixels, as {encoded.how}, it still takes {len(encoded.data):,} bytes"
    )


def _fit_animation(
    im: ImageFile.ImageFile,
    media_type: str,
    target: Target,
    orientation: int,
    profile: bytes | None,
    metadata: bool,
) -> Normalized:
    size = _upright(im.size, orientation)
    want = _bounded(size, target)
    loop, default_image = im.info.get("loop"), bool(im.info.get("default_image"))
    colours: dict[str, tuple[_Colour | None, bool]] = {}  # by frame mode: a GIF's frames change mode
    for _ in range(_ROUNDS):
        frames, durations, disposals = [], [], []
        for index in range(getattr(im, "n_frames", 1)):
            im.seek(index)
            im.load()  # a WebP frame's duration is known once it is decoded
            durations.append(int(im.info.get("duration", 0)))
            disposals.append(int(getattr(im, "disposal_method", None) or im.info.get("disposal") or 0))
            source = _working_mode(im)
            if source.mode not in colours:
                colours[source.mode] = _colour(source.mode, profile)
            colour = colours[source.mode][0]
            frames.append(_prepare(source, im, _upright(want, orientation), orientation, colour, None))
        frames = _uniform(frames, media_type)
        options = _animation_options(media_type, durations, disposals, loop, default_image)
        out = BytesIO()
        frames[0].save(out, _FORMATS[media_type], append_images=frames[1:], **options)
        if out.tell() <= target.max_bytes:
            converted = any(done for _, done in colours.values())
            steps = _steps(orientation, converted, metadata, want != size)
            return Normalized(out.getvalue(), media_type, frames[0].width, frames[0].height, steps)
        smaller = _shrunk(want)
        if smaller == want:
            break
        want = smaller
    raise Unfittable(
        f"the animation cannot be brought within {target.max_bytes:,} bytes: at {frames[0].width}x"
        f"{frames[0].height} pixels, its {len(frames)} frames still take {out.tell():,} bytes"
    )


def _animation_options(
    media_type: str, durations: list[int], disposals: list[int], loop: int | None, default_image: bool
) -> dict[str, Any]:
    options: dict[str, Any] = {"save_all": True, "duration": durations}
    if loop is not None:  # a GIF without a loop count plays once
        options["loop"] = loop
    if media_type == "image/webp":
        return options | {"quality": _ANIMATED_WEBP_QUALITY, "method": 4}
    if media_type == "image/gif":
        return options | {"disposal": disposals}
    # An APNG's first image may be a default image, outside the animation and without timing of its own.
    # Every frame read is the whole canvas, already composed: it replaces the one before (OP_SOURCE).
    skip = 1 if default_image else 0
    blends = [PngImagePlugin.Blend.OP_SOURCE] * (len(durations) - skip)
    options |= {"duration": durations[skip:], "disposal": disposals[skip:], "blend": blends}
    return options | {"default_image": default_image, "compress_level": _PNG_LEVEL}


def _upright(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """A stored size as displayed, or a displayed size as stored: orientations 5-8 swap the sides."""
    return (size[1], size[0]) if orientation >= 5 else size


def _bounded(size: tuple[int, int], target: Target) -> tuple[int, int]:
    """The largest size within max_side and max_pixels, never larger than `size`, whose shorter side is the
    longer side's scaled to the same aspect ratio and rounded (at least 1 pixel)."""
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


def _shrunk(size: tuple[int, int]) -> tuple[int, int]:
    return max(1, round(size[0] * _SHRINK)), max(1, round(size[1] * _SHRINK))


def _working_mode(im: Image.Image) -> Image.Image:
    """`im` in L, LA, RGB, RGBA or CMYK, the modes every later step takes; `im` itself when it is in one."""
    mode = im.mode
    if mode in ("L", "RGB") and "transparency" in im.info:  # a tRNS colour key
        return im.convert(mode + "A")
    if mode in ("L", "LA", "RGB", "RGBA", "CMYK"):
        return im
    if mode.startswith("I"):  # 16-bit greyscale, which convert("L") would clip rather than scale
        return im.point(lambda v: v / 257 + 0.5).convert("L")
    if mode == "1":
        return im.convert("L")
    return im.convert("RGBA" if im.has_transparency_data else "RGB")  # P, PA, and anything rarer


def _opaque(im: Image.Image) -> Image.Image:
    """`im` without its alpha band when every pixel is fully opaque."""
    if im.mode in ("LA", "RGBA") and not _has_alpha(im):
        return im.convert(im.mode[:-1])
    return im


def _has_alpha(im: Image.Image) -> bool:
    """Whether some pixel is not fully opaque."""
    return im.mode in ("LA", "RGBA") and im.getchannel("A").getextrema() != (255, 255)


_Colour = Callable[[Image.Image], Image.Image]


def _colour(mode: str, profile: bytes | None) -> tuple[_Colour | None, bool]:
    """The conversion of a `mode` image with this embedded profile to sRGB (None: nothing to do), and
    whether it goes through the profile. A profile that is sRGB already, cannot be read or does not match
    the mode is only dropped. CMYK becomes RGB through its profile, or without one by Pillow's formula."""
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


def _conversion(mode: str, embedded: ImageCms.ImageCmsProfile, space: str) -> tuple[_Colour | None, bool]:
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
    """Whether an RGB profile is sRGB under another name: 125 colours through it come out as they went in."""
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


def _prepare(
    source: Image.Image,
    opened: Image.Image,
    stored: tuple[int, int],
    orientation: int,
    colour: _Colour | None,
    box: tuple[float, float, float, float] | None,
) -> Image.Image:
    """`source` resized to `stored` (a size in the stored orientation), in sRGB and upright: a new image
    with empty info, since the encoders take a profile, a comment or a transparency from an image's info."""
    frame = source
    if stored != source.size or box is not None:
        frame = frame.resize(stored, Image.Resampling.LANCZOS, box=box)
    if colour is not None:
        frame = colour(frame)
    if orientation != 1:
        frame = frame.transpose(_TRANSPOSE[orientation])
    if frame is opened:
        frame = frame.copy()
    frame.info = {}
    return frame


def _steps(orientation: int, converted: bool, metadata: bool, resized: bool) -> tuple[str, ...]:
    done = {"orientation": orientation != 1, "colour": converted, "metadata": metadata, "resized": resized}
    return (*(step for step, yes in done.items() if yes), "reencoded")


@dataclass(frozen=True, slots=True)
class _Encoded:
    data: bytes
    media_type: str
    how: str  # for the message when nothing fits: "a PNG", "a JPEG of quality 50"


def _encode_still(im: Image.Image, max_bytes: int, lossless: bool = False) -> _Encoded:
    """The first encoding that fits within max_bytes, else the last one tried (the lowest quality). A PNG
    is tried first for alpha, few colours, or when `lossless` asks for it."""
    alpha = im.mode in ("LA", "RGBA")
    colours = im.getcolors(256)
    if alpha or colours is not None or lossless:
        encoded = _Encoded(
            _save(_palette(im, colours), "PNG", compress_level=_PNG_LEVEL), "image/png", "a PNG"
        )
        if len(encoded.data) <= max_bytes:
            return encoded
    for quality in _WEBP_LADDER if alpha else _JPEG_LADDER:
        if alpha:
            data = _save(im, "WEBP", quality=quality, method=4, alpha_quality=100)
            encoded = _Encoded(data, "image/webp", f"a WebP of quality {quality}")
        else:
            data = _save(im, "JPEG", quality=quality, optimize=True, subsampling="4:2:0")
            encoded = _Encoded(data, "image/jpeg", f"a JPEG of quality {quality}")
        if len(data) <= max_bytes:
            break
    return encoded


def _palette(im: Image.Image, colours: list[tuple[int, Any]] | None) -> Image.Image:
    """`im` as a palette image of exactly its colours; `im` itself when it has more than 256, is greyscale
    (one byte a pixel already), or would not come out exact: one colour at two levels of partial alpha,
    which a quantizer of RGB cannot tell apart, or a colour the quantizer moved."""
    if colours is None or im.mode not in ("RGB", "RGBA"):
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


def _uniform(frames: list[Image.Image], media_type: str) -> list[Image.Image]:
    """Frames in one mode (RGBA if any has alpha, else RGB), as a GIF's palette frames for a GIF."""
    alpha = any(_has_alpha(frame) for frame in frames)
    mode = "RGBA" if alpha else "RGB"
    frames = [f if f.mode == mode else f.convert(mode) for f in frames]
    return [_gif_frame(f) for f in frames] if media_type == "image/gif" else frames


def _gif_frame(im: Image.Image) -> Image.Image:
    """A palette frame of up to 255 colours (fast octree: median cut takes a second for a 500x500 frame);
    with alpha, index 255 is transparent where alpha is under half, since a GIF pixel is opaque or not."""
    paletted = (im.convert("RGB") if im.mode == "RGBA" else im).quantize(255, Image.Quantize.FASTOCTREE)
    if im.mode == "RGBA":
        palette = paletted.getpalette() or []
        paletted.putpalette(palette + [0] * (768 - len(palette)))
        paletted.paste(255, mask=im.getchannel("A").point(lambda a: 255 if a < 128 else 0))
        paletted.info["transparency"] = 255
    return paletted


def _save(im: Image.Image, fmt: str, **options: Any) -> bytes:
    out = BytesIO()
    im.save(out, fmt, **options)
    return out.getvalue()
