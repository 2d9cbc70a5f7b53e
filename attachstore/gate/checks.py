"""The admission gate's image checks (SPEC section 4), pure functions run inside a decode worker: no asyncio
and no I/O. The first failure decides the code, so the statements run in the order of the SPEC's tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BytesIO
from math import sqrt

from PIL import Image

from ..config import Limits
from ..errors import InvalidRequest, Rejected
from . import containers, sources
from .containers import HeaderTooDeep, Malformed
from .probe import probe_header, sniff
from .strict import Damaged, reason, strict_pillow

_STORED = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}
_NAMES = _STORED | sources.NAMES
# Pillow's format names. MPO comes out of the JPEG plugin and APNG out of the PNG one.
_DECODED_TYPE = {name.upper(): media_type for media_type, name in _STORED.items()} | {"MPO": "image/jpeg"}
# Other names hosts declare the four formats under, accepted as what they name (SPEC section 4): image/jpg
# (common, though never registered), Internet Explorer's image/pjpeg and image/x-png, what Citrix clients
# send, and APNG's own names (Python's mimetypes gives image/apng for .apng), since APNG counts as PNG.
ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "image/x-citrix-jpeg": "image/jpeg",
    "image/x-citrix-pjpeg": "image/jpeg",
    "image/mpo": "image/jpeg",
    "image/x-png": "image/png",
    "image/x-citrix-png": "image/png",
    "image/apng": "image/png",
    "image/vnd.mozilla.apng": "image/png",
} | sources.ALIASES
# Formats people try to send that are no raster image a model can take, named in the UNSUPPORTED_IMAGE_TYPE
# message.
_OTHER_MAGIC = (
    (b"%PDF", "PDF, a document"),
    (b"8BPS", "a Photoshop document (PSD)"),
    (b"II+\x00", "BigTIFF, a TIFF too large for the gate"),
    (b"MM\x00+", "BigTIFF, a TIFF too large for the gate"),
    (b"\x00\x00\x00\x0cJXL ", "JPEG XL"),
    (b"\xff\x0a", "JPEG XL"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
)
# What the refusals of an unknown format say the gate takes.
_TAKEN = "PNG, JPEG, GIF and WebP are stored, and HEIC, HEIF, AVIF, BMP and TIFF converted to PNG or JPEG"
# How a hint that asks for the image once more ends: what can be read again is read again (a tool's file);
# what a person attached is attached again. The caller says which (precheck's and inspect's `again`).
READ_AGAIN = "read it again"
ATTACH_AGAIN = "attach it again"

# The container walks run on every image of these formats; each returns where the image ends.
_WALKS: dict[str, Callable[[bytes], int]] = {
    "image/png": containers.png_end,
    "image/gif": containers.gif_end,
    "image/webp": containers.webp_end,
}
TRAILING_DATA = ("allow", "reject")


def check_batch(sizes: Sequence[int], limits: Limits) -> None:
    if not sizes:
        raise InvalidRequest("images: at least one image is required")
    if len(sizes) > limits.max_batch_images:
        raise Rejected(
            "TOO_MANY_IMAGES",
            f"{len(sizes)} images in one request; the limit is {limits.max_batch_images}",
            hint=f"send at most {limits.max_batch_images} images per request",
        )
    total = sum(sizes)
    if total > limits.max_batch_bytes:
        raise Rejected(
            "IMAGES_TOO_LARGE",
            f"the images total {total:,} bytes; the limit for a request is {limits.max_batch_bytes:,} bytes",
            hint="send fewer or smaller images per request",
        )


def canonical_type(declared: str) -> str:
    wanted = declared.partition(";")[0].strip().lower()
    return ALIASES.get(wanted, wanted)


def precheck(
    size: int,
    head: bytes,
    declared: str | None,
    limits: Limits,
    *,
    again: str = READ_AGAIN,
    convert: bool = False,
) -> str:
    """`head` is at least the image's first 64 bytes; `again` ends the hints that ask for the image once more
    (READ_AGAIN, ATTACH_AGAIN). Without `convert`, a source (HEIC, HEIF, AVIF, BMP, TIFF) is refused: it can
    be stored only converted."""
    if size == 0:
        raise Rejected(
            "UNSUPPORTED_IMAGE_TYPE",
            "the image is empty (0 bytes)",
            hint=f"the file was empty when it was sent: check that it was written completely, then {again}",
        )
    if size > limits.max_image_bytes:
        raise Rejected(
            "IMAGE_TOO_LARGE",
            f"the image is {size:,} bytes; the limit is {limits.max_image_bytes:,} bytes",
            hint=f"the limit is {limits.max_image_bytes:,} bytes and this image is {size:,} bytes; "
            f"shrink it to at most {limits.max_image_bytes:,} bytes and {again}",
        )
    written = None if declared is None else declared.partition(";")[0].strip().lower()
    wanted = None if declared is None else canonical_type(declared)
    sniffed = sniff(head) or sources.sniff(head)
    if written is not None and wanted not in _NAMES:
        bytes_are = f"; the bytes are {_NAMES[sniffed]}" if sniffed else ""
        raise Rejected(
            "UNSUPPORTED_IMAGE_TYPE",
            # Quoted short: this text can reach a model, and the declared type came from whoever sent it.
            f"the declared media type {written[:80]!r} is not supported; use image/png, image/jpeg, "
            f"image/gif or image/webp, or image/heic, image/heif, image/avif, image/bmp or image/tiff to "
            f"have it converted{bytes_are}",
            hint=_declare(sniffed) if sniffed else _convert(again),
        )
    if sniffed is None:
        what = _describe(head)
        raise Rejected(
            "UNSUPPORTED_IMAGE_TYPE",
            f"the bytes are {what}, not a raster image a model can take; {_TAKEN}"
            if what
            else f"the bytes are not a recognised image format; {_TAKEN}",
            hint=_convert(again),
        )
    if sniffed in sources.NAMES and not convert:
        raise Rejected(
            "UNSUPPORTED_IMAGE_TYPE",
            f"the image is {_NAMES[sniffed]}, which can be stored only converted to PNG or JPEG, and this "
            "admission stores every image exactly as it came",
            hint=_convert(again),
        )
    if wanted is not None and wanted != sniffed and not {wanted, sniffed} <= sources.KIN:
        raise Rejected(
            "IMAGE_TYPE_MISMATCH",
            f"the image is declared as {written} but its bytes are {_NAMES[sniffed]} ({sniffed})",
            hint=_declare(sniffed),
        )
    return sniffed


def _declare(sniffed: str) -> str:
    return f"declare it as {sniffed}, or leave the media type out"


def _convert(again: str) -> str:
    return f"convert it to PNG, JPEG, GIF or WebP and {again}"


def _reencode(again: str) -> str:
    return f"re-encode the image and {again}"


@dataclass(frozen=True, slots=True)
class Inspection:
    media_type: str
    width: int
    height: int
    frames: int


def inspect(
    data: bytes,
    declared: str | None,
    limits: Limits,
    *,
    trailing_data: str = "allow",
    again: str = READ_AGAIN,
    convert: bool = False,
) -> Inspection:
    """Not thread-safe: it sets Pillow's process-wide limits while it runs (a decode worker runs one at a
    time). A source (`convert`) is checked up to its decoder's parse of the header: it is decoded once, by
    its conversion (worker.py)."""
    if trailing_data not in TRAILING_DATA:
        raise ValueError(f"trailing_data must be 'allow' or 'reject', not {trailing_data!r}")
    media_type = precheck(len(data), data, declared, limits, again=again, convert=convert)
    if media_type in sources.NAMES:
        return _inspect_source(data, media_type, limits, again)
    try:
        # Bounded: every read probes the header again, on the event loop (docs/design.md, "Verified reads").
        header = probe_header(data, bounded=True)
    except HeaderTooDeep as e:
        raise Rejected(
            "INVALID_IMAGE", f"the {_NAMES[media_type]} image is malformed: {e}", hint=_reencode(again)
        ) from None
    if header is None:
        raise _invalid(media_type, "the header is truncated or malformed")
    width, height = header.width, header.height
    _check_size(width, height, limits, again)
    with strict_pillow(limits):
        frames, decoded_type = _decode(data, media_type, (width, height), limits, trailing_data, again)
    if decoded_type != media_type:  # cannot happen while one plugin is tried per type; kept as a backstop
        raise Rejected(
            "IMAGE_TYPE_MISMATCH",
            f"the bytes start like {media_type} but decode as {decoded_type}",
            hint=_reencode(again),
        )
    return Inspection(media_type, width, height, frames)


def _check_size(
    width: int, height: int, limits: Limits, again: str, within: tuple[int, int] | None = None
) -> None:
    """`within`: the size of the image that holds a picture of `width` x `height` beside it."""
    if within is not None:
        what = f"the image is {within[0]}x{within[1]} pixels but holds a picture of {width}x{height}"
        hint = f"convert it to PNG or JPEG and {again}"
    else:
        what = f"the image is {width}x{height} pixels"
        hint = f"shrink it to at most {_fit(width, height, limits)} and {again}"
    if max(width, height) > limits.max_side:
        raise Rejected(
            "IMAGE_DIMENSION_TOO_LARGE",
            f"{what}; the limit is {limits.max_side} pixels a side",
            hint=f"the limit is {limits.max_side} pixels a side and this image is {width}x{height}; {hint}",
        )
    if width * height > limits.max_pixels:
        raise Rejected(
            "IMAGE_TOO_MANY_PIXELS",
            f"{what} = {width * height:,} pixels; the limit is {limits.max_pixels:,}",
            hint=f"the limit is {limits.max_pixels:,} pixels and this image has {width * height:,}; {hint}",
        )


def _inspect_source(data: bytes, media_type: str, limits: Limits, again: str) -> Inspection:
    name = _NAMES[media_type]
    try:
        found = sources.read(data, media_type)
    except Malformed as e:
        raise Rejected(
            "INVALID_IMAGE", f"the {name} image is malformed: {e}", hint=_reencode(again)
        ) from None
    _check_size(found.width, found.height, limits, again)
    _check_size(*found.largest, limits, again, within=(found.width, found.height))
    if found.tiles > sources.MAX_TILES:
        raise Rejected(
            "TOO_MANY_FRAMES",
            f"the {name} image is made of {found.tiles:,} tiles, each decoded as an image of its own; the "
            f"limit is {sources.MAX_TILES:,}",
            hint=f"convert it to PNG or JPEG and {again}",
        )
    with strict_pillow(limits):
        try:
            # Only the sniffed format's plugin may open it, as for the stored formats.
            with Image.open(BytesIO(data), formats=[sources.plugin(media_type)]) as im:
                size = im.size
        except Exception as e:  # as in _decode: a bad file must never surface as anything but a code
            raise _invalid(media_type, reason(e)) from None
    if max(size) > max(found.width, found.height) or size[0] * size[1] > found.width * found.height:
        # libheif shows the image turned (irot) and cropped (clap): never larger than its header says
        raise _invalid(
            media_type,
            f"the header says {found.width}x{found.height} but the decoder sees {size[0]}x{size[1]}",
        )
    return Inspection(media_type, found.width, found.height, found.frames)


def _decode(
    data: bytes, media_type: str, size: tuple[int, int], limits: Limits, trailing_data: str, again: str
) -> tuple[int, str | None]:
    try:
        # Only the sniffed format's plugin may open it: no other decoder ever sees the bytes.
        im = Image.open(BytesIO(data), formats=[_NAMES[media_type].upper()])
    except Exception as e:  # Pillow raises many types; a bad file must never surface as anything but a code
        # Where Pillow says only "cannot identify image file", the container walk can say what is wrong.
        raise _invalid(media_type, _container_fault(data, media_type) or reason(e)) from None
    where = ""
    with im:
        try:
            if im.size != size:  # e.g. a GIF whose first frame lies outside the logical screen
                raise Damaged(
                    f"the header says {size[0]}x{size[1]} but the decoder sees {im.width}x{im.height}"
                )
            frames = getattr(im, "n_frames", 1)
            if frames < 1:
                raise Damaged("it has no frames")
            _check_frames(frames, size, limits)
            # A JPEG's segments are walked only to find its end: its decoder checks its own structure.
            if trailing_data == "reject" or media_type in _WALKS:
                end = _end_of_image(data, media_type)  # raises Malformed
                if trailing_data == "reject" and end < len(data):
                    raise _trailing(media_type, len(data) - end, end, again)
            decoded = 0  # pixels of the frames decoded so far
            for index in range(frames):
                where = f"frame {index + 1} of {frames}: " if frames > 1 else ""
                im.seek(index)
                _check_extent(im, decoded, limits)  # a GIF frame can grow the canvas as it is sought
                im.load()
                _check_extent(im, decoded, limits)
                decoded += im.width * im.height
            return frames, _DECODED_TYPE.get(im.format or "")
        except Rejected:
            raise
        except Exception as e:  # Damaged, Malformed, or whatever Pillow raised
            raise _invalid(media_type, where + reason(e)) from None


def _check_frames(frames: int, size: tuple[int, int], limits: Limits) -> None:
    hint = "send a still image or fewer, smaller frames"
    if frames > limits.max_frames:
        raise Rejected(
            "TOO_MANY_FRAMES", f"the image has {frames:,} frames; the limit is {limits.max_frames}", hint=hint
        )
    total = frames * size[0] * size[1]
    if total > limits.max_animation_pixels:
        raise Rejected(
            "TOO_MANY_FRAMES",
            f"{frames} frames of {size[0]}x{size[1]} make {total:,} pixels; the limit for all frames is "
            f"{limits.max_animation_pixels:,}",
            hint=hint,
        )


def _check_extent(im: Image.Image, decoded: int, limits: Limits) -> None:
    # GIF frames may lie outside the logical screen (Pillow grows the canvas) and MPO frames have sizes of
    # their own, so each frame is held to the per-image limits again and the running sum to the animation one.
    width, height = im.size
    if max(width, height) > limits.max_side or width * height > limits.max_pixels:
        raise Damaged(
            f"the frame grows the image to {width}x{height}, past the limits of "
            f"{limits.max_side} pixels a side and {limits.max_pixels:,} pixels"
        )
    if decoded + width * height > limits.max_animation_pixels:
        raise Damaged(
            f"the frames grow to {decoded + width * height:,} pixels, past the "
            f"limit of {limits.max_animation_pixels:,} for all frames"
        )


def _container_fault(data: bytes, media_type: str) -> str | None:
    # only where Pillow is too lenient to tell; a JPEG decoder stops at a missing end marker itself
    walk = _WALKS.get(media_type)
    if walk is None:
        return None
    try:
        walk(data)
    except Malformed as e:
        return str(e)
    return None


def _end_of_image(data: bytes, media_type: str) -> int:
    return _WALKS.get(media_type, containers.jpeg_end)(data)


def _trailing(media_type: str, extra: int, end: int, again: str) -> Rejected:
    follows = "1 byte follows" if extra == 1 else f"{extra:,} bytes follow"
    return Rejected(
        "INVALID_IMAGE",
        f"{follows} the end of the image (the {_NAMES[media_type]} image ends at offset {end:,})",
        hint=f"re-encode the image, or cut it at its end, and {again}",
    )


def _invalid(media_type: str, problem: str) -> Rejected:
    return Rejected("INVALID_IMAGE", f"the {_NAMES[media_type]} image is damaged: {problem}")


def _describe(head: bytes) -> str | None:
    for magic, name in _OTHER_MAGIC:
        if head.startswith(magic):
            return name
    if head[4:8] == b"ftyp":
        return "an ISO media file of no image brand (a video, most likely)"
    if head[:64].lstrip()[:1] == b"<":
        return "text markup (SVG, XML or HTML)"
    return None


def _fit(width: int, height: int, limits: Limits) -> str:
    scale = min(1.0, limits.max_side / max(width, height), sqrt(limits.max_pixels / (width * height)))
    w, h = max(1, int(width * scale)), max(1, int(height * scale))
    while max(w, h) > limits.max_side or w * h > limits.max_pixels:  # float rounding can land one over
        w, h = (w - 1, h) if w >= h else (w, h - 1)
    return f"{w}x{h}"
