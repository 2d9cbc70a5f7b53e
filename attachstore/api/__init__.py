"""The HTTP edge: decode requests, call the service, encode answers."""

from .app import make_app

__all__ = ["make_app"]
