"""What the service answers with about an attachment (`ImageRef`), for admissions and reads alike."""

from __future__ import annotations

from dataclasses import dataclass

from ..gate import Original
from ..index import ObjectRow


@dataclass(frozen=True, slots=True)
class Normalization:
    """What admission did to an upload before storing it (docs/normalization.md)."""

    original: Original  # the upload as it came
    steps: tuple[str, ...]  # "orientation", "colour", "metadata", "resized", "palette", "reencoded"


@dataclass(frozen=True, slots=True)
class ImageRef:
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None
    normalized: Normalization | None = None


def image_ref(row: ObjectRow, name: str | None = None) -> ImageRef:
    return ImageRef(row.ref, row.media_type, row.bytes, row.width, row.height, row.frames, name or row.name)
