"""The headers of every answer: the security headers, a verified read's, and the read lane's writing of them
in aiohttp's order."""

from __future__ import annotations

import email.utils
import http
import time
from collections.abc import Mapping

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

from ..service import ImageRef

READ_HEADERS = {
    "Cache-Control": "private, max-age=31536000, immutable",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
}


SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    # Image bytes carry their own immutable caching; nothing else may be cached anywhere.
    response.headers.setdefault("Cache-Control", "no-store")


def not_modified_headers(etag: str) -> dict[str, str]:
    return {"ETag": etag, **READ_HEADERS}


def verified_headers(found: ImageRef) -> dict[str, str]:
    """Verified bytes on their way out: their ref is their ETag, and they may be cached for good."""
    return {"Content-Type": found.media_type, "ETag": f'"{found.ref}"', **READ_HEADERS}


class _Date:
    """The Date and Server header lines, made once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            date = email.utils.formatdate(now, usegmt=True)
            self._second, self._text = now, f"Date: {date}\r\nServer: {SERVER_SOFTWARE}\r\n"
        return self._text


_date = _Date()
_STATUS_LINES: dict[int, str] = {}
# The headers every answer carries unless it sets its own, in the order aiohttp's on_response_prepare adds
# them: the security headers, then Cache-Control.
_DEFAULT_LINES = [(name, f"{name}: {value}\r\n") for name, value in SECURITY_HEADERS.items()]
if "Cache-Control" not in SECURITY_HEADERS:
    _DEFAULT_LINES.append(("Cache-Control", "Cache-Control: no-store\r\n"))


def head(status: int, headers: Mapping[str, str], length: int, close: bool) -> bytes:
    """The status line and headers of an answer, as aiohttp writes them for the same response: its own
    `headers` (none of them Content-Length, Date, Server or Connection), those four, then the security
    headers and `Cache-Control: no-store` where the answer sets none of its own."""
    status_line = _STATUS_LINES.get(status)
    if status_line is None:
        status_line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
    lines = [status_line, *[f"{name}: {value}\r\n" for name, value in headers.items()]]
    if status != 304:  # a 304 has no body to measure: aiohttp sends no Content-Length with it
        lines.append(f"Content-Length: {length}\r\n")
    lines.append(_date())
    if close:
        lines.append("Connection: close\r\n")
    lines.extend([line for name, line in _DEFAULT_LINES if name not in headers])
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def verified_head(found: ImageRef, request_id: str, length: int, close: bool) -> bytes:
    """`head(200, verified_headers(found) | {"X-Request-Id": request_id}, length, close)`, from a template:
    what every verified answer says."""
    return (
        f'HTTP/1.1 200 OK\r\nContent-Type: {found.media_type}\r\nETag: "{found.ref}"\r\n{_READ_LINES}'
        f"X-Request-Id: {request_id}\r\nContent-Length: {length}\r\n{_date()}"
        f"{_CLOSE_LINES if close else _KEEP_LINES}"
    ).encode("latin-1")


_READ_LINES = "".join(f"{name}: {value}\r\n" for name, value in READ_HEADERS.items())
_KEEP_LINES = "".join(line for name, line in _DEFAULT_LINES if name not in READ_HEADERS) + "\r\n"
_CLOSE_LINES = "Connection: close\r\n" + _KEEP_LINES
