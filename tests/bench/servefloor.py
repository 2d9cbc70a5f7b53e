"""The read scenario's serving floor: the least code that answers verified reads over HTTP.

    python -m tests.bench.servefloor PORT PROCESSES FILE...   # serves GET /<i> with FILE number i

PROCESSES processes (one per core, as the daemon's workers) share the port (SO_REUSEPORT), each on an event
loop (uvloop where installed, as the daemon). For every request head they open the file, read it in full,
compute its keyed check (the hash the daemon verifies with), compare it with the one made at start and write a
fixed head and the bytes, without copying them into the head. Keep-alive, nothing else: no index, no header
probe, no tenants, no log line, no metrics, no bounds, a request line taken as it comes. It is what a verified
read costs in this language over HTTP, with the same load generator on the same cores, where the ceiling
(`ceiling.py`) is the same work without HTTP and nginx the same serving without the check.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import subprocess
import sys

import blake3

from .procs import CHECK_KEY, REPO, free_port, ready_or_stopped, stop_child

_KEY = bytes.fromhex(CHECK_KEY)


class _Reads(asyncio.Protocol):
    def __init__(self, files: list[tuple[str, bytes, bytes]]) -> None:
        self.files = files
        self.pending = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.pending += data
        while (end := self.pending.find(b"\r\n\r\n")) >= 0:
            line = self.pending[: self.pending.find(b"\r\n")]
            self.pending = self.pending[end + 4 :]
            path, head, check = self.files[int(line.split(b" ")[1][1:]) % len(self.files)]
            with open(path, "rb") as f:
                data = f.read()
            if blake3.blake3(data, key=_KEY).digest() != check:
                self.transport.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
                continue
            self.transport.writelines([head, data])


def _serve(port: int, paths: list[str]) -> None:
    files = []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        files.append((path, head, blake3.blake3(data, key=_KEY).digest()))
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    loop.run_until_complete(loop.create_server(lambda: _Reads(files), sock=sock, backlog=1024))
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.run_forever()


class ServeFloor:
    """`python -m tests.bench.servefloor` on a free loopback port, serving `files` as /0, /1, ..."""

    def __init__(self, files: list[str], processes: int) -> None:
        self.files, self.processes = files, processes
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.paths = [f"/{i}" for i in range(len(files))]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServeFloor:
        cmd = [
            sys.executable,
            "-m",
            "tests.bench.servefloor",
            str(self.port),
            str(self.processes),
            *self.files,
        ]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL)
        ready_or_stopped(self.base + self.paths[0], self.proc, self.stop)
        return self

    def stop(self) -> None:
        stop_child(self.proc, (signal.SIGTERM, 10))

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    port, processes, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    children = [
        multiprocessing.get_context("spawn").Process(target=_serve, args=(port, paths))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    signal.signal(signal.SIGTERM, lambda *_: [c.terminate() for c in children])
    for child in children:
        child.join()
    os._exit(0)


if __name__ == "__main__":
    main()
