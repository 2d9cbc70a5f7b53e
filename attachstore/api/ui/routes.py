"""The paths of the operator page, all under /ui/: GET only, but for the login form and logging out."""

from __future__ import annotations

from importlib.resources import files

from aiohttp import web

from ..attachments import preview
from . import auth, pages

PREFIX = "/ui"
_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
# The stylesheet and the script, read once: no path of a request ever reaches the file system.
_STATIC = {
    f.name: (f.read_bytes(), _TYPES[f.name[f.name.rfind(".") :]])
    for f in files(__package__).joinpath("static").iterdir()
    if f.is_file() and f.name[f.name.rfind(".") :] in _TYPES
}


def under_ui(path: str) -> bool:
    """The page's own paths, which its cookie authorizes (auth.py) instead of an Authorization header."""
    return path == PREFIX or path.startswith(f"{PREFIX}/")


async def static(request: web.Request) -> web.Response:
    found = _STATIC.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    body, content_type = found
    return web.Response(body=body, content_type=content_type, headers={"Cache-Control": "no-cache"})


async def to_index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPPermanentRedirect(f"{PREFIX}/")


async def unknown(request: web.Request) -> web.StreamResponse:
    return auth.error_page(request, 404, f"the operator page has nothing at {request.path}")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get(PREFIX, to_index)
    router.add_get(f"{PREFIX}/static/{{name}}", static)
    router.add_get(f"{PREFIX}/login", auth.login_form)
    router.add_post(f"{PREFIX}/login", auth.login)
    router.add_post(f"{PREFIX}/logout", auth.logout)
    router.add_get(f"{PREFIX}/", auth.page(pages.overview))
    router.add_get(f"{PREFIX}/sessions", auth.page(pages.sessions))
    router.add_get(f"{PREFIX}/sessions/{{id}}", auth.page(pages.session))
    router.add_get(f"{PREFIX}/maintenance", auth.page(pages.maintenance))
    router.add_get(f"{PREFIX}/quarantine", auth.page(pages.quarantine))
    router.add_get(f"{PREFIX}/attachments/{{ref:[^/]+}}", auth.page(pages.attachment))
    # The API's preview endpoint itself, where the page's cookie reaches it (Path=/ui).
    router.add_get(f"{PREFIX}/attachments/{{ref:[^/]+}}/preview", auth.resource(preview))
    router.add_get(f"{PREFIX}/{{tail:.*}}", unknown)
