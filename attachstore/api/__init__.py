"""The HTTP edge: decode requests, call the service, encode answers."""

from .app import make_app
from .drain import drain
from .lane import Lanes
from .sending import watch_writes

__all__ = ["Lanes", "drain", "make_app", "watch_writes"]
