"""Who may see the operator page: the API's tokens, given once on the login form and kept in a cookie the
page's paths alone receive; with no tokens configured (open mode), loopback clients only (docs/ui.md)."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from functools import wraps
from urllib.parse import parse_qs, urlsplit

from aiohttp import web

from ...errors import AttachstoreError, Unauthorized
from ..bodies import read_capped
from ..common import CONFIG, TENANT, TOKENS, tenant_for
from .views import COOKIE, render

PATH = "/ui"
MAX_FORM = 4096  # a login form's body: a token and its field name
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
# Headers a proxy in front adds: a request that went through one did not come from this machine's user.
_FORWARDED = ("Forwarded", "X-Forwarded-For", "X-Real-IP")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return address.rstrip(".").lower() in _LOOPBACK_NAMES


def local(request: web.Request) -> bool:
    """A client on this machine, reaching it by a loopback name: the peer is a loopback address (or a Unix
    socket's, which has none), nothing says a proxy forwarded the request, and the Host is a loopback name or
    address, which a page of another site that rebinds its DNS name to 127.0.0.1 does not send."""
    peer = request.remote
    if peer and not _loopback(peer):
        return False
    if any(name in request.headers for name in _FORWARDED):
        return False
    host = urlsplit(f"//{request.host}").hostname or ""
    return _loopback(host)


def token_tenant(request: web.Request) -> str | None:
    """The tenant of the cookie's token; None without a cookie or with a token no longer configured."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    try:
        return tenant_for(request.app[TOKENS], f"Bearer {token}")
    except Unauthorized:
        return None


def _open(request: web.Request) -> bool:
    return not request.app[TOKENS]


_REMOTE = "without tokens, the operator page is served to clients on this machine only"
_REMOTE_HINT = "open it on the daemon's machine (http://127.0.0.1:PORT/ui/), or configure [[tenants]] tokens"


def page(handler: Handler) -> Handler:
    """A page: its tenant from the cookie, or the login form for a browser without a valid one."""

    @wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        if _open(request):
            if not local(request):
                return error_page(request, 403, _REMOTE, _REMOTE_HINT)
            request[TENANT] = ""
        else:
            tenant = token_tenant(request)
            if tenant is None:
                raise web.HTTPSeeOther(f"{PATH}/login")
            request[TENANT] = tenant
        try:
            return await handler(request)
        except AttachstoreError as e:
            return error_page(request, e.status, e.message, e.hint)

    return checked


def resource(handler: Handler) -> Handler:
    """What a page loads (a preview): the same rule as a page, answered with the API's error instead of the
    login form."""

    @wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        if _open(request):
            if not local(request):
                raise web.HTTPForbidden(reason=_REMOTE)
            request[TENANT] = ""
        else:
            tenant = token_tenant(request)
            if tenant is None:
                raise Unauthorized("log in at /ui/login first", hint="the operator page's cookie is missing")
            request[TENANT] = tenant
        return await handler(request)

    return checked


def error_page(request: web.Request, status: int, message: str, hint: str | None = None) -> web.Response:
    return render(request, "error.html", status, message=message, hint=hint)


async def login_form(request: web.Request) -> web.StreamResponse:
    if _open(request):
        raise web.HTTPSeeOther(f"{PATH}/")
    return render(request, "login.html", refused=False)


def _same_origin(request: web.Request) -> bool:
    """A browser says where a form was sent from: Sec-Fetch-Site, or else the Origin (which the page's
    no-referrer policy makes "null" on its own forms); the login form is this daemon's own."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin", "null")
    return origin == "null" or urlsplit(origin).netloc == request.host


async def login(request: web.Request) -> web.StreamResponse:
    if _open(request):
        raise web.HTTPSeeOther(f"{PATH}/")
    if not _same_origin(request):
        return error_page(request, 403, "the login form is sent from the operator page only")
    if request.content_type != "application/x-www-form-urlencoded":
        return error_page(request, 415, "the login form is sent as application/x-www-form-urlencoded")
    within = request.app[CONFIG].http.read_timeout_seconds
    body = await read_capped(request, MAX_FORM, within, "a token is shorter than this", None)
    token = parse_qs(bytes(body).decode("utf-8", "replace")).get("token", [""])[0].strip()
    try:
        tenant_for(request.app[TOKENS], f"Bearer {token}")
    except Unauthorized:
        return render(request, "login.html", 401, refused=True)
    answer = web.HTTPSeeOther(f"{PATH}/")
    secure = request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
    answer.set_cookie(COOKIE, token, path=PATH, httponly=True, samesite="Strict", secure=secure or None)
    raise answer


async def logout(request: web.Request) -> web.StreamResponse:
    answer = web.HTTPSeeOther(f"{PATH}/login" if not _open(request) else f"{PATH}/")
    answer.del_cookie(COOKIE, path=PATH)
    raise answer
