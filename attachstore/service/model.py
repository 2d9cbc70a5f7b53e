"""The service's value objects: what an admission is handed (`Upload`) and what the service answers about an
attachment (`ImageRef`)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import gate
from ..gate import Original, SharedBuffer
from ..index import ObjectRow


@dataclass(frozen=True, slots=True)
class Normalization:
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


@dataclass(frozen=True, slots=True)
class Upload:
    """`size` is the decoded size (an edge that stopped buffering an oversized part passes its full size);
    `shared` bytes reach the decode worker without a copy."""

    payload: str | bytes | SharedBuffer
    size: int
    media_type: str | None = None
    name: str | None = None

    @classmethod
    def of_bytes(cls, data: bytes, media_type: str | None = None, name: str | None = None) -> Upload:
        return cls(data, len(data), media_type, name)

    @classmethod
    def of_base64(cls, text: str, media_type: str | None = None, name: str | None = None) -> Upload:
        return cls(text, gate.base64_decoded_size(text), media_type, name)
