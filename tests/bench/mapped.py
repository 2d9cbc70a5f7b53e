"""A verified read sent to a socket, three ways: copied, from a mapping made for it, from a kept mapping.

    python -m tests.bench.mapped [ROUNDS] [SIZE] [THREADS] [SEND]
        # {"copy_us", "mapped_us", "kept_us", "mapped_ratio", "kept_ratio", "rounds"} as JSON

Each way hashes every byte with the keyed check and writes a head and the body to a Unix socket that another
process drains, as the read lane does for a recalled read:

- `copy`: the bytes read from the page cache (`preadv` with `RWF_NOWAIT`) into a fresh buffer, hashed there,
  the same buffer written: the read lane with `[http] mapped_reads = false`.
- `mapped`: the file mapped read-only and hashed and written where it lies, with what that needs to keep the
  promises: a read lease held from before the hash until the bytes are in the socket (nobody can open the
  file for writing or truncate it meanwhile: an object changed under the mapping can never be served), and
  `cachestat` before it is touched (a page not in the cache would stall the event loop on the disk); then
  unmapped.
- `kept`: what the read lane does by default (`storage/mapped.py`, `Mappings`): the mapping kept from read
  to read; each read `stat`s the path, asks the lease and `cachestat`, and hashes.

20 files of SIZE bytes (283,000, the read scenario's objects), each way in turn for half a second, ROUNDS
times (7); the figures are the medians of µs per read and of the paired ratios to the copy. THREADS (0)
other threads in the process wake every half millisecond, as a serving process's index, log and pool
threads do. SEND 0 writes nothing: the reads alone. Linux 6.5 or later (`cachestat`), as root or as the
files' owner (the lease).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import blake3

from attachstore.storage.mapped import Mappings

from .procs import CHECK_KEY

_KEY = bytes.fromhex(CHECK_KEY)
_F_SETLEASE = 1024  # fcntl.F_SETLEASE where Python names it
_SYS_CACHESTAT = 451
_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_HEAD = b"HTTP/1.1 200 OK\r\n" + b"X-Header: value\r\n" * 12 + b"\r\n"


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recent")]


def _drain(fd: int, other: int) -> None:
    os.close(other)  # the writer's end, inherited: the reader sees the end only once every copy is closed
    with socket.socket(fileno=fd) as s:
        while s.recv(1 << 20):
            pass


def _ways(out: int, paths: list[str]) -> dict[str, Callable[[str], None]]:
    libc = ctypes.CDLL(None, use_errno=True)
    whole, stat = _Range(0, 0), _Stat()

    def copy(path: str) -> None:
        fd = os.open(path, _OPEN)
        try:
            data = bytearray(os.fstat(fd).st_size)
            if os.preadv(fd, [data], 0, os.RWF_NOWAIT) != len(data):
                raise OSError("short read")
        finally:
            os.close(fd)
        blake3.blake3(data, key=_KEY).digest()
        if out >= 0:
            os.writev(out, [_HEAD, data])

    def mapped(path: str) -> None:
        fd = os.open(path, _OPEN)
        try:
            size = os.fstat(fd).st_size
            fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
            if libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(stat), 0) != 0:
                raise OSError(ctypes.get_errno(), "cachestat")
            if stat.cache * mmap.PAGESIZE < size:
                raise OSError("not in the page cache")
            with mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as view:
                blake3.blake3(view, key=_KEY).digest()
                if out >= 0:
                    os.writev(out, [_HEAD, view])
            fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
        finally:
            os.close(fd)

    mappings = Mappings(len(paths), 3600)
    for path in paths:
        fd = os.open(path, _OPEN)
        st = os.fstat(fd)
        view = mappings.map(path, fd, st.st_size, (st.st_dev, st.st_ino, st.st_ctime_ns))
        if view is None:
            os.close(fd)
            raise OSError(f"{path}: no lease, or not in the page cache")
        view.served()

    def kept(path: str) -> None:
        again = mappings.again(path, os.stat(path).st_size, None)
        if again is None:
            raise OSError("the kept mapping was let go")
        view = again[0]
        blake3.blake3(view, key=_KEY).digest()
        if not view.intact():
            raise OSError("the lease broke")
        if out >= 0:
            os.writev(out, [_HEAD, view])

    return {"copy": copy, "mapped": mapped, "kept": kept}


def _wake() -> None:
    while True:
        time.sleep(0.0005)


def measure(rounds: int, size: int, threads: int = 0, send: bool = True) -> dict[str, object]:
    for _ in range(threads):
        threading.Thread(target=_wake, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(20):
            path = os.path.join(tmp, f"object-{i}")
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            paths.append(path)
        ours, theirs = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        reader = multiprocessing.get_context("fork").Process(
            target=_drain, args=(theirs.fileno(), ours.fileno())
        )
        reader.start()
        theirs.close()
        try:
            ways = _ways(ours.fileno() if send else -1, paths)
            per_read: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(rounds):
                for name, way in ways.items():
                    start, reads = time.perf_counter(), 0
                    while time.perf_counter() - start < 0.5:
                        for path in paths:
                            way(path)
                        reads += len(paths)
                    per_read[name].append((time.perf_counter() - start) / reads * 1e6)
        finally:
            ours.close()
            reader.join(timeout=30)
    out: dict[str, object] = {f"{name}_us": statistics.median(values) for name, values in per_read.items()}
    for name in ("mapped", "kept"):
        ratios = [m / c for m, c in zip(per_read[name], per_read["copy"], strict=True)]
        out[f"{name}_ratio"] = statistics.median(ratios)
    out["rounds"] = {name: [round(x, 1) for x in values] for name, values in per_read.items()}
    return out


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 283_000
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    send = sys.argv[4] != "0" if len(sys.argv) > 4 else True
    json.dump(measure(rounds, size, threads, send), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
