"""The HTTP edge: decode requests, call the service, encode answers."""

from .app import make_app
from .drain import drain
from .site import DaemonSite

__all__ = ["DaemonSite", "drain", "make_app"]
