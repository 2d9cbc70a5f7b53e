"""The page's HTML: Jinja2 templates (templates/), autoescaped, answered with a Content-Security-Policy that
allows the page's own stylesheet, script and images and nothing inline (docs/ui.md, "What the browser is
allowed")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

from ...text import human_bytes

CSP = (
    "default-src 'none'; img-src 'self'; style-src 'self'; script-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}
COOKIE = "attachstore_ui"  # the token, as the login form set it (auth.py)


def when(t: float | None) -> str:
    """A time to the second, in UTC, as an operator reads it in a table."""
    if t is None:
        return "never"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("attachstore.api.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the page's test, never renders as nothing
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = human_bytes
    env.filters["when"] = when
    return env


_ENV = _environment()


def render(request: web.Request, template: str, status: int = 200, /, **context: Any) -> web.Response:
    text = _ENV.get_template(template).render(
        path=request.path, logged_in=COOKIE in request.cookies, **context
    )
    return web.Response(
        text=text, status=status, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
    )
