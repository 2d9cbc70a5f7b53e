"""What the client sends and gets back: the answers of the HTTP API (docs/api.md) as typed values.

Decoding ignores fields it does not know, so a newer daemon that adds a field does not break an older client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

Source = Literal["user", "tool", "mcp", "command"]
Provider = Literal["openai-chat", "openai-responses", "anthropic", "gemini"]


class Image(msgspec.Struct, frozen=True):
    """One image to admit. `media_type` is the declared type (checked against the bytes; None: not declared);
    `name` the display name (the daemon keeps its last path component)."""

    data: bytes
    media_type: str | None = None
    name: str | None = None


class OriginalImage(msgspec.Struct, frozen=True):
    media_type: str
    bytes: int
    width: int
    height: int


class Normalized(msgspec.Struct, frozen=True):
    """What admission did to the upload before storing it (the daemon's [admission] oversize = "fit" or
    strip_metadata = true)."""

    original: OriginalImage
    steps: list[str]


class Attachment(msgspec.Struct, frozen=True):
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None
    normalized: Normalized | None = None  # None: the stored bytes are the upload's


class Diagnostic(msgspec.Struct, frozen=True):
    """Why one image of a soft-rejected batch was dropped; `code` is None for a valid image."""

    index: int
    media_type: str | None
    name: str | None
    code: str | None
    message: str
    hint: str | None


class Admission(msgspec.Struct, frozen=True):
    """The answer of an admission. `degraded` (sources `tool` and `mcp` only): nothing was stored, and `text`
    says why, for the model; return it as the tool's result."""

    attachments: list[Attachment]
    degraded: bool = False
    diagnostics: list[Diagnostic] = []
    text: str | None = None

    @property
    def refs(self) -> list[str]:
        return [a.ref for a in self.attachments]


class McpResult(Admission, frozen=True, kw_only=True):
    """The answer of `admit_mcp_result`: the admission of the result's images (one attachment per image, in
    content order), and `result`, the CallToolResult with each image a `{"type": "image", "ref"}` block,
    ready for the log and for render; when `degraded`, the images became `text`, for the model."""

    result: dict[str, Any]


class Blob(msgspec.Struct, frozen=True):
    """A read with its headers. `data` is None when the daemon answered 304 (the caller holds the bytes)."""

    ref: str
    data: bytes | None
    media_type: str | None
    etag: str | None

    @property
    def not_modified(self) -> bool:
        return self.data is None


class Session(msgspec.Struct, frozen=True):
    id: str = msgspec.field(name="session")
    route: str | None
    holds: list[str]  # in the order they were first held
    created: datetime
    ttl: int | None = None  # seconds of idle lifetime, renewed by every use; None: kept until deleted
    last_used: datetime | None = None  # made, or last renewed (None from a daemon older than lifetimes)
    expires: datetime | None = None  # last_used + ttl: gc then releases the session


class Released(msgspec.Struct, frozen=True):
    session: str
    released: int


class RouteInfo(msgspec.Struct, frozen=True):
    id: str  # a route id; for a catalog entry its id or its pattern ("claude-*")
    input_modalities: list[str]
    provider: str | None = None
    max_request_image_bytes: int | None = None
    max_request_images: int | None = None
    max_request_side: int | None = None
    max_request_pixels: int | None = None
    max_request_bytes: int | None = None
    declared_by: str = "config"  # "config", or "catalog" (the built-in catalog)
    source: str | None = None  # a catalog entry: where its claim comes from
    replaces: str | None = None  # a configured route: the catalog entry its id would otherwise have

    @property
    def vision(self) -> bool:
        return "image" in self.input_modalities


class Routes(msgspec.Struct, frozen=True):
    routes: list[RouteInfo]
    catalog: str | None = None
    policy: str | None = None


class RouteResolution(msgspec.Struct, frozen=True):
    """How the daemon resolves one model id: `route` is None (and `accepts_images` None) when unknown."""

    model: str
    accepts_images: bool | None = None
    route: RouteInfo | None = None
    matched: str | None = None


class Summary(msgspec.Struct, frozen=True):
    included: int
    omitted: int
    unavailable: int
    base64_bytes: int
    estimated_image_tokens: int


class Rendered(msgspec.Struct, frozen=True):
    """`body` holds the request fields to merge into the provider call (docs/render.md)."""

    provider: str
    body: dict[str, Any]
    summary: Summary


class Status(msgspec.Struct, frozen=True):
    status: str


class ErrorBody(msgspec.Struct, frozen=True):
    code: str
    message: str
    index: int | None = None
    hint: str | None = None


class ErrorAnswer(msgspec.Struct, frozen=True):
    error: ErrorBody


# --- listings and totals (GET /v1/sessions, /v1/sessions/{id}/attachments, /v1/stats) ---


class SessionSummary(msgspec.Struct, frozen=True):
    """A session as GET /v1/sessions lists it: `expires` None for never; `images` the attachments it holds,
    `bytes` theirs."""

    id: str = msgspec.field(name="session")
    route: str | None = None
    created: datetime | None = None
    last_used: datetime | None = None
    expires: datetime | None = None
    ttl: int | None = None  # seconds idle before it expires; None: no lifetime
    images: int = 0
    bytes: int = 0


class SessionPage(msgspec.Struct, frozen=True):
    sessions: list[SessionSummary]
    next: str | None = None  # the cursor of the next page


class HeldAttachment(msgspec.Struct, frozen=True):
    attachment: Attachment
    held: datetime  # when the session first held it


class AttachmentPage(msgspec.Struct, frozen=True):
    session: str
    attachments: list[HeldAttachment]
    next: str | None = None


class TypeFigures(msgspec.Struct, frozen=True):
    objects: int
    bytes: int


class Collectible(msgspec.Struct, frozen=True):
    objects: int
    bytes: int
    counted: datetime
    age_seconds: float


class LastRun(msgspec.Struct, frozen=True):
    finished: datetime
    figures: dict[str, float]


class Stats(msgspec.Struct, frozen=True):
    """GET /v1/stats: `tenant` None when the figures are the whole store's (open mode); the store's own
    figures (variants, previews, collectible, last_gc, last_audit, free_bytes) are None for a tenant."""

    objects: int
    bytes: int
    tenant: str | None = None
    saved_bytes: int = 0
    held_bytes: int = 0
    by_type: dict[str, TypeFigures] = {}
    by_source: dict[str, TypeFigures] = {}  # user, tool, mcp, command; unknown: before it was recorded
    quarantined: int = 0
    missing: int = 0
    sessions: int = 0
    expired_sessions: int = 0
    variants: int | None = None
    previews: int | None = None
    collectible: Collectible | None = None
    last_gc: LastRun | None = None
    last_audit: LastRun | None = None
    free_bytes: int | None = None
