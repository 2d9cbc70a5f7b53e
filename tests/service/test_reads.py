"""Verified reads (service/reads.py): how the header check of a read is run."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest

from attachstore.gate import probe_header
from attachstore.service import Store, reads
from tests.support import images
from tests.support.store import plant


def _deferred(store: Store) -> float:
    value = store.metrics.registry.get_sample_value("attachstore_header_probes_deferred_total")
    return 0.0 if value is None else value


async def test_a_jpeg_admitted_before_the_header_bound_is_read_without_walking_it_on_the_loop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads never re-apply admission limits (SPEC section 4): a JPEG with 917,000 empty segments before
    its frame header, admitted before the gate refused such files, stays readable, and its header is walked
    in full off the event loop, once; on the loop every probe stops after a fixed number of steps."""
    loop_thread = threading.current_thread()
    probes: list[tuple[bool, bool]] = []  # (bounded, on the loop's thread)

    def recorded(data: Any, *, bounded: bool = False) -> Any:
        probes.append((bounded, threading.current_thread() is loop_thread))
        return probe_header(data, bounded=bounded)

    monkeypatch.setattr(reads, "probe_header", recorded)
    deep = images.jpeg_padded(images.jpeg(16, 16), segments=917_000)
    ordinary = images.jpeg(16, 16, seed=1)
    old = await plant(store, deep, "image/jpeg", 16, 16)
    new = await plant(store, ordinary, "image/jpeg", 16, 16)

    answers = await asyncio.gather(*(store.read(str(old)) for _ in range(8)))
    assert all(data == deep for _, data in answers)
    _, data = await store.read(str(new))
    assert data == ordinary

    assert all(bounded for bounded, on_loop in probes if on_loop)
    # The full walk: once, in a thread.
    assert [on_loop for bounded, on_loop in probes if not bounded] == [False]
    assert _deferred(store) == 1


async def test_a_deep_header_that_does_not_fit_its_row_is_corrupt(store: Store) -> None:
    deep = images.jpeg_padded(images.jpeg(16, 16), segments=5_000)
    ref = await plant(store, deep, "image/jpeg", 16, 17)  # the row says another size
    for _ in range(2):
        with pytest.raises(Exception, match="does not match its bytes") as info:
            await store.read(str(ref))
        assert getattr(info.value, "code", None) == "ATTACHMENT_CORRUPT"


async def test_readers_that_leave_do_not_start_the_full_walk_again(store: Store) -> None:
    """A reader that disconnects is cancelled; the walk it started runs on, and the next reader shares it
    rather than starting another in a thread of its own."""
    deep = images.jpeg_padded(images.jpeg(16, 16), segments=300_000)
    ref = await plant(store, deep, "image/jpeg", 16, 16)
    for _ in range(5):
        gone = asyncio.create_task(store.read(str(ref)))
        await asyncio.sleep(0.01)
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
    _, data = await store.read(str(ref))
    assert data == deep
    assert _deferred(store) == 1
