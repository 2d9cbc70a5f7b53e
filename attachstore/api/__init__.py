"""The HTTP edge: decode requests, call the service, encode answers."""

from .app import make_app
from .lane import Lanes
from .sending import watch_writes

__all__ = ["Lanes", "make_app", "watch_writes"]
