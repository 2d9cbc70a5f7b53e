"""The listing calls of both clients (GET /v1/sessions, /v1/sessions/{id}/attachments, /v1/stats), apart
from aio.py so that each stays one idea: `AsyncClient` takes them from `AsyncListings`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from .models import AttachmentPage, HeldAttachment, SessionPage, SessionSummary, Stats

T = TypeVar("T")
_session_page = msgspec.json.Decoder(SessionPage)
_attachment_page = msgspec.json.Decoder(AttachmentPage)
_stats = msgspec.json.Decoder(Stats)


def every(page: Callable[[str | None], tuple[Sequence[T], str | None]]) -> Iterator[T]:
    """Every item of a listing, `page(cursor)` giving one page's items and the next cursor, fetched as the
    iteration reaches them."""
    cursor = None
    while True:
        items, cursor = page(cursor)
        yield from items
        if cursor is None:
            return


async def every_async(
    page: Callable[[str | None], Awaitable[tuple[Sequence[T], str | None]]],
) -> AsyncIterator[T]:
    """`every`, for the asynchronous client."""
    cursor = None
    while True:
        items, cursor = await page(cursor)
        for item in items:
            yield item
        if cursor is None:
            return


def session_query(
    prefix: str | None, expired: bool | None, limit: int | None, cursor: str | None
) -> dict[str, str]:
    query = {"prefix": prefix, "limit": None if limit is None else str(limit), "cursor": cursor}
    if expired is not None:
        query["expired"] = "true" if expired else "false"
    return {k: v for k, v in query.items() if v}


class _Fetch(Protocol):
    """AsyncClient._json: a request, its answer decoded."""

    def __call__(
        self,
        decoder: msgspec.json.Decoder[T],
        method: str,
        path: Sequence[str],
        payload: object = None,
        request_id: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Coroutine[Any, Any, T]: ...


class AsyncListings:
    _json: _Fetch  # AsyncClient's method

    async def sessions_page(
        self,
        *,
        prefix: str | None = None,
        expired: bool | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        request_id: str | None = None,
    ) -> SessionPage:
        """One page of the sessions, newest used first; its `next` is the `cursor` of the following one.
        `expired`: only the sessions whose lifetime has run out (True), or only the others (False)."""
        query = session_query(prefix, expired, limit, cursor)
        return await self._json(_session_page, "GET", ("v1", "sessions"), request_id=request_id, query=query)

    async def list_sessions(
        self, *, prefix: str | None = None, expired: bool | None = None, page_size: int | None = None
    ) -> AsyncIterator[SessionSummary]:
        """Every session, newest used first, fetching a page at a time as the iteration reaches it."""

        async def page(cursor: str | None) -> tuple[list[SessionSummary], str | None]:
            found = await self.sessions_page(prefix=prefix, expired=expired, limit=page_size, cursor=cursor)
            return found.sessions, found.next

        async for s in every_async(page):
            yield s

    async def attachments_page(
        self,
        id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        request_id: str | None = None,
    ) -> AttachmentPage:
        """One page of what session `id` holds, oldest held first, each with its metadata."""
        query = session_query(None, None, limit, cursor)
        path = ("v1", "sessions", id, "attachments")
        return await self._json(_attachment_page, "GET", path, request_id=request_id, query=query)

    async def session_attachments(
        self, id: str, *, page_size: int | None = None
    ) -> AsyncIterator[HeldAttachment]:
        """Everything session `id` holds, oldest held first, a page at a time."""

        async def page(cursor: str | None) -> tuple[list[HeldAttachment], str | None]:
            found = await self.attachments_page(id, limit=page_size, cursor=cursor)
            return found.attachments, found.next

        async for held in every_async(page):
            yield held

    async def stats(self, *, request_id: str | None = None) -> Stats:
        """The totals of what this client's token may see (the whole store without tokens)."""
        return await self._json(_stats, "GET", ("v1", "stats"), request_id=request_id)
