"""The read lane's safety as a tested property: it answers a request only where aiohttp would, framed as
aiohttp and h11 frame it, with the Authorization they read; and a daemon with the lane answers every byte
stream exactly as one without it does. One seeded corpus (random.Random(SEED): a failure names its case, and
reproduces), in two halves.

- Heads, in process: generated heads (odd forms of every part: folding, tabs, case, spaces, duplicate or
  absent Host, bad Content-Length, Transfer-Encoding, absolute-form and other targets, HTTP/1.0 and others,
  keep-alive and close, bytes out of range, lines at the bounds) and mutations of them, each followed by a
  second request. Wherever `recognize` (at the end the lane finds) takes one, aiohttp's C and Python parsers,
  configured as the daemon configures them, and h11 must all accept it, end it where the lane ends it (the
  next request is the second one), and read the same method, target, version, Authorization,
  If-None-Match, X-Request-Id and keep-alive. An aiohttp whose strictness changes fails here.
- Byte streams: generated pipelines mixing the lane's reads and aiohttp's requests (a query, a HEAD, /meta,
  a POST with a body, chunked or not, 401s, 404s, 304s), with odd heads of the first half among them, sent
  whole to two real daemons, `[http] read_lane = true` and `false`, past the 64 KiB at which the lane stops
  reading, and reset half-way; and given to the same two servers in process piece by piece, each piece one
  read of the socket (split at every boundary, a byte at a time, at random). Every answer must be the same
  (status, headers but Date and the X-Request-Id the daemon made, body), and so must the connection's end;
  where the stream is well formed, h11's reading of each request decides its answer (as many answers as
  requests, and for a read of alice's objects the status its Authorization calls for, and her bytes).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import random
import re
import socket
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
import msgspec
import pytest
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_parser import HttpRequestParserC, HttpRequestParserPy
from aiohttp.streams import EMPTY_PAYLOAD

from attachstore.api import drain, make_app
from attachstore.api.heads import MAX_HEADERS, PlainRead, possible, recognize
from attachstore.api.site import protocol_factory
from attachstore.config import Config
from tests.hostile.conftest import TOKENS, Daemon, launch
from tests.support.daemon import stop
from tests.support.images import png

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


def lane_reads(stream: bytes) -> tuple[PlainRead, bytes] | None:
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


def _expected(get: PlainRead) -> Read:
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


# Byte streams, against two real daemons: one with the lane, one without.

FINAL = b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"  # every stream ends with it
_DATE = re.compile(rb"\r\nDate: [^\r\n]*")
_MADE_ID = re.compile(rb"\r\nX-Request-Id: [0-9a-f]{32}(?=\r\n)")  # one the daemon made (observe._Ids)


@dataclass
class Served:
    daemon: Daemon
    a: str  # alice's objects, the same in both daemons
    b: str

    @property
    def port(self) -> int:
        return int(self.daemon.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    """Two daemons, alike but for `[http] read_lane`, each holding the same objects of alice's."""
    started: dict[str, Daemon] = {}
    try:
        for name, lane in (("lane", True), ("aiohttp", False)):
            root = tmp_path_factory.mktemp(f"differential-{name}")
            sections = {"http": {"read_lane": lane, "keepalive_timeout": "5s"}}
            started[name] = launch(root / "data", root / "config.toml", root / "daemon.log", sections)
        served = {}
        for name, daemon in started.items():
            daemon.wait_ready("/healthz")
            refs = [daemon.admit("alice", image) for image in IMAGES]
            served[name] = Served(daemon, *refs)
        assert served["lane"].a == served["aiohttp"].a
        yield served
    finally:
        stop(started.values())


IMAGES = [png(20, 20), png(24, 24, seed=1)]
TINY = png(8, 8, seed=2)


def _request(line: bytes, *fields: bytes, body: bytes = b"") -> bytes:
    return b"\r\n".join([line, *fields]) + b"\r\n\r\n" + body


