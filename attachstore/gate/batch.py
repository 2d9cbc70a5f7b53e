"""The decode jobs of one admission, by their position in it: a budget of decoder time they share, and, when
the first failure in input order decides the admission, which of them are still wanted."""

from __future__ import annotations

import asyncio

_LEAST = 0.01  # seconds: a budget with less left than this is spent


class AlreadyDecided(Exception):
    """A job that was not decoded: an image before it in its batch failed, which decides the admission."""


class Batch:
    """The jobs of one admission share `seconds` of decoder time, each job also within the pool's timeout.
    A job reserves its time before it waits for a worker and gives back what it did not use when it ends,
    so that what is used never exceeds `seconds`; a job that finds the rest reserved by its siblings waits
    for their returns, and one that finds it spent is refused without being decoded.

    With `first_failure_decides`, a failed job makes every job after it unneeded: the pool starts none of
    them, since they cannot change the verdict. The pool marks the failure before it hands the worker on."""

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
        """Up to `most` seconds for the job at `position`; 0 when the budget is spent. Raises
        AlreadyDecided."""
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
