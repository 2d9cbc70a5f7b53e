"""Wire shapes of the listings (GET /v1/sessions, GET /v1/sessions/{id}/attachments), apart from wire.py's
so that each stays one idea; their docstrings are their descriptions in GET /openapi.json."""

from __future__ import annotations

import msgspec

from .wire import Attachment


class SessionSummary(msgspec.Struct):
    """A session as a listing shows it: when it was made, last used and expires (null: never), and the
    attachments it holds (images) with their bytes, each object once."""

    session: str
    route: str | None
    created: str  # RFC 3339, UTC
    used: str
    expires: str | None
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
