"""GET /v1/sessions (a page of the tenant's sessions), GET /v1/sessions/{id}/attachments (a page of what one
holds) and GET /v1/stats (the totals); docs/api.md, "Listings and totals"."""

from __future__ import annotations

import time

from aiohttp import web

from ..errors import InvalidRequest
from ..index import SessionEntry
from ..service import Store
from ..service.listings import LIMIT_HINT, Held, Page
from ..service.stats import Run, Stats
from ..text import rfc3339
from . import listwire
from .attachments import attachment
from .common import STORE, json_response, tenant_of

_EXPIRED = {"true": True, "false": False}


def _one(request: web.Request, name: str) -> str | None:
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise InvalidRequest(f"{name}: given {len(values)} times", hint=f"give {name} at most once")
    return values[0] if values else None


def _limit(request: web.Request) -> int | None:
    text = _one(request, "limit")
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 6:
        raise InvalidRequest(f"limit: {text[:20]!r} is not a number", hint=LIMIT_HINT)
    return int(text)


def _expired(request: web.Request) -> bool | None:
    text = _one(request, "expired")
    if text is None:
        return None
    if text not in _EXPIRED:
        raise InvalidRequest(f"expired: {text[:20]!r} is neither true nor false")
    return _EXPIRED[text]


def summary(s: SessionEntry) -> listwire.SessionSummary:
    expires = None if s.expires_at is None else rfc3339(s.expires_at)
    return listwire.SessionSummary(
        s.id, s.route, rfc3339(s.created_at), rfc3339(s.used_at), expires, s.ttl, s.images, s.bytes
    )


def session_page(page: Page[SessionEntry]) -> listwire.SessionPage:
    return listwire.SessionPage([summary(s) for s in page.items], page.next)


def attachment_page(session: str, page: Page[Held]) -> listwire.AttachmentPage:
    held = [listwire.HeldAttachment(attachment(h.image), rfc3339(h.held_at)) for h in page.items]
    return listwire.AttachmentPage(session, held, page.next)


async def sessions(request: web.Request) -> web.Response:
    store: Store = request.app[STORE]
    page = await store.listings.sessions(
        tenant_of(request),
        prefix=_one(request, "prefix") or "",
        expired=_expired(request),
        cursor=_one(request, "cursor"),
        limit=_limit(request),
    )
    return json_response(session_page(page))


async def attachments(request: web.Request) -> web.Response:
    id_ = request.match_info["id"]
    page = await request.app[STORE].listings.attachments(
        (tenant_of(request), id_), cursor=_one(request, "cursor"), limit=_limit(request)
    )
    return json_response(attachment_page(id_, page))


def _run(run: Run | None) -> listwire.LastRun | None:
    return None if run is None else listwire.LastRun(rfc3339(run.finished_at), dict(run.figures))


def stats_answer(s: Stats, now: float) -> listwire.Stats:
    c = s.collectible
    collectible = None if c is None else listwire.Collectible(c.objects, c.bytes, rfc3339(c.at), now - c.at)
    return listwire.Stats(
        tenant=s.scope,
        objects=s.objects,
        bytes=s.bytes,
        saved_bytes=s.saved_bytes,
        held_bytes=s.held_bytes,
        by_type={t: listwire.TypeFigures(*f) for t, f in s.by_type.items()},
        by_source={k: listwire.TypeFigures(*f) for k, f in s.by_source.items()},
        quarantined=s.quarantined,
        missing=s.missing,
        sessions=s.sessions,
        expired_sessions=s.expired_sessions,
        variants=s.variants,
        previews=s.previews,
        collectible=collectible,
        last_gc=_run(s.runs.get("gc")),
        last_audit=_run(s.runs.get("audit")),
        free_bytes=s.free_bytes,
    )


async def stats(request: web.Request) -> web.Response:
    store, now = request.app[STORE], time.time()
    figures = await store.figures.stats(store.scope(tenant_of(request)), now)
    return json_response(stats_answer(figures, now))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/v1/sessions", sessions)
    router.add_get("/v1/sessions/{id}/attachments", attachments)
    router.add_get("/v1/stats", stats)
