"""`attachstore mcp`: an MCP server for agent hosts (docs/mcp.md), over stdio or streamable HTTP, on a
local Store or a daemon, on the official MCP Python SDK."""

from .backends import Backend, Local, Remote
from .files import directory
from .roots import Roots
from .run import http, loopback, stdio
from .server import Options, build

__all__ = [
    "Backend",
    "Local",
    "Options",
    "Remote",
    "Roots",
    "build",
    "directory",
    "http",
    "loopback",
    "stdio",
]
