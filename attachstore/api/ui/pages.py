"""The pages: each reads through the service, under the tenant the cookie names, and renders a template.
Every list is one page after a cursor (`?after=`), never the whole of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from aiohttp import web

from ...errors import InvalidRequest
from ..common import STORE, tenant_of
from .views import render

T = TypeVar("T")
PAGE = 50  # rows of a list on one page
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
    return render(request, "overview.html", runs=await runs(request))


async def maintenance(request: web.Request) -> web.Response:
    return render(request, "maintenance.html", runs=await runs(request))


async def quarantine(request: web.Request) -> web.Response:
    after = cursor(request)
    found = await request.app[STORE].quarantined(tenant_of(request), after, PAGE + 1)
    rows, next_after = paged(found, lambda r: r.ref, PAGE)
    return render(request, "quarantine.html", rows=rows, after=after, next_after=next_after)


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
        after=after,
        next_after=next_after,
        size=LARGE,
    )
