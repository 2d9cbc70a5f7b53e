"""api/drain.py: stopping lets the requests in progress finish, up to the shutdown bound, then cancels."""

from __future__ import annotations

import asyncio

import pytest

from attachstore.api.drain import Drain
from tests.support.waiting import eventually, jumping_clock


async def test_stopping_waits_for_what_is_in_progress_then_cancels_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bound runs out when the test says so: the loop's clock jumps past it once `expired` is set.
    within = 3600.0
    expired = jumping_clock(monkeypatch, 2 * within)
    drain = Drain()
    answered, never = asyncio.Event(), asyncio.Event()
    finishing = asyncio.create_task(answered.wait())
    stuck = asyncio.create_task(never.wait())
    drain.begin(finishing)
    drain.begin(stuck)
    stopping = asyncio.create_task(drain.finish(within))
    await eventually(lambda: drain.stopping, "the drain to begin")
    answered.set()
    await eventually(finishing.done, "the request in progress to finish")
    assert not finishing.cancelled()
    await asyncio.sleep(0)
    assert not stopping.done()  # the other one is still in progress, and the bound is not reached
    assert not stuck.done()
    expired.set()
    await stopping
    assert stuck.cancelled()


async def test_stopping_with_nothing_in_progress_ends_at_once() -> None:
    drain = Drain()
    done = asyncio.create_task(asyncio.sleep(0))
    drain.begin(done)
    await done
    await asyncio.wait_for(drain.finish(3600.0), 60)
    assert drain.stopping
