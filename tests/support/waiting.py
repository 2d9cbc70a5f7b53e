"""Waiting for what another task, thread or process does. A guard against a hang, never a measure: tests
never time things, so the wait is long enough for any loaded machine, and a condition that still does not
hold after it fails the test with what was awaited."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

import pytest

HANG = 60.0  # seconds


def until(
    condition: Callable[[], object], what: str = "the condition", seconds: float = HANG, every: float = 0.05
) -> None:
    """Poll `condition` from this thread until it holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {seconds:g} s"
        time.sleep(every)


async def eventually(
    condition: Callable[[], object | Awaitable[object]],
    what: str = "the condition",
    seconds: float = HANG,
    every: float = 0.01,
) -> None:
    """Poll `condition` (a coroutine function too) on the loop until it holds, letting other tasks run in
    between."""
    deadline = asyncio.get_running_loop().time() + seconds

    async def holds() -> object:
        held = condition()
        return await held if inspect.isawaitable(held) else held

    while not await holds():
        assert asyncio.get_running_loop().time() < deadline, f"still waiting for {what} after {seconds:g} s"
        await asyncio.sleep(every)


async def let_run(turns: int = 5) -> None:
    """A few turns of the loop, in which each task that can go on runs until it waits again: what has not
    happened after them waits for something else (a return, a place, a thread), never for time."""
    for _ in range(turns):
        await asyncio.sleep(0)


def jumping_clock(monkeypatch: pytest.MonkeyPatch, by: float) -> asyncio.Event:
    """The running loop's clock jumps `by` seconds ahead once the event returned is set, and only then: a
    bound on that clock runs out when the test says so, never because the machine is slow."""
    jumped = asyncio.Event()
    loop = asyncio.get_running_loop()
    clock = loop.time
    monkeypatch.setattr(loop, "time", lambda: clock() + (by if jumped.is_set() else 0.0))
    return jumped
