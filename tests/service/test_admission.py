"""How admission runs the gate's deep checks (service/admission.py, `_validate`): decode work stops once
the verdict is known or the request is cancelled, one request's decodes share a time budget, and one
tenant's queue of images does not hold up another's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from attachstore.errors import Rejected
from attachstore.gate import pool as pool_module
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from tests.conftest import MakeConfig
from tests.support import images
from tests.support.faults import RecordingOps
from tests.support.waiting import eventually, let_run

BOMB_SCANS = 20_000  # about 50 s of decoding: only a time bound or a cancellation stops it
VISION = {"vision": {"input_modalities": ["text", "image"]}}

OpenStore = Callable[..., Any]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The image of every job handed to a decode worker, in order."""
    jobs: list[bytes] = []
    ask = pool_module._Worker.ask

    async def recorded(self: Any, job: Any, shared: Any = None) -> Any:
        jobs.append(job.data if shared is None else bytes(shared.seal()))
        return await ask(self, job, shared)

    monkeypatch.setattr(pool_module._Worker, "ask", recorded)
    return jobs


@pytest.fixture
async def open_store(make_config: MakeConfig) -> AsyncIterator[OpenStore]:
    opened: list[Store] = []

    async def open_(**sections: Any) -> Store:
        store = await Store.open(make_config(**sections))
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()


def _bomb() -> bytes:
    return images.jpeg_scan_bomb(BOMB_SCANS)


def _broken() -> bytes:
    return images.truncate(images.png(16, 12), 60)  # passes the cheap checks, fails at once in a worker


async def test_a_hard_batch_stops_decoding_once_its_first_failure_decides(
    open_store: OpenStore, sent: list[bytes]
) -> None:
    store = await open_store(admission={"decode_timeout": "2s"})
    batch = [_broken(), _bomb(), _bomb(), images.png(8, 8)]
    with pytest.raises(Rejected) as info:
        await store.admit([Upload.of_bytes(b) for b in batch], "user")
    assert (info.value.code, info.value.index) == ("INVALID_IMAGE", 0)
    assert sent == [batch[0]]  # the siblings queued behind it were cancelled before a worker took them


async def test_the_first_failure_in_input_order_still_decides(
    open_store: OpenStore, sent: list[bytes]
) -> None:
    # Two workers: the broken image at 1 fails first, but the bomb at 0 comes first and decides.
    store = await open_store(admission={"decode_workers": 2, "decode_timeout": "1s"})
    batch = [_bomb(), _broken(), images.jpeg_scan_bomb(BOMB_SCANS + 1)]
    with pytest.raises(Rejected) as info:
        await store.admit([Upload.of_bytes(b) for b in batch], "user")
    assert (info.value.code, info.value.index) == ("INVALID_IMAGE", 0)
    assert "longer than 1 s" in info.value.message
    assert batch[2] not in sent  # the bomb after the failure never reached a worker


async def test_a_cancelled_admission_kills_its_decode_and_starts_no_more(
    open_store: OpenStore, sent: list[bytes]
) -> None:
    store = await open_store(admission={"decode_timeout": "60s"})
    bombs = [Upload.of_bytes(_bomb()) for _ in range(3)]
    admitting = asyncio.create_task(store.admit(bombs, "user"))
    await eventually(lambda: len(sent) == 1)
    admitting.cancel()  # what the HTTP edge does when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await admitting
    registry = store.metrics.registry
    assert registry.get_sample_value("attachstore_decodes_total", {"result": "cancelled"}) == 1
    assert registry.get_sample_value("attachstore_decodes_running") == 0
    labels = {"source": "user", "result": "cancelled"}
    assert registry.get_sample_value("attachstore_admissions_total", labels) == 1
    assert len(sent) == 1
    [ok] = (await store.admit([Upload.of_bytes(images.png(8, 8))], "user")).attachments
    assert ok.width == 8


async def test_a_soft_batch_decodes_no_longer_than_the_request_budget(
    open_store: OpenStore, sent: list[bytes]
) -> None:
    store = await open_store(
        admission={"decode_timeout": "1s", "request_decode_timeout": "1.5s"}, routes=VISION
    )
    result = await store.admit([Upload.of_bytes(_bomb()) for _ in range(4)], "tool", route="vision")
    assert result.degraded
    assert [d.code for d in result.diagnostics] == ["INVALID_IMAGE"] * 4
    messages = [d.message for d in result.diagnostics]
    assert "longer than 1 s" in messages[0]
    assert "longer than 1.5 s in all" in messages[1]
    assert all("used up their 1.5 s of decoding" in m for m in messages[2:])
    assert len(sent) == 2  # one second and half a second of decoding; the other two never reached a worker


async def test_one_tenants_queued_images_do_not_hold_up_anothers(
    open_store: OpenStore, sent: list[bytes]
) -> None:
    store = await open_store(admission={"decode_timeout": "1s"}, routes=VISION)
    bombs = [images.jpeg_scan_bomb(BOMB_SCANS + n) for n in range(4)]
    mallory = asyncio.ensure_future(
        store.admit([Upload.of_bytes(b) for b in bombs], "tool", route="vision", tenant="mallory")
    )
    await eventually(lambda: len(sent) == 1)
    photo = images.png(8, 8)
    admitted = await store.admit([Upload.of_bytes(photo)], "user", tenant="alice")
    assert admitted.attachments[0].width == 8
    assert sent[:2] == [bombs[0], photo]  # alice's image went to the worker next, before mallory's queue
    assert (await mallory).degraded


class _HeldFsync(RecordingOps):
    """FileOps whose first fsync of an object waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.go = threading.Event()

    def fsync(self, fd: int) -> None:
        if not self.reached.is_set():
            self.reached.set()
            self.go.wait(30)
        super().fsync(fd)


async def test_an_admission_cancelled_while_it_stores_finishes_and_publishes(make_config: MakeConfig) -> None:
    """Once its images passed, an admission's client leaving does not cut it off half-way: its files are
    written in threads that cannot be stopped, and cancelled there it would leave unindexed objects behind
    for gc and the audit. It finishes, and publishes, as one whose answer was lost."""
    ops = _HeldFsync()
    store = await Store.open(make_config(), ops)
    try:
        photo = images.png(8, 8)
        admitting = asyncio.create_task(store.admit([Upload.of_bytes(photo)], "user"))
        await asyncio.to_thread(ops.reached.wait, 30)
        admitting.cancel()  # the client disconnects while the object is being written
        await let_run()  # the cancellation reaches it while the write is still held
        ops.go.set()
        with pytest.raises(asyncio.CancelledError):
            await admitting
        closing = asyncio.create_task(store.close())  # and close waits for the admission to finish
        await closing
    finally:
        ops.go.set()
    store = await Store.open(make_config())
    try:
        ref = Ref.of("sha256", photo)
        assert await store.index.get(str(ref)) is not None  # published
        assert [f.ref for f in store.local.walk_objects()] == [ref]  # and nothing unindexed beside it
    finally:
        await store.close()
