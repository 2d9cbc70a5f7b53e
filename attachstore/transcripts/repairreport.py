"""What repair says of each file: the images kept, fitted (from what to what) and turned to text (and why),
the sizes, and the largest request the resumed session will send against the provider's limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .reports import FileReport


@dataclass(frozen=True, slots=True)
class Shape:
    media_type: str
    width: int
    height: int
    bytes: int

    def summary(self) -> dict[str, Any]:
        return {
            "media_type": self.media_type,
            "width": self.width,
            "height": self.height,
            "bytes": self.bytes,
        }

    def __str__(self) -> str:
        size = f" {self.width}x{self.height}" if self.width else ""
        return f"{self.media_type}{size} {self.bytes:,} B"


@dataclass(frozen=True, slots=True)
class FittedImage:
    line: int
    why: str
    before: Shape | None  # None: the bytes do not say (a type they do not hold)
    after: Shape
    ref: str

    def summary(self) -> dict[str, Any]:
        before = None if self.before is None else self.before.summary()
        return {
            "line": self.line,
            "why": self.why,
            "from": before,
            "to": self.after.summary(),
            "ref": self.ref,
        }


@dataclass(frozen=True, slots=True)
class TextImage:
    line: int
    code: str
    message: str
    ref: str | None  # where it is stored, for one left out of the request's limits

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.line, "code": self.code, "message": self.message}
        if self.ref is not None:
            out["ref"] = self.ref
        return out


@dataclass
class Request:
    """The largest request a resume sends: its images, their base64 and the body (estimated from the file's
    text), against the provider's limits."""

    images: int = 0
    image_base64: int = 0
    body: int = 0
    limits: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "image_base64": self.image_base64,
            "body": self.body,
            "limits": self.limits,
        }


@dataclass
class RepairReport(FileReport):
    model: str | None = None
    backup: str | None = None
    kept: int = 0  # distinct images the provider takes as they are
    left: int = 0  # images left as they are: inside JSON text held in a string, or cut short
    fitted: list[FittedImage] = field(default_factory=list)
    text: list[TextImage] = field(default_factory=list)
    request: Request = field(default_factory=Request)

    def summary(self) -> dict[str, Any]:
        images = {
            "kept": self.kept,
            "fitted": [f.summary() for f in self.fitted],
            "text": [t.summary() for t in self.text],
            "left": self.left,
        }
        named = ("output", "format", "model", "session", "backup", "reason", "message")
        return self.summarized(named, {"images": images, "request": self.request.summary()})
