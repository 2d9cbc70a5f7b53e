"""A Python client of the attachstore daemon (docs/clients.md): `AsyncClient` for asyncio code, `Client` for
blocking code, the same typed methods on both, and errors that carry the daemon's stable codes.

It imports nothing of the server: only aiohttp, msgspec and the error and reference types."""

from .aio import DEFAULT_URL, AsyncClient
from .errors import AttachstoreClientError, ConnectionFailed, TimedOut
from .models import (
    Admission,
    Attachment,
    AttachmentPage,
    Blob,
    Diagnostic,
    HeldAttachment,
    Image,
    McpResult,
    Provider,
    Rendered,
    RouteInfo,
    RouteResolution,
    Session,
    SessionPage,
    SessionSummary,
    Source,
    Stats,
    Status,
    Summary,
)
from .sync import Client

__all__ = [
    "DEFAULT_URL",
    "Admission",
    "AsyncClient",
    "Attachment",
    "AttachmentPage",
    "AttachstoreClientError",
    "Blob",
    "Client",
    "ConnectionFailed",
    "Diagnostic",
    "HeldAttachment",
    "Image",
    "McpResult",
    "Provider",
    "Rendered",
    "RouteInfo",
    "RouteResolution",
    "Session",
    "SessionPage",
    "SessionSummary",
    "Source",
    "Stats",
    "Status",
    "Summary",
    "TimedOut",
]
