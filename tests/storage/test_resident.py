"""Reads on the event loop from the page cache, and the index rows they remember
(attachstore/storage/resident.py): every read still hashes the whole object; only the row's look-up is
saved, and never across scopes, files or failures."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import shutil
import stat
import time
import types
from pathlib import Path
from typing import Any

import pytest

from attachstore.errors import Corrupt, NotFound
from attachstore.maintenance import gc
from attachstore.refs import Checker, Ref
from attachstore.service import Store, Upload
from attachstore.storage import LocalBlobStore, Mapped, resident
from tests.conftest import MakeConfig
from tests.support import images
from tests.support.images import jpeg, png
from tests.support.store import age, plant

TENANTS = [{"name": n, "token_sha256": hashlib.sha256(n.encode()).hexdigest()} for n in ("alpha", "beta")]


HOUR = 3600 * 10**9


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wall clock an hour ahead: every file looks settled, so that a row is remembered unless the test
    is about why not (its file changed too recently to be told apart from a successor)."""
    monkeypatch.setattr(resident, "wall_ns", lambda: time.time_ns() + HOUR)


async def put(store: Store, image: bytes, tenant: str = "") -> str:
    result = await store.admit([Upload.of_bytes(image)], "user", tenant=tenant)
    return result.attachments[0].ref


class CountingGets:
    """Counts the index look-ups of rows until `restore()`."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        self.store = store
        self._get = store.index.get
        store.index.get = self  # type: ignore[method-assign]

    async def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return await self._get(*args)

    def restore(self) -> None:
        self.store.index.get = self._get  # type: ignore[method-assign]


async def remembered(store: Store, ref: str, tenant: str = "") -> None:
    """Read `ref` twice as `tenant`, and make sure the second read was served from the remembered row (or
    skip the test where this file system gives no RWF_NOWAIT)."""
    await store.read(ref, tenant)
    assert store.resident is not None
    if not store.resident.enabled:
        pytest.skip("the file system of the temporary directory does not support RWF_NOWAIT")
    gets = CountingGets(store)
    try:
        await store.read(ref, tenant)
    finally:
        gets.restore()
    assert gets.calls == 0


def overwrite(path: Path, offset: int, data: bytes) -> None:
    """Change the object's file in place: the same inode, other bytes."""
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def path_of(store: Store, ref: str) -> Path:
    assert store.local is not None
    return store.local.path(Ref.parse(ref))


async def test_a_second_read_is_served_without_the_index_and_still_hashed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = jpeg(64, 48)
    ref = await put(store, image)
    gets = CountingGets(store)
    hashed: list[int] = []
    holds = Checker.holds
    monkeypatch.setattr(
        Checker,
        "holds",
        lambda self, check, *bound: hashed.append(len(bound[-1])) or holds(self, check, *bound),
    )
    for _ in range(3):
        found, data = await store.read(ref)
        assert (found.ref, bytes(data)) == (ref, image)
    assert store.resident is not None
    if not store.resident.enabled:
        pytest.skip("the file system of the temporary directory does not support RWF_NOWAIT")
    assert gets.calls == 1
    assert hashed == [len(image)] * 3
    assert store.metrics.registry.get_sample_value("attachstore_reads_total", {"result": "ok"}) == 3