def well_formed(a: str, b: str) -> list[bytes]:
    """Requests every parser reads alike: the lane's reads and aiohttp's requests (a request of each kind
    the lane leaves to aiohttp: a query, a HEAD, /meta, a POST with a body, chunked or not)."""
    ra, rb = (f"/v1/attachments/{r}".encode() for r in (a, b))
    host, alice, mallory = b"Host: t", b"Authorization: " + ALICE, b"Authorization: " + MALLORY
    admission = json.dumps({"source": "user", "images": [{"data": base64.b64encode(TINY).decode()}]}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(admission), admission)
    post = b"POST /v1/attachments HTTP/1.1"
    return [
        _request(b"GET " + ra + b" HTTP/1.1", host, alice),
        _request(b"GET " + rb + b" HTTP/1.1", host, alice, b"User-Agent: t/1"),
        _request(b"GET " + ra + b" HTTP/1.1", host, mallory),
        _request(b"GET " + ra + b" HTTP/1.1", host),
        _request(b"GET " + ra + b" HTTP/1.1", host, b"Authorization: Bearer nope"),
        _request(b"GET " + ra + b" HTTP/1.1", host, alice, b'If-None-Match: "%s"' % a.encode()),
        _request(b"GET " + rb + b" HTTP/1.1", host, alice, b'If-None-Match: "other"'),
        _request(
            b"GET " + ra + b" HTTP/1.1", host, alice, b"X-Request-Id: mine-7", b"Connection: keep-alive"
        ),
        _request(b"GET /v1/attachments/sha256:abc HTTP/1.1", host, alice),
        _request(b"GET /v1/attachments/sha256:%s HTTP/1.1" % (b"0" * 64), host, alice),
        _request(b"GET " + ra + b"? HTTP/1.1", host, alice),
        _request(b"GET " + rb + b"?x=1 HTTP/1.1", host, mallory),
        _request(b"HEAD " + ra + b" HTTP/1.1", host, alice),
        _request(b"GET " + ra + b"/meta HTTP/1.1", host, alice),
        _request(b"GET /healthz HTTP/1.1", host),
        _request(b"GET http://t" + ra + b" HTTP/1.1", host, alice),
        _request(
            post,
            host,
            alice,
            b"Content-Type: application/json",
            b"Content-Length: %d" % len(admission),
            body=admission,
        ),
        _request(
            post, host, alice, b"Content-Type: application/json", b"Transfer-Encoding: chunked", body=chunked
        ),
    ]


def _odd(rng: random.Random, a: str) -> bytes:
    """A head of the first half's corpus, for alice's object."""
    head = generated(rng) if rng.random() < 0.5 else mutated(rng, generated(rng))
    return head.replace(REF.encode(), a.encode())


def _varying(answered: bytes) -> bytes:
    """What a daemon sent back, less what varies: the Date, and the X-Request-Id it made."""
    return _MADE_ID.sub(b"\r\nX-Request-Id: *", _DATE.sub(b"", answered))


def exchange(served: Served, stream: bytes) -> bytes:
    """Send `stream` on one connection and return what the daemon sent back until it closed it."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", served.port), timeout=60) as s:  # a guard against a hang

        def send() -> None:
            with contextlib.suppress(OSError):  # closed by the daemon: what it answered is compared
                s.sendall(stream)

        sender = threading.Thread(target=send)
        sender.start()
        try:
            while piece := s.recv(1 << 20):
                received += piece
        except ConnectionResetError:
            received += b"<reset>"
        sender.join()
    return _varying(bytes(received))


def _same(daemons: dict[str, Served], stream: bytes) -> bytes:
    lane, aiohttp = (exchange(daemons[name], stream) for name in ("lane", "aiohttp"))
    assert lane == aiohttp, f"for {stream!r}"
    return lane


def _answers(stream: bytes, methods: list[bytes]) -> list[tuple[int, bytes]]:
    """The status and body of each answer in `stream`, the answers to `methods` in order (1xx skipped)."""
    answers, at, asked = [], 0, iter(methods)
    while at < len(stream):
        end = stream.index(b"\r\n\r\n", at)
        lines = stream[at:end].split(b"\r\n")
        status = int(lines[0].split()[1])
        at = end + 4
        if status < 200:
            continue
        fields = dict(line.split(b": ", 1) for line in lines[1:])
        length = 0 if next(asked) == b"HEAD" or status == 304 else int(fields[b"Content-Length"])
        answers.append((status, stream[at : at + length]))
        at += length
    return answers


def _h11_requests(stream: bytes) -> list[h11.Request]:
    """The requests h11 reads in `stream`, every one of them, or the test fails."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(stream)
    requests = []
    while True:
        event = connection.next_event()
        if isinstance(event, h11.Request):
            requests.append(event)
        elif isinstance(event, h11.EndOfMessage):
            if connection.their_state is h11.MUST_CLOSE:
                break
            connection.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
            connection.send(h11.EndOfMessage())
            connection.start_next_cycle()
        elif not isinstance(event, h11.Data):
            raise AssertionError(f"h11 reads {event!r} in a stream of whole requests, the last closing")
    return requests


