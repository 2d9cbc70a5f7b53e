"""The decode jobs of one admission, by their position in it: a budget of decoder time they share, and, when
the first failure in input order decides the admission, which of them are still wanted."""

from __future__ import annotations

import asyncio

_LEAST = 0.01  # seconds: a budget with less left than this is spent


class AlreadyDecided(Exception): ...


class Batch:
    """A job reserves its time before it waits for a worker and gives back what it did not use, so that what
    is used never exceeds `seconds` (docs/design.md, "The decode worker pool"). The pool marks a failure
    before it hands the worker on."""

    def __init__(self, seconds: float, *, first_failure_decides: bool = False) -> None:
        self.seconds = seconds
        self.first_failure_decides = first_failure_decides
        self._left = seconds
        self._out = 0  # reservations not yet given back
        self._returned = asyncio.Event()
        self._failed: int | None = None  # the first position that failed

    def needed(self, position: int) -> bool:
        return self._failed is None or position < self._failed

    def failed(self, position: int) -> None:
        if self.first_failure_decides and self.needed(position):
            self._failed = position

    async def reserve(self, most: float, position: int) -> float:
        while self.needed(position) and self._left < _LEAST and self._out:
            await self._returned.wait()
        if not self.needed(position):
            raise AlreadyDecided
        granted = min(most, self._left) if self._left >= _LEAST else 0.0
        if granted:
            self._left -= granted
            self._out += 1
        return granted

    def give_back(self, granted: float, used: float) -> None:
        self._left += granted - min(used, granted)
        self._out -= 1
        self._returned.set()  # wakes the jobs waiting now; later ones wait for the next return
        self._returned = asyncio.Event()
