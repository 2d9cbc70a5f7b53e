"""The read lane's safety as a tested property: it answers a request only where aiohttp would, framed as
aiohttp and h11 frame it, with the Authorization they read.

One seeded corpus (random.Random(SEED): a failure names its case, and reproduces) of generated heads (every
odd form: folding, tabs, case, spaces, duplicate or absent Host, bad Content-Length, Transfer-Encoding,
absolute-form and other targets, HTTP/1.0 and others, keep-alive and close, bytes out of range, lines at
the bounds) and mutations of them, each followed by a second request. Wherever `recognize` (at the end the
lane finds) takes one, aiohttp's C and Python parsers, configured as the daemon configures them, and h11
must all accept it, end it where the lane ends it (the next request is the second one), and read the same
method, target, version, Authorization, If-None-Match, X-Request-Id and keep-alive. An aiohttp whose
strictness changes fails here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import h11
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_parser import HttpRequestParserC, HttpRequestParserPy
from aiohttp.streams import EMPTY_PAYLOAD

from attachstore.api.lane import MAX_HEADERS, Get, recognize
from tests.hostile.conftest import TOKENS

SEED = 31
MAX_LINE = 8190  # [http] max_header_bytes, as the daemons here have it
REF = "sha256:" + "3c" * 32
SENTINEL = b"GET /sentinel HTTP/1.1\r\nHost: s\r\n\r\n"
ALICE, MALLORY = (f"Bearer {TOKENS[t]}".encode() for t in ("alice", "mallory"))

# The parts of a head. A request line, then fields; each list holds the usual form first.
TARGETS = [
    b"/v1/attachments/%s" % REF.encode(),
    b"/v1/attachments/sha256:abc",
    b"/v1/attachments/%s?" % REF.encode(),
    b"/v1/attachments/%s?size=1" % REF.encode(),
    b"/v1/attachments/%s#f" % REF.encode(),
    b"/v1/attachments/sha256%%3A%s" % (b"3c" * 32),
    b"/v1/attachments/./%s" % REF.encode(),
    b"/v1/attachments/..",
    b"/v1/attachments/.",
    b"/v1/attachments/",
    b"/v1/attachments/%s/meta" % REF.encode(),
    b"//v1/attachments/%s" % REF.encode(),
    b"/v1//attachments/%s" % REF.encode(),
    b"http://t/v1/attachments/%s" % REF.encode(),
    b"HTTP://t/v1/attachments/%s" % REF.encode(),
    b"*",
    b"/V1/attachments/%s" % REF.encode(),
]
METHODS = [b"GET", b"HEAD", b"get", b"POST", b"GET ", b"OPTIONS", b"G\x00T"]
VERSIONS = [
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"http/1.1",
    b"HTTP/1.10",
    b"HTTP/2.0",
    b"HTTP/1.1 ",
    b"HTTP/0.9",
    b"HTTP/1",
]
SEPARATORS = [b" ", b"  ", b"\t"]
FIELDS = [
    # Host: absent, twice, empty, spaced, in other cases
    b"Host: t",
    b"host: t",
    b"HOST: t",
    b"Host:t",
    b"Host:  t \t",
    b"Host:",
    b"Host: t:8731",
    b"Host: a b",
    b"Host : t",
    b" Host: t",
    b"Host\t: t",
    # Authorization: which token applies
    b"Authorization: " + ALICE,
    b"authorization: " + ALICE.lower(),
    b"Authorization:" + ALICE,
    b"Authorization: \t" + ALICE + b" \t",
    b"Authorization: " + ALICE.replace(b" ", b"\t"),
    b"Authorization: " + ALICE.replace(b" ", b"  "),
    b"Authorization: " + MALLORY,
    b"Authorization: Basic YTpi",
    b"Authorization:",
    b"Authorization : " + ALICE,
    b"X-Authorization: " + MALLORY,
    # keep-alive and close
    b"Connection: close",
    b"Connection: keep-alive",
    b"connection: Close",
    b"Connection: keep-alive, close",
    b"Connection: close, keep-alive",
    b"Connection: closed",
    b"Connection: upgrade",
    b"Connection:\tclose\t",
    b"Proxy-Connection: close",
    # what the lane reads
    b"X-Request-Id: diff-1",
    b"X-Request-Id: not ok",
    b'If-None-Match: "%s"' % REF.encode(),
    b"If-None-Match: *",
    b'If-None-Match: W/"x", "y"',
    # body framing
    b"Content-Length: 0",
    b"Content-Length: abc",
    b"Content-Length: -1",
    b"Content-Length: +0",
    b"Content-Length: 0, 0",
    b"Content-Length: 00",
    b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip",
    b"Transfer-Encoding: chunked, gzip",
    b"Transfer-Encoding : chunked",
    b"Expect: 100-continue",
    b"Upgrade: websocket",
    # aiohttp's other singletons
    b"User-Agent: u",
    b"Content-Type: a/b",
    b'ETag: "e"',
    b"Server: s",
    b"Max-Forwards: 1",
    b"Content-Location: /x",
    b"Content-Range: bytes 0-1/2",
    # others, and odd forms of them
    b"Accept: */*",
    b"X-Empty:",
    b"X-Tab:\tv\tw\t",
    b"X-Folded: a",
    b" folded",
    b"\tfolded",
    b"X-Nul: a\x00b",
    b"X-Del: a\x7fb",
    b"X-High: caf\xc3\xa9",
    b"X-Latin: caf\xe9",
    b"X-CR: a\rb",
    b"X-LF: a\nHost: u",
    b"X Y: z",
    b"X@Y: z",
    b"X-Colon:: z",
    b": no name",
    b"NoColon",
    b"X-Long: " + b"a" * (MAX_LINE - 8),
    b"X-Long: " + b"a" * (MAX_LINE - 7),
    b"X-Long: " + b"a" * (MAX_LINE + 10),
]
ALPHABET = b"\r\n\t :,\x00\x7f\x80aA/?%#.\"'\\"


# Fields the lane takes one of (with a Host): most generated heads are made of these, so that the corpus
# holds as many heads the lane answers as heads it leaves to aiohttp.
USUAL = [
    f
    for f in FIELDS
    if recognize(b"GET /v1/attachments/%s HTTP/1.1\r\nHost: t\r\n%s" % (REF.encode(), f), MAX_LINE)
    and not f.lower().startswith(b"host")
]


def _field(rng: random.Random, usual: bool) -> bytes:
    return rng.choice(USUAL) if usual or rng.random() < 0.5 else rng.choice(FIELDS)


def generated(rng: random.Random) -> bytes:
    """A head, its parts drawn mostly from the usual forms, now and then from the odd ones."""
    usual = rng.random() < 0.5
    method = METHODS[0] if usual or rng.random() < 0.5 else rng.choice(METHODS)
    target = TARGETS[0] if usual or rng.random() < 0.4 else rng.choice(TARGETS)
    version = VERSIONS[0] if usual or rng.random() < 0.5 else rng.choice(VERSIONS)
    separator = b" " if usual or rng.random() < 0.7 else rng.choice(SEPARATORS)
    fields = [_field(rng, usual) for _ in range(rng.randrange(0, 6))]
    if rng.random() < 0.85:
        fields.insert(rng.randrange(len(fields) + 1), b"Host: t")
    if rng.random() < 0.5:
        fields.insert(rng.randrange(len(fields) + 1), b"Authorization: " + rng.choice([ALICE, MALLORY]))
    if rng.random() < 0.03:
        fields += [b"X-Many: m"] * rng.choice([MAX_HEADERS - len(fields) - 1, MAX_HEADERS - len(fields) + 1])
    line = method + separator + target + separator + version
    return b"\r\n".join([line, *fields]) + b"\r\n\r\n"


def mutated(rng: random.Random, head: bytes) -> bytes:
    """A head with one to three bytes replaced, inserted or deleted, or a line repeated or cut short."""
    data = bytearray(head)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(data))
        how = rng.randrange(5)
        if how == 0:
            data[at] = rng.choice(ALPHABET)
        elif how == 1:
            data.insert(at, rng.choice(ALPHABET))
        elif how == 2 and len(data) > 1:
            del data[at]
        elif how == 3:
            data[at] = data[at] ^ 0x20 if chr(data[at]).isalpha() else data[at]
        else:
            lines = bytes(data).split(b"\r\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            data = bytearray(b"\r\n".join(lines))
    return bytes(data)


def heads() -> Iterator[bytes]:
    rng = random.Random(SEED)
    for _ in range(3000):
        yield generated(rng)
    for _ in range(3000):
        yield mutated(rng, generated(rng))


def lane_reads(stream: bytes) -> tuple[Get, bytes] | None:
    """What the lane answers at the start of `stream`, and the bytes it takes for that request; None where
    it hands the connection to aiohttp."""
    end = stream.find(b"\r\n\r\n")
    if end < 0:
        return None
    get = recognize(stream[:end], MAX_LINE)
    return None if get is None else (get, stream[: end + 4])


@dataclass
class Read:
    """What a parser reads of a request: the parts of it that decide the lane's answer."""

    method: str
    target: str
    version: str
    authorization: list[str]
    if_none_match: list[str]
    request_id: list[str]
    close: bool
    body: bool