def _as_h11_reads_them(served: Served, stream: bytes, answered: bytes) -> None:
    """Each answer is the one h11's reading of its request calls for: as many answers as requests, and
    for each read of alice's objects, the status its Authorization decides and her bytes."""
    requests = _h11_requests(stream)
    answers = _answers(answered, [r.method for r in requests])
    assert len(answers) == len(requests)
    images = {
        f"/v1/attachments/{ref}".encode(): image
        for ref, image in zip((served.a, served.b), IMAGES, strict=True)
    }
    for request, (status, body) in zip(requests, answers, strict=True):
        if request.method != b"GET" or request.target not in images:
            continue
        fields = {name: value for name, value in request.headers}
        token = fields.get(b"authorization", b"").partition(b" ")[2].strip()
        wanted = {TOKENS["alice"].encode(): 200, TOKENS["mallory"].encode(): 404}.get(token, 401)
        if wanted == 200 and fields.get(b"if-none-match") == b'"%s"' % request.target.rsplit(b"/", 1)[1]:
            wanted = 304
        assert status == wanted, (request, status, body[:200])
        if status == 200:
            assert body == images[request.target]


def cases(served: Served, count: int, seed: int, odd: bool) -> Iterator[list[bytes]]:
    """`count` pipelines of one to five requests, of the lane's and aiohttp's, the last closing; with
    `odd`, a head of the first half's corpus now and then among them."""
    rng = random.Random(seed)
    pool = well_formed(served.a, served.b)
    for _ in range(count):
        requests = [
            _odd(rng, served.a) if odd and rng.random() < 0.25 else rng.choice(pool)
            for _ in range(rng.randrange(1, 6))
        ]
        yield [*requests, FINAL]


def test_pipelines_are_answered_alike_with_and_without_the_lane(daemons: dict[str, Served]) -> None:
    for pipeline in cases(daemons["lane"], 60, SEED, odd=False):
        stream = b"".join(pipeline)
        answered = _same(daemons, stream)
        _as_h11_reads_them(daemons["lane"], stream, answered)


def test_odd_heads_among_them_are_answered_alike(daemons: dict[str, Served]) -> None:
    for pipeline in cases(daemons["lane"], 120, SEED + 1, odd=True):
        _same(daemons, b"".join(pipeline))


def test_pipelines_past_the_64_kib_at_which_the_lane_stops_reading_are_answered_alike(
    daemons: dict[str, Served],
) -> None:
    served = daemons["lane"]
    pool = well_formed(served.a, served.b)
    rng = random.Random(SEED + 2)
    # About 150 KB of requests, nine in ten the lane's (reads, 401s, 404s, 304s), one in ten aiohttp's.
    requests = [rng.choice(pool[:10] if rng.random() < 0.9 else pool[10:]) for _ in range(1200)]
    stream = b"".join(requests) + FINAL
    assert len(stream) > 2 * 64 * 1024
    answered = _same(daemons, stream)
    _as_h11_reads_them(served, stream, answered)


def test_a_connection_reset_half_way_through_a_pipeline_leaves_both_daemons_answering_alike(
    daemons: dict[str, Served],
) -> None:
    pool = well_formed(daemons["lane"].a, daemons["lane"].b)
    pipeline = (pool[0] + pool[10] + pool[1]) * 200
    for served in daemons.values():
        with socket.create_connection(("127.0.0.1", served.port), timeout=60) as s:
            s.sendall(pipeline)
            received = b""
            while len(received) < 20_000 and (piece := s.recv(1 << 16)):
                received += piece
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # reset, with most of the pipeline unanswered
    for _ in range(3):  # and the next connections are answered as ever, by both
        stream = pool[0] + pool[10] + pool[5] + FINAL
        _as_h11_reads_them(daemons["lane"], stream, _same(daemons, stream))


# Pieces as the server reads them, exactly: the two servers in this process, each piece given to the
# connection's protocol as one segment read (the lane, or aiohttp's after a hand-over), the answers read off
# a real socket.


