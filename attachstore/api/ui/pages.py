"""The pages: each reads through the service, under the tenant the cookie names, and renders a template.
Every list is one page after a cursor (`?after=`), never the whole of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import urlencode

from aiohttp import web

from ...errors import InvalidRequest, SessionNotFound
from ...index import SessionKey
from ...service import Store
from ...service.listings import Held
from ..common import STORE, tenant_of
from .views import render

T = TypeVar("T")
PAGE = 50  # rows of a list on one page
SESSIONS_PAGE = 20  # sessions on one page, each with its first thumbnails
THUMBNAILS = 8  # a session's images shown in the sessions list; its own page shows them all, paged
MAX_CURSOR = 300  # characters of `?after=`: a ref or a session id is shorter
THUMBNAIL = 128  # px: a preview size (service.PREVIEW_SIZES)
LARGE = 512
# The maintenance runs the page reports, in this order, with what each is.
RUNS = {
    "gc": "Garbage collection (attachstore gc)",
    "audit": "Audit (attachstore audit)",
    "audit_sample": "Sampled audit (attachstore audit --sample)",
}


def cursor(request: web.Request) -> str:
    after = request.query.get("after", "")
    if len(after) > MAX_CURSOR:
        raise InvalidRequest(f"after: at most {MAX_CURSOR} characters")
    return after


def link(request: web.Request, **query: str | None) -> str:
    """This page's path with `query`, those given as None left out."""
    given = {k: v for k, v in query.items() if v}
    return f"{request.path}?{urlencode(given)}" if given else request.path


def paged(found: Sequence[T], key: Callable[[T], str], limit: int) -> tuple[Sequence[T], str | None]:
    """The page's rows (`found`, asked for `limit + 1`, holds one more when there is a next page) and the
    next page's cursor."""
    if len(found) <= limit:
        return found, None
    return found[:limit], key(found[limit - 1])


async def runs(request: web.Request) -> list[tuple[str, str, float, dict[str, float]]]:
    found = await request.app[STORE].runs()
    named = [(c, RUNS[c], *found[c]) for c in RUNS if c in found]
    return named + [(c, c, at, figures) for c, (at, figures) in sorted(found.items()) if c not in RUNS]


async def overview(request: web.Request) -> web.Response:
    """The totals of GET /v1/stats, as the tenant sees them, and the last gc and audit."""
    store, now = request.app[STORE], time.time()
    stats = await store.figures.stats(store.scope(tenant_of(request)), now)
    return render(request, "overview.html", stats=stats, now=now, runs=await runs(request))


async def maintenance(request: web.Request) -> web.Response:
    return render(request, "maintenance.html", runs=await runs(request))


async def quarantine(request: web.Request) -> web.Response:
    after = cursor(request)
    found = await request.app[STORE].quarantined(tenant_of(request), after, PAGE + 1)
    rows, next_after = paged(found, lambda r: r.ref, PAGE)
    return render(request, "quarantine.html", rows=rows, **pager(request, after, next_after))


async def attachment(request: web.Request) -> web.Response:
    store, tenant, text = request.app[STORE], tenant_of(request), request.match_info["ref"]
    found = await store.meta(text, tenant)  # ATTACHMENT_NOT_FOUND for a ref the tenant may not see
    after = cursor(request)
    holders, next_after = paged(await store.holders(found.ref, tenant, after, PAGE + 1), str, PAGE)
    return render(
        request,
        "attachment.html",
        a=found,
        holders=holders,
        size=LARGE,
        **pager(request, after, next_after),
    )


def pager(request: web.Request, after: str, next_after: str | None) -> dict[str, str | None]:
    following = link(request, after=next_after) if next_after else None
    return {"first_url": link(request) if after else None, "next_url": following}


async def first_images(store: Store, key: SessionKey) -> list[Held]:
    try:
        return (await store.listings.attachments(key, limit=THUMBNAILS)).items
    except SessionNotFound:  # released since the listing was read: shown without its images
        return []


async def sessions(request: web.Request) -> web.Response:
    """The tenant's sessions, newest used first, each with its first images as thumbnails."""
    store, tenant = request.app[STORE], tenant_of(request)
    prefix, cursor_ = request.query.get("prefix", ""), request.query.get("cursor") or None
    found = await store.listings.sessions(tenant, prefix=prefix, cursor=cursor_, limit=SESSIONS_PAGE)
    # One indexed page of holds per session shown: the page asks as many as it shows sessions.
    firsts = await asyncio.gather(*(first_images(store, (tenant, s.id)) for s in found.items))
    rows = list(zip(found.items, firsts, strict=True))
    return render(
        request,
        "sessions.html",
        rows=rows,
        prefix=prefix,
        thumbnail=THUMBNAIL,
        first_url=link(request, prefix=prefix) if cursor_ else None,
        next_url=link(request, prefix=prefix, cursor=found.next) if found.next else None,
    )


async def session(request: web.Request) -> web.Response:
    """One session's images, oldest held first, paged."""
    store, tenant, id_ = request.app[STORE], tenant_of(request), request.match_info["id"]
    cursor_ = request.query.get("cursor") or None
    found = await store.listings.attachments((tenant, id_), cursor=cursor_, limit=PAGE)
    return render(
        request,
        "session.html",
        id=id_,
        held=found.items,
        thumbnail=THUMBNAIL,
        first_url=link(request) if cursor_ else None,
        next_url=link(request, cursor=found.next) if found.next else None,
    )
