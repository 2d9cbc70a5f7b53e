"""What a store holds, a page at a time: a tenant's sessions (newest used first) and a session's attachments
(oldest held first), each page with an opaque cursor to the next (docs/api.md, "Listings")."""

from __future__ import annotations

import base64
import binascii
import re
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

from ..config import Config
from ..errors import InvalidRequest, SessionNotFound
from ..index import Index, SessionKey
from ..index.listings import HoldAt, SessionAt, SessionEntry
from .model import ImageRef, image_ref
from .sessions import check_session_id

T = TypeVar("T")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
LIMIT_HINT = f"limit: 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"
MAX_CURSOR = 512  # characters: a cursor this listing gave is far shorter
_PREFIX = re.compile(r"[A-Za-z0-9._:-]{0,128}")
_CURSOR_HINT = "pass `next` from the previous page as it came, to the same listing"


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next: str | None  # the cursor of the next page; None on the last one


@dataclass(frozen=True, slots=True)
class Held:
    image: ImageRef
    held_at: float


def encode_cursor(kind: str, at: float, key: str) -> str:
    raw = msgspec.json.encode([kind, at, key])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, text: str) -> tuple[float, str]:
    try:
        if len(text) > MAX_CURSOR:
            raise ValueError
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        found, at, key = msgspec.json.decode(raw, type=tuple[str, float, str])
        if found != kind:
            raise ValueError
    except (ValueError, binascii.Error, msgspec.DecodeError):
        raise InvalidRequest(f"not a cursor of this listing: {text[:40]!r}", hint=_CURSOR_HINT) from None
    return at, key


def check_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit: {limit} is out of range", hint=LIMIT_HINT)
    return limit


def check_prefix(prefix: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise InvalidRequest(
            f"not a session id prefix: {prefix[:140]!r}",
            hint="a prefix is at most 128 characters of letters, digits and . _ : -",
        )
    return prefix


class Listings:
    def __init__(self, config: Config, index: Index) -> None:
        self.config = config
        self.index = index

    async def sessions(
        self,
        tenant: str,
        *,
        prefix: str = "",
        expired: bool | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        now: float | None = None,
    ) -> Page[SessionEntry]:
        """`expired`: only the sessions whose lifetime has run out (True), or only the others (False)."""
        wanted = check_limit(limit)
        after: SessionAt | None = decode_cursor("s", cursor) if cursor else None
        found = await self.index.sessions_page(
            tenant,
            prefix=check_prefix(prefix),
            expired=expired,
            now=time.time() if now is None else now,
            after=after,
            limit=wanted + 1,  # one more than the page tells whether there is a next one
        )
        page = found[:wanted]
        more = len(found) > wanted
        return Page(page, encode_cursor("s", page[-1].used_at, page[-1].id) if more else None)

    async def attachments(
        self, key: SessionKey, *, cursor: str | None = None, limit: int | None = None
    ) -> Page[Held]:
        wanted = check_limit(limit)
        check_session_id(key[1])
        after: HoldAt | None = decode_cursor("a", cursor) if cursor else None
        scoped = not self.config.is_open
        found = await self.index.holds_page(key, scoped, after=after, limit=wanted + 1)
        if found is None:
            raise SessionNotFound(f"no session {key[1]!r}", hint="create it with PUT /v1/sessions/{id}")
        page = [Held(image_ref(h.row), h.held_at) for h in found[:wanted]]
        more = len(found) > wanted
        return Page(page, encode_cursor("a", page[-1].held_at, page[-1].image.ref) if more else None)
