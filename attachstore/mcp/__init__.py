"""`attachstore mcp`: an MCP server for agent hosts (docs/mcp.md), over stdio or streamable HTTP, on a
local Store or a daemon, on the official MCP Python SDK; and `attachstore mcp wrap`, a gate in front of
another MCP server.

Each name is imported at its first use: the server's modules import the SDK (about a second), which the
wrapper, forwarding a host's first message to the server it starts, has no use for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backends import Backend, Local, Remote
    from .files import directory
    from .gating import Gate
    from .roots import Roots
    from .run import http, loopback, stdio
    from .server import Options, build
    from .wrap import WrapOptions, wrapped

_MODULES = {
    "Backend": "backends",
    "Local": "backends",
    "Remote": "backends",
    "directory": "files",
    "Gate": "gating",
    "Roots": "roots",
    "http": "run",
    "loopback": "run",
    "stdio": "run",
    "Options": "server",
    "build": "server",
    "WrapOptions": "wrap",
    "wrapped": "wrap",
}

__all__ = [
    "Backend",
    "Gate",
    "Local",
    "Options",
    "Remote",
    "Roots",
    "WrapOptions",
    "build",
    "directory",
    "http",
    "loopback",
    "stdio",
    "wrapped",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
