"""Fair slots: at most `size` holders at once, and the waiters served in turn across keys (tenants), so that
however many jobs one tenant queues, another tenant's next job waits for at most one of them."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Hashable


class FairSlots:
    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        # Waiters by key, in the order their keys began to wait; a key leaves when its last waiter does.
        self._waiting: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._last_given: dict[Hashable, int] = {}  # a key's turn: when it was last given a slot
        self._turns = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    async def acquire(self, key: Hashable) -> None:
        if self._free and not self._waiting:
            self._free -= 1
            self._given(key)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # given the slot just as it was cancelled: pass it on
            else:
                self._drop(key, waiter)
            raise

    def release(self) -> None:
        while self._waiting:
            key = min(self._waiting, key=lambda k: self._last_given.get(k, -1))
            queue = self._waiting[key]
            waiter = queue.popleft()
            if not queue:
                del self._waiting[key]
            if not waiter.done():  # else cancelled, and not yet out of the queue
                self._given(key)
                waiter.set_result(None)
                return
        self._free += 1

    def _given(self, key: Hashable) -> None:
        self._last_given[key] = next(self._turns)  # one entry a key: the keys are tenants, a bounded set

    def _drop(self, key: Hashable, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(key)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[key]
