"""normalize.fit for animations (GIF, APNG, animated WebP): the same format, frames, timing and disposal,
every frame resized alike until the bytes fit (docs/normalization.md)."""

from __future__ import annotations

from io import BytesIO
from typing import Any

from PIL import Image, ImageFile, PngImagePlugin

from . import resize
from .colour import Conversion, to_srgb
from .encode import PNG_LEVEL
from .target import Normalized, Target, Unfittable, steps

FORMATS = {"image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}
_WEBP_QUALITY = 80  # animations only shrink: a ladder would encode every frame five times a round
_ROUNDS = 8  # as many as for a still image


def fit_animation(
    im: ImageFile.ImageFile,
    media_type: str,
    target: Target,
    orientation: int,
    profile: bytes | None,
    metadata: bool,
) -> Normalized:
    size = resize.upright(im.size, orientation)
    want = resize.bounded(size, target)
    loop, default_image = im.info.get("loop"), bool(im.info.get("default_image"))
    colours: dict[str, tuple[Conversion | None, bool]] = {}  # by frame mode: a GIF's frames change mode
    for _ in range(_ROUNDS):
        frames, durations, disposals = [], [], []
        for index in range(getattr(im, "n_frames", 1)):
            im.seek(index)
            im.load()  # a WebP frame's duration is known once it is decoded
            durations.append(int(im.info.get("duration", 0)))
            disposals.append(int(getattr(im, "disposal_method", None) or im.info.get("disposal") or 0))
            source = resize.working_mode(im)
            if source.mode not in colours:
                colours[source.mode] = to_srgb(source.mode, profile)
            colour = colours[source.mode][0]
            stored = resize.upright(want, orientation)
            frames.append(resize.prepare(source, im, stored, orientation, colour, None))
        frames = _uniform(frames, media_type)
        options = _options(media_type, durations, disposals, loop, default_image)
        out = BytesIO()
        frames[0].save(out, FORMATS[media_type], append_images=frames[1:], **options)
        if out.tell() <= target.max_bytes:
            converted = any(done for _, done in colours.values())
            done = steps(orientation, converted, metadata, want != size, palette=False)
            return Normalized(out.getvalue(), media_type, frames[0].width, frames[0].height, done)
        smaller = resize.shrunk(want)
        if smaller == want:
            break
        want = smaller
    raise Unfittable(
        f"the animation cannot be brought within {target.max_bytes:,} bytes: at {frames[0].width}x"
        f"{frames[0].height} pixels, its {len(frames)} frames still take {out.tell():,} bytes"
    )


def _options(
    media_type: str, durations: list[int], disposals: list[int], loop: int | None, default_image: bool
) -> dict[str, Any]:
    options: dict[str, Any] = {"save_all": True, "duration": durations}
    if loop is not None:  # a GIF without a loop count plays once
        options["loop"] = loop
    if media_type == "image/webp":
        return options | {"quality": _WEBP_QUALITY, "method": 4}
    if media_type == "image/gif":
        return options | {"disposal": disposals}
    # An APNG's first image may be a default image, outside the animation and without timing of its own.
    # Every frame read is the whole canvas, already composed: it replaces the one before (OP_SOURCE).
    skip = 1 if default_image else 0
    blends = [PngImagePlugin.Blend.OP_SOURCE] * (len(durations) - skip)
    options |= {"duration": durations[skip:], "disposal": disposals[skip:], "blend": blends}
    return options | {"default_image": default_image, "compress_level": PNG_LEVEL}


def _uniform(frames: list[Image.Image], media_type: str) -> list[Image.Image]:
    alpha = any(resize.has_alpha(frame) for frame in frames)
    mode = "RGBA" if alpha else "RGB"
    frames = [f if f.mode == mode else f.convert(mode) for f in frames]
    return [_gif_frame(f) for f in frames] if media_type == "image/gif" else frames


def _gif_frame(im: Image.Image) -> Image.Image:
    # fast octree: median cut is far slower (docs/performance.md, "The gate's walks and figures")
    paletted = (im.convert("RGB") if im.mode == "RGBA" else im).quantize(255, Image.Quantize.FASTOCTREE)
    if im.mode == "RGBA":
        palette = paletted.getpalette() or []
        paletted.putpalette(palette + [0] * (768 - len(palette)))
        # a GIF pixel is opaque or not: index 255 is transparent where alpha is under half
        paletted.paste(255, mask=im.getchannel("A").point(lambda a: 255 if a < 128 else 0))
        paletted.info["transparency"] = 255
    return paletted
