"""Verified reads (service/reads.py): how the header check of a read is run; and reads racing gc and heals:
what a read finds wrong with a file is settled under the ref's lock (Index.settle), so a ref gc collected
meanwhile answers ATTACHMENT_NOT_FOUND (not MISSING, and no integrity failure), and a read's mark never lands
after the publish of a heal. Each race is driven step by step with hooks on the awaits between the steps."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from attachstore.errors import Corrupt, NotFound, ServerBusy
from attachstore.gate import probe_header
from attachstore.index import Hold
from attachstore.maintenance import gc
from attachstore.refs import Ref
from attachstore.render import RenderRequest, render
from attachstore.service import Store, Upload, headers
from tests.conftest import MakeConfig
from tests.support import images
from tests.support.faults import flip_byte
from tests.support.images import png
from tests.support.store import plant
from tests.support.waiting import eventually


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

    monkeypatch.setattr(headers, "probe_header", recorded)
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


async def test_a_read_claims_its_size_before_it_reads_and_a_refusal_reads_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget of answers in flight counts a read from before its bytes are read, so that reads waiting
    for a thread hold nothing outside it."""
    image = png(40, 40)
    ref = await plant(store, image, "image/png", 40, 40)
    assert store.resident is not None
    store.resident.enabled = False  # every read goes to the blob store, as an object too large to be resident
    read = store.blobs.read
    events: list[str] = []

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        events.append("read")
        return await read(*args, **kwargs)

    def claim(n: int) -> None:
        events.append(f"claim {n}")

    def refuse(n: int) -> None:
        raise ServerBusy("the budget is spent")

    monkeypatch.setattr(store.blobs, "read", recorded)
    _, data = await store.read(str(ref), None, claim)
    assert data == image
    assert events == [f"claim {len(image)}", "read"]
    events.clear()
    with pytest.raises(ServerBusy):
        await store.read(str(ref), None, refuse)
    assert events == []


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
        await eventually(lambda gone=gone: gone.done() or _deferred(store) >= 1, "the walk to start")
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
    _, data = await store.read(str(ref))
    assert data == deep
    assert _deferred(store) == 1


TENANTS = [{"name": n, "token_sha256": hashlib.sha256(n.encode()).hexdigest()} for n in ("alpha", "beta")]


async def put(store: Store, image: bytes, tenant: str = "") -> str:
    return (await store.admit([Upload.of_bytes(image)], "user", tenant=tenant)).attachments[0].ref


async def collect(store: Store, ref: str) -> None:
    """What `attachstore gc --grace 0s` does to an unheld object."""
    result = await gc.execute(store, await gc.plan(store, grace=0, now=10**10))
    assert ref in result.collected


def sample(store: Store, name: str, **labels: str) -> float:
    return store.metrics.registry.get_sample_value(name, labels) or 0.0


