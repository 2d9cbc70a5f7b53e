"""Recognizing a plain read's head: what the read lane answers itself, and what it leaves to aiohttp."""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_HEADERS = 64  # header fields in a request, as aiohttp is told (the read lane keeps to it too)
# aiohttp's Python parser counts the request line and the empty line among them (its C parser counts only
# the fields): 62 fields at most
_MAX_FIELDS = MAX_HEADERS - 2
# The characters of a ref, of a field's name (RFC 9110's token) and of a field's value the lane takes.
_REF_CHAR = rb"[A-Za-z0-9:._-]"
_NAME_CHAR = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]"
_VALUE_CHAR = rb"[\t\x20-\x7e]"
_START = b"GET /v1/attachments/"
_REQUEST_LINE_PATTERN = re.escape(_START) + b"(" + _REF_CHAR + rb"+) HTTP/1\.1"
_REQUEST_LINE = re.compile(_REQUEST_LINE_PATTERN)
_NAME = re.compile(_NAME_CHAR + b"+")
_VALUE = re.compile(_VALUE_CHAR + b"*")
_READ = frozenset({b"authorization", b"if-none-match", b"x-request-id", b"connection"})
# The fields aiohttp refuses twice in a request (RFC 9110's singletons, its SINGLETON_HEADERS), less the body
# framing the lane refuses outright. A request without Host is refused as well (HTTP/1.1 requires one).
_SINGLETONS = frozenset(
    {
        b"host",
        b"user-agent",
        b"content-type",
        b"etag",
        b"max-forwards",
        b"server",
        b"content-location",
        b"content-range",
    }
)
_ONCE = _READ | _SINGLETONS
# Body framing, and what changes the connection's life: llhttp reads Proxy-Connection as Connection.
_NOT_HERE = frozenset({b"content-length", b"transfer-encoding", b"expect", b"upgrade", b"proxy-connection"})
# The head of most plain reads in one match: the request line and headers of the right characters, none of
# them one the lane reads or refuses (`_SPECIAL`). What does not match goes through `parse_head`.
_PLAIN = re.compile(_REQUEST_LINE_PATTERN + rb"(?:\r\n" + _NAME_CHAR + b"+:" + _VALUE_CHAR + b"*)*")
# Host and User-Agent, which plain reads carry, are counted in `recognize` instead.
_SPECIAL = re.compile(
    rb"\r\n(?:" + b"|".join(sorted((_ONCE | _NOT_HERE) - {b"host", b"user-agent"})) + rb"):", re.IGNORECASE
)


class PlainRead(NamedTuple):
    ref: str
    authorization: str
    if_none_match: str | None
    request_id: str | None
    close: bool


def recognize(head: bytes, max_line: int) -> PlainRead | None:
    """The plain read that `head` (a request's bytes up to its empty line) is, or None for anything else."""
    if len(head) <= max_line and head.count(b"\r\n") <= _MAX_FIELDS and not _SPECIAL.search(head):
        plain = _PLAIN.fullmatch(head)  # every line within max_line, none that `parse_head` would read
        if plain is not None and plain[1] not in (b".", b".."):
            lower = head.lower()  # the singletons a plain read usually carries, counted
            if lower.count(b"\r\nhost:") == 1 and lower.count(b"\r\nuser-agent:") <= 1:
                return PlainRead(plain[1].decode("ascii"), "", None, None, False)
            return None
    return parse_head(head, max_line)


def parse_head(head: bytes, max_line: int) -> PlainRead | None:
    """`recognize`, line by line: what its one-match path must agree with (tests/api/test_lane.py)."""
    lines = head.split(b"\r\n")
    if len(lines) > _MAX_FIELDS + 1 or len(lines[0]) > max_line:
        return None
    target = _REQUEST_LINE.fullmatch(lines[0])
    if target is None or target[1] in (b".", b".."):  # aiohttp resolves dot segments
        return None
    seen = _fields(lines[1:], max_line)
    if seen is None or b"host" not in seen:
        return None
    connection = {t.strip().lower() for t in seen.get(b"connection", "").split(",")}
    return PlainRead(
        target[1].decode("ascii"),
        seen.get(b"authorization", ""),
        seen.get(b"if-none-match"),
        seen.get(b"x-request-id"),
        "close" in connection,
    )


def _fields(lines: list[bytes], max_line: int) -> dict[bytes, str] | None:
    seen: dict[bytes, str] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if len(line) > max_line or not colon or not _NAME.fullmatch(name):
            return None
        value = value.strip(b" \t")
        lower = name.lower()
        if lower in _NOT_HERE or not _VALUE.fullmatch(value):
            return None
        if lower in _ONCE:
            if lower in seen:
                return None
            seen[lower] = value.decode("ascii")
    return seen


_REF_START = re.compile(_REF_CHAR + b"*")
_NAME_START = re.compile(_NAME_CHAR + b"*")


BARE_LF = re.compile(rb"(?<!\r)\n")  # it looks behind where the search starts, as need be


def possible(start: bytes, max_line: int) -> bool:
    """False for a start that aiohttp's parser, which reads as the bytes come, may already have refused."""
    *lines, last = start.removesuffix(b"\r").split(b"\r\n")
    if len(lines) > _MAX_FIELDS or len(last) > max_line:
        return False
    if not lines:  # in the request line: a start of `GET /v1/attachments/<ref> HTTP/1.1`
        if not _START.startswith(last[: len(_START)]):
            return False
        rest = last[len(_START) :]
        ref = _REF_START.match(rest)
        assert ref is not None  # it matches the empty string
        tail = rest[ref.end() :]
        return not tail or (ref.end() > 0 and b" HTTP/1.1".startswith(tail))
    if not parse_head(lines[0] + b"\r\nHost: x", max_line):  # the request line, whole
        return False
    name, colon, _ = last.partition(b":")
    if colon:
        return _fields([*lines[1:], last], max_line) is not None
    return _NAME_START.fullmatch(name) is not None and _fields(lines[1:], max_line) is not None
