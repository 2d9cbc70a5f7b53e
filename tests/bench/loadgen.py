"""The bundled load generator: HTTP/1.1 keep-alive over asyncio streams, in its own process.

    python -m tests.bench.loadgen URL --connections N --duration S         # GET URL for S seconds
    python -m tests.bench.loadgen URL --paths FILE ...                     # cycle through the paths in FILE
    python -m tests.bench.loadgen URL --body FILE --content-type T ...     # POST FILE again and again
    python -m tests.bench.loadgen URL --bodies FILE --content-type T -c N  # POST each listed file once
    python -m tests.bench.loadgen URL --at-least-one ...                   # every connection makes one

It prints one JSON object: requests, rps, p50_ms, p99_ms, max_ms, errors, bytes, seconds. A request counts as
an error when the connection fails or the status is not 2xx. Latency runs from the first byte written to the
last byte of the answer read. It is written for speed rather than generality: no TLS, no redirects, bodies
sized by Content-Length or chunked.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    bytes: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


class _Closed(Exception):
    pass


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, int, bool]:
    """Status, body length, and whether the server keeps the connection open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length: int | None = None
    chunked = False
    keep = not lines[0].startswith(b"HTTP/1.0")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif name == b"connection":
            keep = b"close" not in value.lower()
    size = 0
    if chunked:
        while True:
            n = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if n == 0:
                await reader.readuntil(b"\r\n")  # no trailers expected
                break
            size += len(await reader.readexactly(n + 2)) - 2
    elif length is not None:
        size = length
        remaining = length
        while remaining:
            chunk = await reader.read(min(remaining, 1 << 20))
            if not chunk:
                raise _Closed
            remaining -= len(chunk)
    elif status not in (204, 304):
        size = len(await reader.read())
        keep = False
    return status, size, keep


class Client:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, head: bytes, body: bytes | None) -> tuple[int, int]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        assert self.reader is not None
        self.writer.write(head)
        if body:
            self.writer.write(body)
        await self.writer.drain()
        status, size, keep = await _read_answer(self.reader)
        if not keep:
            self.close()
        return status, size

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _head(method: str, host: str, path: str, content_type: str | None, length: int | None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "User-Agent: attachstore-bench"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _worker(
    client: Client,
    jobs: Iterator[tuple[bytes, bytes | None]],
    deadline: float,
    tally: Tally,
    at_least_one: bool = False,
) -> None:
    clock = time.perf_counter
    first = at_least_one
    for head, body in jobs:
        if clock() >= deadline and not first:
            return
        first = False
        start = clock()
        try:
            status, size = await client.request(head, body)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, _Closed, ValueError):
            client.close()
            tally.errors += 1
            await asyncio.sleep(0.001)
            continue
        tally.latencies.append(clock() - start)
        tally.bytes += size
        tally.statuses[status] = tally.statuses.get(status, 0) + 1
        if not 200 <= status < 300:
            tally.errors += 1


async def run(
    url: str,
    connections: int,
    duration: float | None,
    *,
    paths: list[str] | None = None,
    body: bytes | None = None,
    bodies: list[bytes] | None = None,
    content_type: str | None = None,
    at_least_one: bool = False,
) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    authority = f"{host}:{port}"
    base_path = parts.path or "/"
    method = "POST" if body is not None or bodies is not None else "GET"
    jobs: Iterator[tuple[bytes, bytes | None]]
    if bodies is not None:
        # Each body once, shared by all connections: the run ends when the list does.
        jobs = iter([(_head(method, authority, base_path, content_type, len(b)), b) for b in bodies])
        deadline = float("inf") if duration is None else time.perf_counter() + duration
    else:
        heads = [
            _head(method, authority, p, content_type, None if body is None else len(body))
            for p in (paths or [base_path])
        ]
        jobs = ((h, body) for h in itertools.cycle(heads))
        deadline = time.perf_counter() + (duration or 1.0)
    tally = Tally()
    clients = [Client(host, port) for _ in range(connections)]
    start = time.perf_counter()
    await asyncio.gather(*(_worker(c, jobs, deadline, tally, at_least_one) for c in clients))
    seconds = time.perf_counter() - start
    for c in clients:
        c.close()
    lat = sorted(tally.latencies)
    return {
        "tool": "bundled",
        "requests": len(lat),
        "rps": len(lat) / seconds if seconds > 0 else 0.0,
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": (lat[-1] if lat else float("nan")) * 1000,
        "errors": tally.errors,
        "bytes": tally.bytes,
        "seconds": seconds,
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.bench.loadgen", description=__doc__.split("\n")[0])
    p.add_argument("url", help="http://host:port/path (the path is used unless --paths is given)")
    p.add_argument("-c", "--connections", type=int, default=16)
    p.add_argument("-d", "--duration", type=float, help="seconds (default 5; with --bodies: until done)")
    p.add_argument("--paths", type=Path, help="a file with one request path per line, cycled through")
    p.add_argument("--body", type=Path, help="POST this file's bytes on every request")
    p.add_argument("--bodies", type=Path, help="a file listing body files: each is POSTed exactly once")
    p.add_argument("--content-type", help="Content-Type of the POSTed bodies")
    p.add_argument(
        "--at-least-one",
        action="store_true",
        help="every connection makes a request, even one that starts after the duration is over",
    )
    args = p.parse_args(argv)
    paths = args.paths.read_text().split() if args.paths else None
    body = args.body.read_bytes() if args.body else None
    bodies = [Path(line).read_bytes() for line in args.bodies.read_text().split()] if args.bodies else None
    duration = args.duration if args.duration is not None or bodies is not None else 5.0
    result = asyncio.run(
        run(
            args.url,
            args.connections,
            duration,
            paths=paths,
            body=body,
            bodies=bodies,
            content_type=args.content_type,
            at_least_one=args.at_least_one,
        )
    )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