class Server:
    """The daemon's server (server.serve_on), in this process: the app behind the lane, or alone."""

    def __init__(self, root: Path, lane: bool) -> None:
        tenants = [
            {"name": t, "token_sha256": hashlib.sha256(v.encode()).hexdigest()} for t, v in TOKENS.items()
        ]
        http = {"read_lane": lane, "mapped_reads": False}
        self.config = msgspec.convert(
            {"data_dir": str(root), "admission": {"decode_workers": 1}, "http": http, "tenants": tenants},
            Config,
        )

    async def __aenter__(self) -> Server:
        self.app = make_app(self.config)
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        self.factory = protocol_factory(self.runner)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await drain(self.app, 1)
        await self.runner.cleanup()

    async def exchange(self, pieces: list[bytes]) -> bytes:
        """Give `pieces` to a new connection, each as one read of the socket, and return what the server
        sent back until it closed the connection."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        with ours:
            ours.setblocking(False)
            transport, _ = await loop.connect_accepted_socket(self.factory, theirs)
            transport.pause_reading()  # nothing comes from the socket: the pieces are given here
            for piece in pieces:
                if transport.is_closing():
                    break
                transport.get_protocol().data_received(piece)
                await asyncio.sleep(0)
            received = bytearray()
            async with asyncio.timeout(60):  # a guard against a hang
                while piece := await loop.sock_recv(ours, 1 << 20):
                    received += piece
        return _varying(bytes(received))


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[dict[str, Server]]:
    async with Server(tmp_path / "lane", True) as lane, Server(tmp_path / "aiohttp", False) as aiohttp:
        yield {"lane": lane, "aiohttp": aiohttp}


async def _alike(servers: dict[str, Server], pieces: list[bytes]) -> bytes:
    lane, aiohttp = [await servers[name].exchange(pieces) for name in ("lane", "aiohttp")]
    assert lane == aiohttp, f"for {b''.join(pieces)!r} given as {[len(p) for p in pieces]}"
    return lane


async def _refs(servers: dict[str, Server]) -> tuple[str, str]:
    """Alice's objects, admitted to both servers alike."""
    admissions = []
    for image in IMAGES:
        body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]}).encode()
        head = b"POST /v1/attachments HTTP/1.1\r\nHost: t\r\nAuthorization: %s\r\n" % ALICE
        head += b"Content-Type: application/json\r\n"
        admissions.append(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    refs = []
    for admission in admissions:
        answer = await _alike(servers, [admission])
        refs.append(json.loads(answer.partition(b"\r\n\r\n")[2])["attachments"][0]["ref"])
    return refs[0], refs[1]


async def test_a_pipeline_split_at_every_boundary_is_answered_alike(servers: dict[str, Server]) -> None:
    a, b = await _refs(servers)
    pool = well_formed(a, b)
    # the lane's, aiohttp's, the lane's; aiohttp's HEAD, the lane's 304
    for stream in (pool[0] + pool[10] + pool[2] + FINAL, pool[12] + pool[5] + FINAL):
        whole = await _alike(servers, [stream])
        for at in range(1, len(stream)):
            assert await _alike(servers, [stream[:at], stream[at:]]) == whole, at


async def test_a_pipeline_given_a_byte_at_a_time_is_answered_alike(servers: dict[str, Server]) -> None:
    a, b = await _refs(servers)
    pool = well_formed(a, b)
    for stream in (pool[7] + pool[17] + pool[4] + FINAL, pool[5] + pool[12] + pool[1] + FINAL):
        whole = await _alike(servers, [stream])
        assert await _alike(servers, [stream[i : i + 1] for i in range(len(stream))]) == whole


async def test_odd_heads_split_at_random_are_answered_alike(servers: dict[str, Server]) -> None:
    a, b = await _refs(servers)
    rng = random.Random(SEED + 3)
    for _ in range(150):
        stream = b"".join(
            rng.choice(well_formed(a, b)) if rng.random() < 0.5 else _odd(rng, a) for _ in range(3)
        )
        stream += FINAL
        cuts = sorted(rng.sample(range(1, len(stream)), 3))
        pieces = [stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        await _alike(servers, pieces)


def test_every_start_of_a_head_the_lane_takes_may_still_become_one() -> None:
    # `possible` judges the start of a head that a read left unfinished: never wrongly, for what the lane
    # takes (it would hand over what it could have answered); and refusing the starts it must refuse.
    rng = random.Random(SEED + 4)
    taken = [read[1] for read in map(lane_reads, heads()) if read is not None]
    for request in rng.sample(taken, 40):
        assert all(possible(request[:i], MAX_LINE) for i in range(len(request))), request
    assert not possible(b"GET\t/v1", MAX_LINE)
    assert not possible(b"GET /v1/attachments/sha256:ab HTTP/1.0", MAX_LINE)
    assert not possible(b"GET /v1/attachments/a HTTP/1.1\r\nHost: a\r\nHost: b\r\n", MAX_LINE)
    assert not possible(b"GET /v1/attachments/a HTTP/1.1\r\nContent-Length: 1", MAX_LINE)
    assert not possible(b"GET /v1/attachments/a HTTP/1.1\r\nX@", MAX_LINE)
