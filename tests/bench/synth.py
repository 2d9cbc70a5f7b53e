"""Synthesize a store of N small objects quickly (setup for the scale scenario, not measured).

Every object is a valid 1x1 PNG of about 300 bytes, made different from the others by a tEXt chunk carrying
its number, so that verified reads (hash and header against the row) and the audit find them intact. Files
are written straight into the layout (objects/sha256/ab/cd/<hex>, mode 0444) without fsync, by one process
per core; rows go into `objects` and `grants` (tenant '') with executemany, in ref order, in one transaction.
The schema is the real one: the store is opened once with `Store.open` so that its migrations create it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import struct
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from attachstore.config import Config
from attachstore.refs import Checker
from attachstore.service import Store

from .procs import CHECK_KEY

OBJECT_SIZE = 300
_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


_HEAD = (
    _SIGNATURE
    + _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    + _chunk(b"IDAT", zlib.compress(b"\x00\x80\x80\x80"))
)
_TAIL = _chunk(b"IEND", b"")
_PAD = OBJECT_SIZE - len(_HEAD) - len(_TAIL) - 12 - len(b"bench\x00") - 16


def tiny_object(i: int) -> bytes:
    """Object number `i`: a 1x1 PNG of OBJECT_SIZE bytes."""
    text = b"bench\x00" + b"%016x" % i + b"." * _PAD
    return _HEAD + _chunk(b"tEXt", text) + _TAIL


def _write_range(args: tuple[str, int, int]) -> tuple[bytes, list[str]]:
    """Write objects lo..hi-1 under `objects`; return their sha256 digests, concatenated, and their keyed
    checks (with the bench's key, procs.CHECK_KEY), in the same order."""
    objects, lo, hi = args
    checker = Checker(bytes.fromhex(CHECK_KEY))
    checks: list[str] = []
    root = Path(objects) / "sha256"
    made: set[str] = set()
    digests = bytearray()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in range(lo, hi):
        data = tiny_object(i)
        digest = hashlib.sha256(data).digest()
        digests += digest
        checks.append(checker.of(f"sha256:{digest.hex()}", len(data), "image/png", data))
        hex_ = digest.hex()
        bucket = f"{root}/{hex_[0:2]}/{hex_[2:4]}"
        if bucket not in made:
            os.makedirs(bucket, exist_ok=True)
            made.add(bucket)
        fd = os.open(f"{bucket}/{hex_}", flags, 0o444)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return bytes(digests), checks


def synthesize(data_dir: Path, n: int, processes: int | None = None) -> dict[str, Any]:
    """A store at `data_dir` holding objects 0..n-1. Returns timings (seconds) of its parts."""
    started = time.perf_counter()
    config = msgspec.convert({"data_dir": str(data_dir), "integrity": {"check_key": CHECK_KEY}}, Config)

    async def migrate() -> None:
        store = await Store.open(config, workers=1)
        await store.close()

    asyncio.run(migrate())
    opened = time.perf_counter()
    processes = processes or os.cpu_count() or 1
    step = max(1, -(-n // (processes * 8)))
    ranges = [(str(data_dir / "objects"), lo, min(n, lo + step)) for lo in range(0, n, step)]
    if processes > 1 and n >= 5_000:
        with ProcessPoolExecutor(processes) as pool:
            parts = list(pool.map(_write_range, ranges))
    else:
        parts = [_write_range(r) for r in ranges]
    written = time.perf_counter()
    blob = b"".join(p[0] for p in parts)
    checks = [c for p in parts for c in p[1]]
    rows = sorted(
        ("sha256:" + blob[i : i + 32].hex(), c) for i, c in zip(range(0, len(blob), 32), checks, strict=True)
    )
    refs = [r for r, _ in rows]
    now = time.time()
    old = now - 7 * 86400  # admitted a week ago: past any grace
    db = sqlite3.connect(data_dir / "index.sqlite3", isolation_level=None)
    try:
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -262144")
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO objects (ref, media_type, bytes, width, height, frames, name, created_at, lease_at,"
            " state, keyed_check) VALUES (?, 'image/png', ?, 1, 1, 1, NULL, ?, ?, 'ok', ?)",
            ((r, OBJECT_SIZE, old, old, c) for r, c in rows),
        )
        db.executemany("INSERT INTO grants (tenant, ref) VALUES ('', ?)", ((r,) for r in refs))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    indexed = time.perf_counter()
    return {
        "objects": n,
        "lease_at": old,
        "open_s": opened - started,
        "files_s": written - opened,
        "index_s": indexed - written,
        "total_s": indexed - started,
    }


# -- the cache ----------------------------------------------------------------------------------------------
#
# Deleting is what is slow here: on this machine's disk (ext4 mounted with `discard`) removing 100,000 small
# files takes minutes, synthesizing them seconds. So synthesized stores are kept between runs under
# <repo>/.bench/scale/ (git-ignored) and reset at the start of each run instead: whatever an earlier run
# admitted into them is removed, so that they hold exactly the synthesized objects again.

FORMAT = 4  # bump when tiny_object(), the layout or the checks change: older caches are rebuilt
MARKER = "bench-synth.json"
BLOCK = 4096


def needed_bytes(n: int) -> int:
    """Disk for n small objects: a block each, the bucket directories, the index (about 0.5 KB a row)."""
    return n * (BLOCK + 512) + min(n, 65536) * BLOCK


def room(directory: Path) -> tuple[int, int]:
    """Free bytes and free inodes where `directory` lives."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize, st.f_favail


def fitting(directory: Path, n: int) -> int:
    """The largest size up to `n` that leaves a fifth of the free space and inodes untouched (a cached store
    of that size is already on the disk: it fits)."""
    if (directory / f"objects-{n}-v{FORMAT}" / MARKER).exists():
        return n
    directory.mkdir(parents=True, exist_ok=True)
    free, inodes = room(directory)
    best = n
    while best > 1000 and (needed_bytes(best) > free * 0.8 or best + 65792 > inodes * 0.8):
        best //= 2
    return best


@contextlib.contextmanager
def locked(cache: Path) -> Any:
    """One bench at a time on the cache."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _reset(data_dir: Path, lease_at: float) -> int:
    """Remove every object that the synthesis did not make (admitted by an earlier run); returns how many."""
    db = sqlite3.connect(data_dir / "index.sqlite3", isolation_level=None)
    try:
        extra = [
            r[0]
            for r in db.execute(
                "SELECT ref FROM objects WHERE lease_at > ? OR created_at > ?", (lease_at, lease_at)
            )
        ]
        db.execute("BEGIN")
        db.execute("DELETE FROM sessions")  # holds cascade
        db.executemany("DELETE FROM grants WHERE ref = ?", ((r,) for r in extra))
        db.executemany("DELETE FROM objects WHERE ref = ?", ((r,) for r in extra))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    for ref in extra:
        algorithm, digest = ref.split(":")
        with contextlib.suppress(FileNotFoundError):
            (data_dir / "objects" / algorithm / digest[0:2] / digest[2:4] / digest).unlink()
    for leftover in [*(data_dir / "tmp").glob("*"), *(data_dir / "quarantine").glob("*")]:
        with contextlib.suppress(OSError):
            leftover.unlink()
    return len(extra)


def count(data_dir: Path) -> int:
    db = sqlite3.connect(data_dir / "index.sqlite3")
    try:
        return int(db.execute("SELECT count(*) FROM objects").fetchone()[0])
    finally:
        db.close()


def prepare(cache: Path, n: int) -> tuple[Path, dict[str, Any]]:
    """A store of exactly the n synthesized objects: the cached one, reset, or a new one."""
    data_dir = cache / f"objects-{n}-v{FORMAT}"
    marker = data_dir / MARKER
    info: dict[str, Any] | None = None
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(marker.read_text())
    if info and info.get("objects") == n and info.get("object_size") == OBJECT_SIZE:
        started = time.perf_counter()
        try:
            removed = _reset(data_dir, float(info["lease_at"]))
            if count(data_dir) == n:
                return data_dir, {
                    "objects": n,
                    "reused": True,
                    "removed_from_earlier_runs": removed,
                    "reset_s": time.perf_counter() - started,
                    "first_synthesis_s": info.get("total_s"),
                }
        except sqlite3.Error:
            pass
    if data_dir.exists():
        shutil.rmtree(data_dir)  # damaged or of another format: slow here, but rare
    made = synthesize(data_dir, n)
    marker.write_text(json.dumps(made | {"object_size": OBJECT_SIZE}))
    return data_dir, made | {"reused": False}


def sample_refs(data_dir: Path, k: int, seed: int = 1) -> list[str]:
    """`k` refs of the store, spread over the whole key space (random, deterministic)."""
    db = sqlite3.connect(data_dir / "index.sqlite3")
    try:
        (count,) = db.execute("SELECT count(*) FROM objects").fetchone()
        step = max(1, count // k)
        rows = db.execute(
            "SELECT ref FROM (SELECT ref, row_number() OVER (ORDER BY ref) AS n FROM objects)"
            " WHERE n % ? = ?",
            (step, seed % step),
        ).fetchall()
    finally:
        db.close()
    refs = [r[0] for r in rows][:k]
    # Visit them in a scattered order, not in key order.
    return [refs[(i * 7919) % len(refs)] for i in range(len(refs))] if len(refs) % 7919 else refs