def _expected(get: Get) -> Read:
    def one(value: str | None) -> list[str]:
        return [] if value is None else [value]

    authorization = [get.authorization] if get.authorization else []
    target = f"/v1/attachments/{get.ref}"
    return Read(
        "GET", target, "1.1", authorization, one(get.if_none_match), one(get.request_id), get.close, False
    )


def _authorization(values: list[str]) -> list[str]:
    """The Authorization fields of a request, an empty one as none: both are the lane's "" (no token)."""
    return [] if values == [""] else values


SENTINEL_READ = Read("", "/sentinel", "", [], [], [], False, False)


def _aiohttp(parser_class: Any, stream: bytes) -> tuple[list[Read], str | None]:
    """The requests aiohttp's parser reads in `stream`, configured as the daemon's (app.make_app), and its
    refusal, if any. On the running loop, which the parser's payloads belong to."""
    loop = asyncio.get_running_loop()
    parser = parser_class(
        BaseProtocol(loop),
        loop,
        2**16,
        max_line_size=MAX_LINE,
        max_field_size=MAX_LINE,
        max_headers=MAX_HEADERS,
    )
    try:
        messages, _, _ = parser.feed_data(stream)
    except Exception as e:
        return [], f"{type(e).__name__}: {e}"
    reads = []
    for message, payload in messages:
        if message.path == "/sentinel":
            reads.append(SENTINEL_READ)
            continue
        headers = message.headers
        reads.append(
            Read(
                message.method,
                message.path,
                f"{message.version.major}.{message.version.minor}",
                _authorization(headers.getall("Authorization", [])),
                headers.getall("If-None-Match", []),
                headers.getall("X-Request-Id", []),
                message.should_close,
                message.chunked or payload is not EMPTY_PAYLOAD,
            )
        )
    return reads, None


