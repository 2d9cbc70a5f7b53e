"""The headers of every answer: the security headers, a verified read's, and the read lane's writing of them
in aiohttp's order."""

from __future__ import annotations

import email.utils
import http
import re
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


# What every answer carries unless it sets its own, in the order `add_security_headers` adds them.
DEFAULT_HEADERS = {**SECURITY_HEADERS, "Cache-Control": "no-store"}


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    # Image bytes carry their own immutable caching (READ_HEADERS); nothing else may be cached anywhere.
    for name, value in DEFAULT_HEADERS.items():
        response.headers.setdefault(name, value)


def not_modified_headers(etag: str) -> dict[str, str]:
    return {"ETag": etag, **READ_HEADERS}


def verified_headers(found: ImageRef) -> dict[str, str]:
    """Their ref is their ETag, and they may be cached for good."""
    return {"Content-Type": found.media_type, "ETag": f'"{found.ref}"', **READ_HEADERS}


class _Date:
    # the Date and Server lines, made once a second

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


def head(status: int, headers: Mapping[str, str], length: int, close: bool) -> bytes:
    """The status line and headers, as aiohttp writes them for the same response."""
    return _head_text(status, headers, str(length), close, _date()).encode("latin-1")


def _head_text(status: int, headers: Mapping[str, str], length: str, close: bool, date: str) -> str:
    # aiohttp's order: the answer's own `headers` (none of them Content-Length, Date, Server or Connection),
    # those four, then the DEFAULT_HEADERS the answer sets none of (on_response_prepare runs last).
    status_line = _STATUS_LINES.get(status)
    if status_line is None:
        status_line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
    lines = [status_line, *[f"{name}: {value}\r\n" for name, value in headers.items()]]
    if status != 304:  # a 304 has no body to measure: aiohttp sends no Content-Length with it
        lines.append(f"Content-Length: {length}\r\n")
    lines.append(date)
    if close:
        lines.append("Connection: close\r\n")
    lines.extend([f"{name}: {value}\r\n" for name, value in DEFAULT_HEADERS.items() if name not in headers])
    lines.append("\r\n")
    return "".join(lines)


def _verified_pieces(close: bool) -> list[str]:
    """Made from `verified_headers` itself, so that a header added there is in the lane's answers too."""
    marks = "\x00\x01\x02\x03\x04"
    found = ImageRef(ref=marks[1], media_type=marks[0], bytes=0, width=0, height=0, frames=0, name=None)
    headers = {**verified_headers(found), "X-Request-Id": marks[2]}
    text = _head_text(200, headers, marks[3], close, marks[4])
    pieces = re.split("[\x00-\x04]", text)
    if "".join(re.findall("[\x00-\x04]", text)) != marks:
        raise RuntimeError("verified_head's values are not where it writes them")  # pragma: no cover
    return pieces


_VERIFIED = {close: _verified_pieces(close) for close in (False, True)}


def verified_head(found: ImageRef, request_id: str, length: int, close: bool) -> bytes:
    p = _VERIFIED[close]
    return (
        f"{p[0]}{found.media_type}{p[1]}{found.ref}{p[2]}{request_id}{p[3]}{length}{p[4]}{_date()}{p[5]}"
    ).encode("latin-1")
