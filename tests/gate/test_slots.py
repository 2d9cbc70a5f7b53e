"""FairSlots (gate/slots.py): the queue for decode workers, in turn across tenants."""

from __future__ import annotations

import asyncio

import pytest

from attachstore.gate.slots import FairSlots


async def _take(slots: FairSlots, key: str, order: list[str], hold: asyncio.Event) -> None:
    await slots.acquire(key)
    try:
        order.append(key)
        await hold.wait()
    finally:
        slots.release()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _run_in_turn(slots: FairSlots, keys: list[str]) -> list[str]:
    """Queue one waiter per key, in this order, then let each hold its slot for a moment; the order they
    were served in."""
    order: list[str] = []
    hold = asyncio.Event()
    tasks = []
    for key in keys:
        tasks.append(asyncio.ensure_future(_take(slots, key, order, hold)))
        await _settle()
    hold.set()
    await asyncio.gather(*tasks)
    return order


async def test_a_tenant_that_queues_many_waits_its_turn() -> None:
    # mallory holds the slot and queues four more; alice and bob, coming later, are served next.
    order = await _run_in_turn(FairSlots(1), ["m", "m", "m", "m", "m", "a", "b"])
    assert order == ["m", "a", "b", "m", "m", "m", "m"]


async def test_turns_rotate_while_several_tenants_wait() -> None:
    order = await _run_in_turn(FairSlots(1), ["m", "m", "m", "a", "a", "a"])
    assert order == ["m", "a", "m", "a", "m", "a"]


async def test_within_one_tenant_first_come_first_served() -> None:
    slots = FairSlots(1)
    order: list[int] = []
    hold = asyncio.Event()

    async def take(n: int) -> None:
        await slots.acquire("t")
        order.append(n)
        await hold.wait()
        slots.release()

    tasks = []
    for n in range(5):
        tasks.append(asyncio.ensure_future(take(n)))
        await _settle()
    hold.set()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_size_slots_are_held_at_once_and_no_more() -> None:
    slots = FairSlots(3)
    holding = 0
    most = 0

    async def hold(key: str) -> None:
        nonlocal holding, most
        await slots.acquire(key)
        holding += 1
        most = max(most, holding)
        await asyncio.sleep(0.001)
        holding -= 1
        slots.release()

    await asyncio.gather(*(hold(k) for k in "abcabcabcaaaa"))
    assert most == 3
    assert slots.waiting == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_takes_no_slot() -> None:
    slots = FairSlots(1)
    await slots.acquire("m")
    gone = asyncio.ensure_future(slots.acquire("a"))
    await _settle()
    assert slots.waiting == 1
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert slots.waiting == 0
    slots.release()
    await asyncio.wait_for(slots.acquire("b"), 1)  # the slot is free again


async def test_a_slot_given_to_a_waiter_cancelled_at_that_moment_passes_on() -> None:
    slots = FairSlots(1)
    await slots.acquire("m")
    first = asyncio.ensure_future(slots.acquire("a"))
    second = asyncio.ensure_future(slots.acquire("b"))
    await _settle()
    slots.release()  # given to "a" ...
    first.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)  # "b" has it
    assert slots.waiting == 0