def after_lookup(
    store: Store, method: str, then: Callable[[], Awaitable[object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run `then()` once, right after the index answers the next call of `method` (get or get_many)."""
    real = getattr(store.index, method)
    done = False

    async def hooked(*args: Any) -> Any:
        nonlocal done
        found = await real(*args)
        if not done:
            done = True
            await then()
        return found

    monkeypatch.setattr(store.index, method, hooked)


async def state_of(store: Store, ref: str) -> str | None:
    row = await store.index.get(ref)
    return None if row is None else row.state


def integrity_failures(store: Store) -> float:
    return sum(sample(store, "attachstore_integrity_failures_total", kind=k) for k in ("corrupt", "missing"))


@pytest.mark.parametrize("resident", [True, False])
async def test_a_read_that_gc_overtakes_is_not_found(
    store: Store, monkeypatch: pytest.MonkeyPatch, resident: bool
) -> None:
    """The read looks the row up, gc collects the object (file, then row), the read finds no file."""
    ref = await put(store, png(12, 12))
    if not resident and store.resident is not None:
        store.resident.enabled = False  # the thread path
    after_lookup(store, "get", lambda: collect(store, ref), monkeypatch)
    with pytest.raises(NotFound, match="no attachment"):
        await store.read(ref)
    assert integrity_failures(store) == 0
    assert sample(store, "attachstore_reads_total", result="not_found") == 1
    assert sample(store, "attachstore_reads_total", result="missing") == 0


async def test_a_render_that_gc_overtakes_reports_the_image_unavailable(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await Store.open(make_config(routes={"vision": {"input_modalities": ["text", "image"]}}))
    try:
        gone, kept = await put(store, png(12, 12, seed=1)), await put(store, png(12, 12, seed=2))
        await store.index.create_session(("", "s"), None, 1.0)
        await store.index.add_holds(Hold(("", "s"), lambda s: None, everything=True), [kept], 1.0)
        after_lookup(store, "get_many", lambda: collect(store, gone), monkeypatch)
        blocks = [{"type": "image", "ref": r} for r in (gone, kept)]
        request = {
            "provider": "anthropic",
            "route": "vision",
            "messages": [{"role": "user", "content": blocks}],
        }
        rendered = await render(store, msgspec.convert(request, RenderRequest))
        assert (rendered.summary.included, rendered.summary.unavailable) == (1, 1)
        assert integrity_failures(store) == 0
        assert sample(store, "attachstore_reads_total", result="not_found") == 1
    finally:
        await store.close()


async def test_an_object_collected_and_admitted_again_by_another_tenant_stays_out_of_sight(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Collected after alpha's look-up, admitted again by beta before alpha's read looks under the lock:
    the file is back, but not for alpha, whose grant went with the old row."""
    store = await Store.open(make_config(tenants=TENANTS))
    try:
        image = png(10, 10, seed=3)
        ref = await put(store, image, "alpha")
        if store.resident is not None:
            store.resident.enabled = False
        after_lookup(store, "get", lambda: collect(store, ref), monkeypatch)
        real_settle = store.index.settle

        async def settle(*args: Any) -> Any:
            await put(store, image, "beta")
            return await real_settle(*args)

        monkeypatch.setattr(store.index, "settle", settle)
        with pytest.raises(NotFound):
            await store.read(ref, "alpha")
        monkeypatch.undo()
        assert bytes((await store.read(ref, "beta"))[1]) == image
        assert integrity_failures(store) == 0
    finally:
        await store.close()


class PausedAdmission:
    """An admission of `image` that stops right after it renewed the lease, until `resume()`; `publishing`
    is set when it comes to publish, `blocked` says whether the index's write lock was held then."""

    def __init__(self, store: Store, image: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
        self.renewed, self.publishing, self._go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.blocked = False
        renew, publish = store.index.renew, store.index.publish

        async def renewing(*args: Any) -> Any:
            found = await renew(*args)
            self.renewed.set()
            await self._go.wait()
            return found

        async def publishing(*args: Any, **kwargs: Any) -> Any:
            self.blocked = store.index._lock.locked()  # a read settling its finding holds it
            self.publishing.set()
            return await publish(*args, **kwargs)

        monkeypatch.setattr(store.index, "renew", renewing)
        monkeypatch.setattr(store.index, "publish", publishing)
        self.task = asyncio.ensure_future(store.admit([Upload.of_bytes(image)], "user"))

    def resume(self) -> None:
        self._go.set()


async def test_a_quarantine_beside_a_heal_never_leaves_the_row_quarantined(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admission renews the lease, the read looks the row up (with that lease), finds the bytes damaged
    and moves them aside; the admission then heals the file and publishes; only then would the read mark
    the row. Before, that mark matched the lease and the row stayed 'quarantined' over intact bytes: every
    later read answered ATTACHMENT_CORRUPT without looking. Now the move and the mark are one step under
    the ref's lock, which the heal's publish waits for."""
    image = png(16, 16, seed=4)
    ref = await put(store, image)
    assert store.local is not None
    flip_byte(store.local.path(Ref.parse(ref)))
    admission = PausedAdmission(store, image, monkeypatch)
    await admission.renewed.wait()
    quarantine = store.blobs.quarantine

    async def quarantining(r: Ref) -> str:
        found = await quarantine(r)
        admission.resume()  # the heal goes ahead: it finds no file and writes it
        await admission.publishing.wait()
        if not admission.blocked:
            await admission.task  # its publish commits before the read's mark
        return found

    monkeypatch.setattr(store.blobs, "quarantine", quarantining)
    with pytest.raises(Corrupt):
        await store.read(ref)  # what it read was damaged
    await admission.task
    assert await state_of(store, ref) == "ok"
    assert bytes((await store.read(ref))[1]) == image


async def test_a_heal_before_the_quarantine_is_read_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order: healed between the damaged read and the move, the bytes are put back and served."""
    image = png(16, 16, seed=5)
    ref = await put(store, image)
    assert store.local is not None
    flip_byte(store.local.path(Ref.parse(ref)))
    if store.resident is not None:
        store.resident.enabled = False
    read = store.blobs.read
    healed = False

    async def reading(r: Ref, size: int, **kwargs: Any) -> bytes:
        nonlocal healed
        try:
            return await read(r, size, **kwargs)
        finally:
            if not healed:
                healed = True
                await put(store, image)

    monkeypatch.setattr(store.blobs, "read", reading)
    assert bytes((await store.read(ref))[1]) == image
    assert await state_of(store, ref) == "ok"
    assert integrity_failures(store) == 0


async def test_the_audits_repair_settles_under_the_lock_too(store: Store) -> None:
    image = png(16, 16, seed=6)
    ref = await put(store, image)
    assert store.local is not None
    flip_byte(store.local.path(Ref.parse(ref)))
    assert await store.reads.quarantine(Ref.parse(ref)) == "quarantined"
    assert await state_of(store, ref) == "quarantined"
    await collect(store, ref)
    assert await store.reads.quarantine(Ref.parse(ref)) is None  # no row: nothing to settle
