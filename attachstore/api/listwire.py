"""Wire shapes of the listings (GET /v1/sessions, GET /v1/sessions/{id}/attachments), apart from wire.py's
so that each stays one idea; their docstrings are their descriptions in GET /openapi.json."""

from __future__ import annotations

import msgspec

from .wire import Attachment


class SessionSummary(msgspec.Struct):
    """A session as a listing shows it: when it was made, last used and expires (null: never) with its idle
    lifetime in seconds (null: none), as GET /v1/sessions/{id} shows them, and the attachments it holds
    (images) with their bytes, each object once."""

    session: str
    route: str | None
    created: str  # RFC 3339, UTC
    last_used: str
    expires: str | None
    ttl: int | None
    images: int
    bytes: int


class SessionPage(msgspec.Struct):
    """A page of the tenant's sessions, newest used first; `next` is the cursor of the next page (null on
    the last one)."""

    sessions: list[SessionSummary]
    next: str | None


class HeldAttachment(msgspec.Struct):
    """A held attachment: its metadata as GET /v1/attachments/{ref}/meta shows it, and when the session
    first held it."""

    attachment: Attachment
    held: str  # RFC 3339, UTC


class AttachmentPage(msgspec.Struct):
    """A page of a session's attachments, oldest held first; `next` as in SessionPage."""

    session: str
    attachments: list[HeldAttachment]
    next: str | None


class TypeFigures(msgspec.Struct):
    objects: int
    bytes: int


class Collectible(msgspec.Struct):
    """What gc would collect now (unheld, unlinked, past the grace), counted in the background: when, and
    how long ago."""

    objects: int
    bytes: int
    counted: str  # RFC 3339, UTC
    age_seconds: float


class LastRun(msgspec.Struct):
    """A maintenance command's last run: when it finished, and what it found (its report's figures)."""

    finished: str  # RFC 3339, UTC
    figures: dict[str, float]


class Stats(msgspec.Struct):
    """The figures of what the caller may see: the whole store (`tenant` null: open mode) or a tenant's
    (its grants, sessions and holds); the figures that belong to the store alone are null for a tenant.
    docs/api.md, "GET /v1/stats", says where each comes from."""

    tenant: str | None
    objects: int
    bytes: int
    saved_bytes: int  # what holding each object once saves over a copy per hold
    held_bytes: int  # each hold counting its object's bytes
    by_type: dict[str, TypeFigures]
    # The entry (user, tool, mcp, command; unknown: before it was recorded) through which the objects were
    # first admitted, each tenant's admission once: a tenant's grants, or every tenant's in the store's.
    by_source: dict[str, TypeFigures]
    quarantined: int
    missing: int
    sessions: int
    expired_sessions: int
    variants: int | None
    previews: int | None
    collectible: Collectible | None  # null for a tenant, and until first counted
    last_gc: LastRun | None
    last_audit: LastRun | None
    free_bytes: int | None  # of the data dir's file system; null on S3 and for a tenant
