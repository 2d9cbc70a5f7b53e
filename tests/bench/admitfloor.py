"""The admit scenario's floor: the physical work of an admission, and nothing of attachstore's.

    python -m tests.bench.admitfloor DIR PROCESSES LIST [--base64]   # prints a Result as JSON

LIST names one file per image: its bytes, or with --base64 its base64 text (a JSON upload's). PROCESSES
processes (one per core, as many as decode) take the images in turn, and for each do what no admission that
keeps SPEC's promises can skip: (JSON) one base64 decode, with the decoder the daemon uses (pybase64); a
full decode of every frame with Pillow; sha256; a staging file in DIR/tmp written, fsynced and closed,
linked to its object path under DIR/objects, the directory chain fsynced up to objects/, the staging name
removed; one SQLite commit of its row (WAL, synchronous=FULL, one database for all the processes). Each
process decodes on its one thread and hands the durable write and the commit to a few threads of its own,
so that the core decodes the next image while the disk syncs the last (as the daemon overlaps them). No
HTTP, no body parsing, no gate checks beyond the decode, no pipes between processes, no asyncio. An image's
latency runs from its decode to its commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import secrets
import sqlite3
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pybase64

from attachstore.transcripts.files import fsync_dir

from .stats import timed

_IO_THREADS = 4  # per process: fsyncs wait on the disk, and meanwhile the core decodes the next image

_root = Path()
_paths: list[str] = []
_next: Any = None  # the index of the next image to take, shared by the processes


class _Writer:
    """The process's one writer connection, behind a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.db: sqlite3.Connection | None = None

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


_writer = _Writer()


def _connect(root: Path) -> sqlite3.Connection:
    db = sqlite3.connect(root / "index.sqlite3", isolation_level=None, timeout=30, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


def _start(root: str, paths: list[str], counter: Any) -> None:
    global _root, _paths, _next
    from PIL import Image  # noqa: F401  # imported before the clock starts

    _root, _paths, _next = Path(root), paths, counter


def _decode(raw: bytes, is_base64: bool) -> tuple[bytes, str]:
    from PIL import Image

    data = pybase64.b64decode(raw, validate=True) if is_base64 else raw
    with Image.open(io.BytesIO(data)) as im:
        for frame in range(getattr(im, "n_frames", 1)):
            im.seek(frame)
            im.load()
    return data, hashlib.sha256(data).hexdigest()


def _durable(data: bytes, digest: str) -> float:
    """The durable write and the commit; returns when they were done."""
    objects = _root / "objects"
    bucket = objects / "sha256" / digest[:2] / digest[2:4]
    staging = _root / "tmp" / f"{secrets.token_hex(16)}.tmp"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.fchmod(fd, 0o444)
    finally:
        os.close(fd)
    bucket.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.link(staging, bucket / digest)
    d = bucket
    while True:
        fsync_dir(d)
        if d == objects:
            break
        d = d.parent
    os.unlink(staging)
    # One writer connection per process, its commits one at a time, as the daemon's: connections of one
    # process contending for SQLite's lock would spend their time in its busy handler's sleeps.
    with _writer:
        db = _writer.db
        if db is None:
            db = _writer.db = _connect(_root)
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "INSERT OR REPLACE INTO objects (ref, bytes, created_at) VALUES (?, ?, ?)",
            (f"sha256:{digest}", len(data), time.time()),
        )
        db.execute("COMMIT")
    return time.perf_counter()


def _take() -> int:
    with _next.get_lock():
        i = int(_next.value)
        _next.value = i + 1
    return i


def run(is_base64: bool) -> list[float]:
    """This process's share: images taken in turn until none is left; each one's seconds."""
    pending: list[tuple[float, Future[float]]] = []
    with ThreadPoolExecutor(_IO_THREADS) as io_threads:
        while (i := _take()) < len(_paths):
            raw = Path(_paths[i]).read_bytes()
            started = time.perf_counter()
            data, digest = _decode(raw, is_base64)
            pending.append((started, io_threads.submit(_durable, data, digest)))
    return [done.result() - started for started, done in pending]  # a failure fails the run


def measure(root: Path, paths: list[str], processes: int, is_base64: bool) -> dict[str, float | str]:
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    (root / "objects").mkdir(exist_ok=True)
    db = _connect(root)
    db.execute("CREATE TABLE IF NOT EXISTS objects (ref TEXT PRIMARY KEY, bytes INTEGER, created_at REAL)")
    db.close()
    context = multiprocessing.get_context("spawn")
    counter = context.Value("i", 0)
    with context.Pool(processes, initializer=_start, initargs=(str(root), paths, counter)) as pool:
        pool.map(time.sleep, [0.0] * processes)  # every process started and ready
        started = time.perf_counter()
        shares = pool.map(run, [is_base64] * processes, chunksize=1)
        seconds = time.perf_counter() - started
    latencies = [x for share in shares for x in share]
    return timed("floor", latencies, seconds)


def main() -> None:
    args = sys.argv[1:]
    is_base64 = "--base64" in args
    root, processes, listing = (a for a in args if a != "--base64")
    paths = [line for line in Path(listing).read_text().splitlines() if line]
    json.dump(measure(Path(root), paths, int(processes), is_base64), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
