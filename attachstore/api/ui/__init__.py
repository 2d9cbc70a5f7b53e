"""The read-only operator page at /ui/ (docs/ui.md): server-rendered HTML over the service's reads, behind the
API's tokens (given once on a login form, kept in a cookie) or, with no tokens configured, for loopback
clients only. Nothing here changes the store."""

from .routes import PREFIX, add_routes, under_ui

__all__ = ["PREFIX", "add_routes", "under_ui"]
