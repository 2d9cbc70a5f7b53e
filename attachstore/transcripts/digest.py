"""A hash fed in a thread of its own, so that hashing a transcript runs beside scanning it (hashlib and blake3
let go of the GIL on large inputs). Updates are batched, applied in order, and at most a few batches wait;
small pieces are copied into the batch, since a view would keep its whole chunk alive meanwhile."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from ..refs import Hasher, hasher

_BATCH = 1 << 20
_WAITING = 4
_SMALL = 1 << 16


class Digest:
    def __init__(self, algorithm: str = "sha256") -> None:
        self._hash = hasher(algorithm)
        self._batch: list[bytes | memoryview] = []
        self._small = bytearray()
        self._batched = 0
        self._jobs: deque[Future[None]] = deque()
        self._pool: ThreadPoolExecutor | None = None

    def update(self, data: bytes | memoryview) -> None:
        if len(data) < _SMALL:
            self._small += data
        else:
            self._keep_small()
            self._batch.append(data)
        self._batched += len(data)
        if self._batched >= _BATCH:
            self._flush()

    def hexdigest(self) -> str:
        self._flush()
        while self._jobs:
            self._jobs.popleft().result()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        return self._hash.hexdigest()

    def _keep_small(self) -> None:
        if self._small:
            self._batch.append(bytes(self._small))
            self._small.clear()

    def _flush(self) -> None:
        self._keep_small()
        if not self._batch:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="attachstore-digest")
        batch, self._batch, self._batched = self._batch, [], 0
        self._jobs.append(self._pool.submit(_feed, self._hash, batch))
        while len(self._jobs) > _WAITING:  # the thread is behind: wait for it rather than hold more
            self._jobs.popleft().result()


def _feed(h: Hasher, batch: list[bytes | memoryview]) -> None:
    for data in batch:
        h.update(data)
