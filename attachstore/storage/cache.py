"""The node-local read cache of the S3 backend: verified objects kept on a local disk to spare GETs."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
from collections import OrderedDict
from pathlib import Path

from ..refs import Ref
from .fileops import read_sized

_CACHE_NAME = re.compile(r"(sha256|blake3)-([0-9a-f]{64})")


class ReadCache:
    """Never trusted: every hit is re-hashed in full, a damaged entry is dropped, never served, and its
    failures are misses, never errors. Entries are renamed into place without an fsync (a torn one fails
    verification); one process per directory, since the byte count is in memory."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("a read cache needs a positive byte bound")
        self.directory = directory
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.drops = 0
        self._entries: OrderedDict[str, int] = OrderedDict()  # name → size, least recently used first
        self._bytes = 0
        self._lock = threading.Lock()  # guards the entries and every rename or unlink in the directory

    @property
    def used(self) -> int:
        return self._bytes

    def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        found: list[tuple[float, str, int]] = []
        with self._lock, os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.endswith(".part"):
                    _unlink_quietly(Path(entry.path))  # a write cut short
                elif _CACHE_NAME.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    found.append((st.st_mtime, entry.name, st.st_size))
            self._entries.clear()
            self._bytes = 0
            for _, name, size in sorted(found):
                self._entries[name] = size
                self._bytes += size
            self._evict()

    def get(self, ref: Ref, size: int) -> bytes | None:
        name = _cache_name(ref)
        path = self.directory / name
        try:
            data = read_sized(path, size)  # an entry of another size is dropped without reading it
        except OSError:
            with self._lock:
                self.misses += 1
                if not path.exists():  # gone behind our back (an add may have put it back meanwhile)
                    self._forget(name)
            return None
        if data is None or len(data) != size or not ref.matches(data):
            with self._lock:
                self.misses += 1
                self.drops += 1
                self._remove(name)
            return None
        with self._lock:
            self.hits += 1
            if name in self._entries:
                self._entries.move_to_end(name)
        with contextlib.suppress(OSError):
            os.utime(path)  # the order of use, for the next open
        return data

    def add(self, ref: Ref, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        name = _cache_name(ref)
        staging = self.directory / f".{name}.{secrets.token_hex(6)}.part"
        try:
            with open(staging, "xb") as f:
                f.write(data)
            with self._lock:
                os.replace(staging, self.directory / name)
                self._forget(name)
                self._entries[name] = len(data)
                self._bytes += len(data)
                self._evict()
        except OSError:
            _unlink_quietly(staging)

    def drop(self, ref: Ref) -> None:
        with self._lock:
            self._remove(_cache_name(ref))

    def _evict(self) -> None:
        while self._bytes > self.max_bytes:
            self._remove(next(iter(self._entries)))

    def _remove(self, name: str) -> None:
        self._forget(name)
        _unlink_quietly(self.directory / name)

    def _forget(self, name: str) -> None:
        self._bytes -= self._entries.pop(name, 0)


def _cache_name(ref: Ref) -> str:
    return f"{ref.algorithm}-{ref.digest}"


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
