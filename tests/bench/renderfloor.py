"""The render scenario's floor: the same work as a render's answer, by the least code, in one process.

For each render, every object file of the conversation is read, checked with the keyed check (what reads
verify with), encoded as base64 with the daemon's encoder (pybase64) and sent over a loopback TCP connection
to another process that reads everything and throws it away, as the load generator reads the daemon's
answer. No HTTP, no JSON around the images, no index: what is left of a render is what its answer physically
costs on these cores.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from pathlib import Path

import blake3
import pybase64

from .stats import Sample, timed


def _drain(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        while conn.recv(1 << 20):
            pass


def floor_render(files: list[Path], seconds: float, key: bytes) -> Sample:
    """Renders one after another for `seconds` (at least one)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        reader = multiprocessing.get_context("fork").Process(target=_drain, args=(listener,))
        reader.start()
        try:
            with socket.create_connection(listener.getsockname()) as out:
                latencies: list[float] = []
                deadline = time.perf_counter() + seconds
                start = time.perf_counter()
                while time.perf_counter() < deadline or not latencies:
                    t0 = time.perf_counter()
                    for f in files:
                        data = f.read_bytes()
                        blake3.blake3(data, key=key).hexdigest()
                        out.sendall(pybase64.b64encode(data))
                    latencies.append(time.perf_counter() - t0)
                seconds_run = time.perf_counter() - start
        finally:
            reader.join(timeout=30)
            if reader.is_alive():
                reader.kill()
    return timed("in-process", latencies, seconds_run)