def _h11(stream: bytes) -> tuple[list[Read], str | None]:
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_LINE * (MAX_HEADERS + 1))
    connection.receive_data(stream)
    reads: list[Read] = []
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return reads, None
            if isinstance(event, h11.Request):
                values = {
                    name: [v.decode("latin-1") for n, v in event.headers if n == name]
                    for name in (b"authorization", b"if-none-match", b"x-request-id", b"connection")
                }
                tokens = {t.strip().lower() for v in values[b"connection"] for t in v.split(",")}
                target = event.target.decode("latin-1")
                reads.append(
                    Read(
                        event.method.decode("latin-1"),
                        target,
                        event.http_version.decode("latin-1"),
                        _authorization(values[b"authorization"]),
                        values[b"if-none-match"],
                        values[b"x-request-id"],
                        "close" in tokens or event.http_version != b"1.1",
                        False,
                    )
                    if target != "/sentinel"
                    else SENTINEL_READ
                )
            elif isinstance(event, h11.Data):
                reads[-1].body = True
            elif isinstance(event, h11.EndOfMessage):
                if connection.their_state is h11.MUST_CLOSE:
                    return reads, None
                connection.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
                connection.send(h11.EndOfMessage())
                connection.start_next_cycle()
    except h11.RemoteProtocolError as e:
        return reads, f"RemoteProtocolError: {e}"


PARSERS = {
    "aiohttp C": lambda s: _aiohttp(HttpRequestParserC, s),
    "aiohttp Python": lambda s: _aiohttp(HttpRequestParserPy, s),
    "h11": _h11,
}


async def test_whatever_the_lane_answers_every_parser_reads_as_the_lane_does() -> None:
    taken = left = 0
    disagreements: list[str] = []
    for case, head in enumerate(heads()):
        read = lane_reads(head + SENTINEL)
        if read is None:
            left += 1
            continue
        taken += 1
        get, request = read
        expected = _expected(get)
        for name, parse in PARSERS.items():
            # The request the lane answers, then the next one where the lane's ends; or alone, where it
            # closes the connection (aiohttp refuses bytes after it, h11 reads none).
            reads, refusal = parse(request if expected.close else request + SENTINEL)
            wanted = [expected] if expected.close else [expected, SENTINEL_READ]
            if refusal is not None or reads != wanted:
                disagreements.append(
                    f"case {case}: {name} reads {reads} ({refusal}) where the lane reads {get}, in {head!r}"
                )
    assert not disagreements, "\n".join(disagreements[:20])
    # Neither side is vacuous: the corpus holds plenty of heads of each.
    assert taken > 1000, (taken, left)
    assert left > 1000, (taken, left)