async def test_a_remembered_read_whose_bytes_do_not_hash_is_not_served(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = await put(store, png(9, 9))
    await remembered(store, ref)
    # What damage that leaves the file's change time alone (bit rot under the file system) looks like:
    monkeypatch.setattr(Ref, "matches", lambda self, data: False)
    monkeypatch.setattr(Checker, "holds", lambda *args: False)
    monkeypatch.setattr(
        LocalBlobStore, "_hash_file", staticmethod(lambda ref, path, size: False)
    )  # its re-check
    with pytest.raises(Corrupt):
        await store.read(ref)
    assert not path_of(store, ref).exists()  # quarantined by the usual path
    assert store.metrics.registry.get_sample_value("attachstore_reads_total", {"result": "corrupt"}) == 1


async def test_damage_in_place_is_caught(store: Store) -> None:
    image = png(9, 9, seed=1)
    ref = await put(store, image)
    await remembered(store, ref)
    overwrite(path_of(store, ref), len(image) - 5, b"\x00\x01\x02")
    with pytest.raises(Corrupt):
        await store.read(ref)
    assert not path_of(store, ref).exists()


async def test_a_row_remembered_for_one_tenant_is_not_used_for_another(make_config: MakeConfig) -> None:
    store = await Store.open(make_config(tenants=TENANTS))
    try:
        ref = await put(store, png(5, 4), tenant="alpha")
        await remembered(store, ref, "alpha")
        with pytest.raises(NotFound):
            await store.read(ref, "beta")
    finally:
        await store.close()


async def test_an_object_collected_and_admitted_again_by_another_tenant_is_not_the_first_ones(
    make_config: MakeConfig,
) -> None:
    """ext4 hands a freed inode number out again at once: the file is told apart by its change time too."""
    store = await Store.open(make_config(tenants=TENANTS))
    try:
        for seed in range(3):
            image = png(6, 6, seed=seed)
            ref = await put(store, image, tenant="alpha")
            await remembered(store, ref, "alpha")
            await age(store, 3600)
            assert ref in (await gc.execute(store, await gc.plan(store, grace=600, roots=[]))).collected
            assert await put(store, image, tenant="beta") == ref
            with pytest.raises(NotFound):
                await store.read(ref, "alpha")
            assert bytes((await store.read(ref, "beta"))[1]) == image
    finally:
        await store.close()


async def test_an_object_collected_meanwhile_is_not_found(store: Store) -> None:
    ref = await put(store, png(6, 6))
    await remembered(store, ref)
    await age(store, 3600)
    result = await gc.execute(store, await gc.plan(store, grace=600, roots=[]))
    assert result.collected == [ref]
    with pytest.raises(NotFound):
        await store.read(ref)


async def test_an_object_quarantined_by_another_process_answers_as_quarantined(store: Store) -> None:
    ref = await put(store, png(7, 3))
    await remembered(store, ref)
    # What the audit does from its own process: under the ref's lock, move the file aside and mark the row.
    assert store.local is not None
    quarantine = store.local.quarantine_dir

    async def move(row: Any) -> tuple[str, None]:
        os.rename(path_of(store, ref), quarantine / "moved")
        return "quarantined", None

    await store.index.settle(ref, None, move)
    with pytest.raises(Corrupt, match="quarantined"):
        await store.read(ref)


async def test_a_new_file_under_the_same_name_is_looked_up_again(store: Store) -> None:
    image = png(8, 2)
    ref = await put(store, image)
    await remembered(store, ref)
    path = path_of(store, ref)
    copy = path.with_name("copy")
    shutil.copyfile(path, copy)
    os.replace(copy, path)  # restored from a backup, say: the same bytes in a new file
    gets = CountingGets(store)
    _, data = await store.read(ref)
    assert bytes(data) == image
    assert gets.calls == 1


@pytest.mark.parametrize("remember", [True, False])
async def test_a_fifo_at_an_objects_path_is_corrupt_and_never_waited_on(store: Store, remember: bool) -> None:
    ref = await put(store, png(5, 5, seed=4))
    if remember:
        await remembered(store, ref)
    path = path_of(store, ref)
    path.unlink()
    os.mkfifo(path)  # a plain open() of it would wait for a writer, forever
    with pytest.raises(Corrupt, match="not a regular file"):
        await asyncio.wait_for(store.read(ref), 30)
    assert not path.exists()  # moved to quarantine
    with pytest.raises(Corrupt, match="quarantined"):
        await store.read(ref)


async def test_a_row_that_does_not_fit_its_bytes_is_corrupt_and_not_remembered(store: Store) -> None:
    image = png(9, 4, seed=2)
    ref = await put(store, image)
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET width = 10 WHERE ref = ?", (ref,))
    gets = CountingGets(store)
    for _ in range(2):
        with pytest.raises(Corrupt, match="index entry"):
            await store.read(ref)
    assert gets.calls == 2
    assert path_of(store, ref).read_bytes() == image  # good bytes are not quarantined


async def test_remembered_rows_expire(store: Store) -> None:
    assert store.resident is not None
    store.resident.ttl = 0.0
    ref = await put(store, png(4, 4))
    gets = CountingGets(store)
    await store.read(ref)
    await store.read(ref)
    assert gets.calls == 2


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every RWF_NOWAIT read answers 'not in the page cache'; yields the flags preadv was called with."""
    flags: list[int] = []

    def preadv(fd: int, buffers: list[bytearray], offset: int, flag: int = 0) -> int:
        flags.append(flag)
        raise OSError(errno.EAGAIN, "would block")

    monkeypatch.setattr(resident.os, "preadv", preadv)
    return flags


async def test_objects_not_in_the_page_cache_are_read_on_a_thread(store: Store, cold: list[int]) -> None:
    image = jpeg(40, 30, seed=3)
    ref = await put(store, image)
    gets = CountingGets(store)
    for _ in range(2):
        _, data = await store.read(ref)
        assert bytes(data) == image
    assert gets.calls == 2  # nothing remembered: the reads went the usual way
    assert cold
    assert all(f == os.RWF_NOWAIT for f in cold)
    assert store.resident is not None
    assert store.resident.enabled


async def test_large_objects_are_read_on_a_thread(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    image = png(30, 30, seed=5)
    monkeypatch.setattr(resident, "RESIDENT_MAX", len(image) - 1)
    ref = await put(store, image)
    gets = CountingGets(store)
    await store.read(ref)
    await store.read(ref)
    assert gets.calls == 2


async def test_a_file_system_without_rwf_nowait_turns_the_path_off(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def preadv(fd: int, buffers: list[bytearray], offset: int, flag: int = 0) -> int:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(resident.os, "preadv", preadv)
    image = png(3, 7)
    ref = await put(store, image)
    _, data = await store.read(ref)
    assert bytes(data) == image
    assert store.resident is not None
    assert not store.resident.enabled


async def test_a_longer_file_is_never_served_from_the_page_cache(store: Store) -> None:
    image = png(6, 5, seed=9)
    ref = await put(store, image)
    path = path_of(store, ref)
    overwrite(path, len(image), b"trailing")
    with pytest.raises(Corrupt):
        await store.read(ref)


async def test_a_file_changed_in_the_last_seconds_is_served_but_not_remembered(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = png(5, 6, seed=7)
    ref = await put(store, image)
    changed = path_of(store, ref).stat().st_ctime_ns
    # The wall clock stands at the file's change time: both reads come within SETTLED_NS of the change,
    # however long they take.
    monkeypatch.setattr(resident, "wall_ns", lambda: changed)
    gets = CountingGets(store)
    for _ in range(2):
        assert bytes((await store.read(ref))[1]) == image
    assert gets.calls == 2
    # Once it has settled, it is.
    monkeypatch.setattr(resident, "wall_ns", lambda: time.time_ns() + resident.SETTLED_NS)
    for _ in range(2):
        await store.read(ref)
    assert gets.calls == 3


class Reusing:
    """`os` for resident.py on a file system that gives the file next made at an object's path the inode
    number and change time of the one before it: ext4 hands a freed inode number out again at once, and a
    coarse clock (or a granularity of a second) stamps both files alike when they change within one tick."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[int, int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fstat(self, fd: int) -> Any:
        st = os.fstat(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if not stat.S_ISREG(st.st_mode):
            return st
        ino, ctime = self.first.setdefault(path, (st.st_ino, st.st_ctime_ns))
        return types.SimpleNamespace(
            st_dev=st.st_dev, st_ino=ino, st_ctime_ns=ctime, st_size=st.st_size, st_mode=st.st_mode
        )


async def test_a_successor_in_the_same_inode_and_tick_is_not_taken_for_the_file(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Collected and admitted again by another tenant within one tick of the change time: the new file
    has the old one's device, inode and change time. The old file was too young to be remembered, so the
    first tenant's read asks the index, which no longer grants it."""
    monkeypatch.setattr(resident, "os", Reusing())
    store = await Store.open(make_config(tenants=TENANTS))
    try:
        image = png(6, 6, seed=11)
        ref = await put(store, image, tenant="alpha")
        changed = path_of(store, ref).stat().st_ctime_ns
        monkeypatch.setattr(resident, "wall_ns", lambda: changed)  # every read within the tick of the change
        for _ in range(2):
            await store.read(ref, "alpha")
        assert store.resident is not None
        if not store.resident.enabled:
            pytest.skip("the file system of the temporary directory does not support RWF_NOWAIT")
        await age(store, 3600)
        assert ref in (await gc.execute(store, await gc.plan(store, grace=600, roots=[]))).collected
        assert await put(store, image, tenant="beta") == ref
        with pytest.raises(NotFound):
            await store.read(ref, "alpha")
    finally:
        await store.close()


@pytest.mark.parametrize(("back", "asks"), [(resident.STEP_NS // 5, 0), (2 * resident.STEP_NS, 1)])
async def test_a_wall_clock_set_back_forgets_the_remembered_rows(
    store: Store, monkeypatch: pytest.MonkeyPatch, back: int, asks: int
) -> None:
    """Set back far enough, the clock could stamp a successor with a remembered file's change time."""
    ref = await put(store, png(7, 7, seed=12))
    await remembered(store, ref)
    monkeypatch.setattr(resident, "wall_ns", lambda: time.time_ns() + HOUR - back)
    gets = CountingGets(store)
    await store.read(ref)
    assert gets.calls == asks


# -- many objects at once (a render's): Resident.read_all, Reads.verified_many ------------------------------


def test_objects_are_shared_out_by_bytes_among_the_threads() -> None:
    assert resident._shares([5, 1, 4, 2, 3], 2) == [[0, 3, 1], [2, 4]]  # 8 bytes and 7, the largest first
    assert resident._shares([7, 7], 8) == [[0], [1]]  # no thread without an object
    assert resident._shares([3], 1) == [[0]]


async def test_many_objects_are_read_in_one_thread_per_core_and_hashed_in_full(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = [jpeg(40 + i, 30, seed=i) for i in range(5)]
    refs = [await put(store, image) for image in images]
    assert store.resident is not None
    if not store.resident.enabled:
        pytest.skip("the file system of the temporary directory does not support RWF_NOWAIT")
    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counting(fn: Any, *args: Any) -> Any:
        hops.append(fn.__name__)
        return await to_thread(fn, *args)

    hashed: list[int] = []
    holds = Checker.holds
    monkeypatch.setattr(
        Checker,
        "holds",
        lambda self, check, *bound: hashed.append(len(bound[-1])) or holds(self, check, *bound),
    )
    assert store.resident is not None
    monkeypatch.setattr(store.resident, "threads", 2)
    monkeypatch.setattr(asyncio, "to_thread", counting)
    rows = await store.index.get_many(refs, None)
    wanted = [(Ref.parse(ref), rows[ref]) for ref in refs]
    found = await store.verified_many(wanted, None)
    assert [bytes(data) if data is not None else None for data in found] == images
    assert hops == ["read_share", "read_share"]
    assert sorted(hashed) == sorted(map(len, images))
    assert store.metrics.registry.get_sample_value("attachstore_reads_total", {"result": "ok"}) == 5


async def test_cold_objects_are_left_to_a_thread_each(store: Store, cold: list[int]) -> None:
    images = [png(8, 8, seed=i) for i in range(3)]
    refs = [await put(store, image) for image in images]
    assert store.resident is not None
    rows = await store.index.get_many(refs, None)
    wanted = [(Ref.parse(ref), rows[ref]) for ref in refs]
    checks = [(ref, row.bytes, lambda data: True) for ref, row in wanted]
    assert await store.resident.read_all(checks) == [None] * 3
    assert [bytes(data or b"") for data in await store.verified_many(wanted, None)] == images
    assert cold == [os.RWF_NOWAIT] * 6  # each object asked once by each batch; the usual read then reads it


async def test_a_batch_serves_no_damaged_longer_or_non_regular_file(store: Store) -> None:
    images = [png(7, 7, seed=i) for i in range(4)]
    refs = [await put(store, image) for image in images]
    rows = await store.index.get_many(refs, None)
    overwrite(path_of(store, refs[1]), len(images[1]) - 5, b"\x00\x01\x02")
    overwrite(path_of(store, refs[2]), len(images[2]), b"trailing")
    path_of(store, refs[3]).unlink()
    os.mkfifo(path_of(store, refs[3]))  # a plain open() of it would wait for a writer, forever
    wanted = [(Ref.parse(ref), rows[ref]) for ref in refs]
    found = await asyncio.wait_for(store.verified_many(wanted, None), 30)
    assert [bytes(data) if data is not None else None for data in found] == [images[0], None, None, None]
    assert store.metrics.registry.get_sample_value("attachstore_reads_total", {"result": "corrupt"}) == 3
    for ref in refs[1:]:  # each found wrong by the usual read, and moved aside
        assert not path_of(store, ref).exists()
        with pytest.raises(Corrupt, match="quarantined"):
            await store.read(ref)


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _unleased(path: Path) -> bool:
    """Nobody holds a lease on the file: opening it to write does not have to wait (with O_NONBLOCK, a
    lease makes the open fail at once instead)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except BlockingIOError:
        return False
    return True


@pytest.fixture
def mapping(store: Store) -> None:
    assert store.resident is not None
    if store.resident.mappings is None:
        pytest.skip("this kernel grants no read leases or has no cachestat (Linux 6.5)")


async def test_a_mapped_read_is_the_object_where_it_lies_hashed_in_full(
    store: Store, mapping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = jpeg(64, 48, seed=7)
    ref = await put(store, image)
    hashed: list[type] = []
    holds = Checker.holds
    monkeypatch.setattr(
        Checker,
        "holds",
        lambda self, check, *bound: hashed.append(type(bound[-1])) or holds(self, check, *bound),
    )
    before = _descriptors()
    gets = CountingGets(store)
    for _ in range(2):  # looked up, then recalled
        found, data = await store.read(ref, "", None, True)
        assert isinstance(data, Mapped)
        assert (found.ref, data[:]) == (ref, image)
        assert data.intact()
        assert not _unleased(path_of(store, ref))
        data.release()
        assert _unleased(path_of(store, ref))
    gets.restore()
    assert gets.calls == 1
    assert hashed == [Mapped, Mapped]
    assert _descriptors() == before
    _, copied = await store.read(ref)  # not asked for: a copy
    assert type(copied) is bytearray


async def test_a_mapping_whose_bytes_do_not_pass_is_let_go_and_never_served(
    store: Store, mapping: None
) -> None:
    image = png(9, 9, seed=2)
    ref = await put(store, image)
    await remembered(store, ref)
    before = _descriptors()
    overwrite(path_of(store, ref), len(image) - 5, b"\x00\x01\x02")
    with pytest.raises(Corrupt):
        await store.read(ref, "", None, True)
    assert not path_of(store, ref).exists()  # quarantined by the usual path
    assert _descriptors() == before


async def test_a_mapping_whose_header_does_not_fit_its_row_is_let_go(store: Store, mapping: None) -> None:
    image = png(12, 8, seed=4)
    ref = await put(store, image)
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET width = 13 WHERE ref = ?", (ref,))
    before = _descriptors()
    with pytest.raises(Corrupt) as raised:
        await store.read(ref, "", None, True)
    assert _unleased(path_of(store, ref))  # let go at once, not when the traceback is
    del raised
    assert _descriptors() == before


async def served(store: Store, ref: str, tenant: str = "") -> Mapped:
    """A mapped read of `ref`, sent and done with, as the read lane does."""
    _, data = await store.read(ref, tenant, None, True)
    assert isinstance(data, Mapped)
    data.served()
    return data


async def test_a_served_mapping_is_kept_and_still_hashed_in_full_on_every_read(
    store: Store, mapping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = jpeg(64, 48, seed=8)
    ref = await put(store, image)
    first = await served(store, ref)
    hashed: list[int] = []
    holds = Checker.holds
    monkeypatch.setattr(
        Checker,
        "holds",
        lambda self, check, *bound: hashed.append(len(bound[-1])) or holds(self, check, *bound),
    )
    for _ in range(3):
        assert await served(store, ref) is first
    assert first[:] == image
    assert hashed == [len(image)] * 3
    assert store.resident is not None
    assert store.resident.mappings is not None
    assert len(store.resident.mappings) == 1
    await store.close()  # lets go of what it keeps
    assert not first.intact()


async def test_a_kept_mapping_never_serves_a_collected_object(store: Store, mapping: None) -> None:
    ref = await put(store, png(6, 6, seed=5))
    first = await served(store, ref)
    await served(store, ref)  # recalled: the row is remembered too
    await age(store, 3600)
    assert (await gc.execute(store, await gc.plan(store, grace=600, roots=[]))).collected == [ref]
    with pytest.raises(NotFound):
        await store.read(ref, "", None, True)
    assert not first.intact()


async def test_a_kept_mapping_of_a_file_replaced_or_quarantined_is_let_go(
    store: Store, mapping: None
) -> None:
    image = png(8, 3, seed=6)
    ref = await put(store, image)
    first = await served(store, ref)
    path = path_of(store, ref)
    copy = path.with_name("copy")
    shutil.copyfile(path, copy)
    os.replace(copy, path)  # restored from a backup, say: the same bytes in a new file
    second = await served(store, ref)
    assert second is not first
    assert not first.intact()
    assert second[:] == image
    assert store.local is not None
    quarantine = store.local.quarantine_dir

    async def move(row: Any) -> tuple[str, None]:
        os.rename(path, quarantine / "moved")
        return "quarantined", None

    await store.index.settle(ref, None, move)
    with pytest.raises(Corrupt, match="quarantined"):
        await store.read(ref, "", None, True)
    assert not second.intact()


async def test_a_kept_mapping_whose_bytes_do_not_pass_is_let_go_and_never_served(
    store: Store, mapping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = await put(store, png(9, 9, seed=7))
    first = await served(store, ref)
    # What damage that leaves the file and its lease alone (bit rot under the file system) looks like:
    monkeypatch.setattr(Ref, "matches", lambda self, data: False)
    monkeypatch.setattr(Checker, "holds", lambda *args: False)
    monkeypatch.setattr(
        LocalBlobStore, "_hash_file", staticmethod(lambda ref, path, size: False)
    )  # its re-check
    with pytest.raises(Corrupt):
        await store.read(ref, "", None, True)
    assert not first.intact()
    assert not path_of(store, ref).exists()  # quarantined by the usual path


async def test_no_mapping_is_held_while_a_read_waits(store: Store, mapping: None) -> None:
    """A read that waits after its hash (a check to write to the index, a header to walk off the loop) copies
    the mapping first: a lease held across a wait would keep a writer waiting where no sweep reaches it."""
    unchecked = await plant(store, png(7, 7, seed=9), "image/png", 7, 7)  # a row without a keyed check
    _, data = await store.read(str(unchecked), "", None, True)
    assert type(data) is bytes
    assert _unleased(path_of(store, str(unchecked)))
    row = await store.index.get(str(unchecked), None)
    assert row is not None
    assert store.checker.mine(row.keyed_check)  # recorded from the copy
    deep = images.jpeg_padded(images.jpeg(16, 16), segments=5_000)  # a header past the bounded probe
    walked = await plant(store, deep, "image/jpeg", 16, 16)
    await store.index.record_check(str(walked), store.checker.of(str(walked), len(deep), "image/jpeg", deep))
    _, data = await store.read(str(walked), "", None, True)
    assert (type(data), data) == (bytes, deep)
    assert _unleased(path_of(store, str(walked)))
    mapped = await served(store, str(walked))  # walked in full once: probed from what was found
    assert mapped[:] == deep


def test_kept_mappings_take_at_most_an_eighth_of_the_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resident.resource, "getrlimit", lambda which: (1024, 4096))
    assert resident._kept_entries() == 64  # two descriptors each: 128 of 1,024
    monkeypatch.setattr(resident.resource, "getrlimit", lambda which: (65536, 65536))
    assert resident._kept_entries() == resident.KEPT_MAX
