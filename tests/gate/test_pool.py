"""The decode pool (gate/pool.py): jobs served in turn across tenants, one request's budget of decoder time,
and a cancelled job's worker killed. (The corpus of hostile files it survives is in test_hostile.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from attachstore.config import Limits
from attachstore.errors import Rejected
from attachstore.gate import AlreadyDecided, Batch, DecodePool
from attachstore.gate import pool as pool_module
from attachstore.gate.shared import SharedBuffer
from attachstore.refs import Checker
from tests.support import images
from tests.support.waiting import eventually, let_run

DEFAULTS = Limits()
TIMEOUT = 2.0  # for the jobs that are meant to run out of time
AMPLE = 60.0  # for the jobs that must pass: no stall of a loaded machine reaches it
BOMB_SCANS = 20_000  # about 50 s of decoding: only a time bound or a cancellation stops it


def _decodes(pool: DecodePool, result: str | None = None) -> float:
    registry = pool.metrics.registry
    results = [result] if result else ["passed", "rejected", "timeout", "crashed", "cancelled"]
    return sum(registry.get_sample_value("attachstore_decodes_total", {"result": r}) or 0.0 for r in results)


def _gauge(pool: DecodePool, name: str) -> float:
    return pool.metrics.registry.get_sample_value(name) or 0.0


async def test_a_budget_is_shared_out_and_never_overdrawn() -> None:
    batch = Batch(1.0)
    assert await batch.reserve(0.6, 0) == 0.6
    assert await batch.reserve(0.6, 1) == pytest.approx(0.4)
    third = asyncio.ensure_future(batch.reserve(0.6, 2))  # all of it reserved: waits for a return
    await let_run()
    assert not third.done()
    batch.give_back(0.6, 0.1)  # used 0.1 of its 0.6
    assert await third == pytest.approx(0.5)
    batch.give_back(0.4, 5.0)  # a job that ran past its time used all of it, no more
    batch.give_back(0.5, 0.5)
    assert await batch.reserve(0.6, 3) == 0.0  # spent, and nothing out to wait for


async def test_after_a_failure_that_decides_the_jobs_after_it_are_unwanted() -> None:
    batch = Batch(10.0, first_failure_decides=True)
    waiting = [await batch.reserve(5.0, 0), await batch.reserve(5.0, 1)]
    late = asyncio.ensure_future(batch.reserve(5.0, 3))  # waits for a return
    batch.failed(2)
    assert [batch.needed(p) for p in range(4)] == [True, True, False, False]
    batch.give_back(waiting[0], 0.1)
    with pytest.raises(AlreadyDecided):
        await late
    batch.failed(3)  # a later failure changes nothing
    assert batch.needed(1)
    assert not batch.needed(2)
    every = Batch(10.0)  # every image wanted: a failure decides nothing
    every.failed(0)
    assert every.needed(1)


async def test_the_jobs_of_one_batch_decode_no_longer_than_its_budget_in_all() -> None:
    pool = DecodePool(1, TIMEOUT)
    bomb = images.jpeg_scan_bomb(BOMB_SCANS)
    try:
        batch = Batch(TIMEOUT * 1.25)
        results = await asyncio.gather(
            *(pool.inspect(bomb, None, DEFAULTS, "sha256", batch=batch, position=p) for p in range(3)),
            return_exceptions=True,
        )
    finally:
        await pool.close()
    assert all(isinstance(r, Rejected) and r.code == "INVALID_IMAGE" for r in results)
    messages = [str(r) for r in results]
    assert "decoding took longer than 2 s" in messages[0]
    assert "took longer than 2.5 s in all" in messages[1]  # the half second that was left
    assert "used up their 2.5 s of decoding before this one was decoded" in messages[2]
    assert _decodes(pool, "timeout") == 2
    assert _decodes(pool) == 2  # the third never reached a worker


async def test_a_job_queued_behind_a_failure_that_decides_is_never_started() -> None:
    pool = DecodePool(1, TIMEOUT)
    broken = images.truncate(images.png(16, 12), 60)
    try:
        batch = Batch(60.0, first_failure_decides=True)
        results = await asyncio.gather(
            pool.inspect(broken, None, DEFAULTS, "sha256", batch=batch, position=0),
            pool.inspect(
                images.jpeg_scan_bomb(BOMB_SCANS), None, DEFAULTS, "sha256", batch=batch, position=1
            ),
            return_exceptions=True,
        )
    finally:
        await pool.close()
    assert isinstance(results[0], Rejected)
    assert isinstance(results[1], AlreadyDecided)
    assert _decodes(pool) == 1  # the worker was handed on after the failure was marked


async def test_jobs_wait_for_a_worker_in_turn_across_tenants() -> None:
    pool = DecodePool(1, AMPLE)
    done: list[str] = []

    async def job(tenant: str, n: int) -> None:
        await pool.inspect(images.png(4 + n, 4), None, DEFAULTS, "sha256", tenant=tenant)
        done.append(f"{tenant}{n}")

    try:
        tasks = [asyncio.ensure_future(job("mallory", n)) for n in range(4)]
        await asyncio.sleep(0)
        tasks.append(asyncio.ensure_future(job("alice", 0)))
        await asyncio.gather(*tasks)
    finally:
        await pool.close()
    # mallory's first job had the worker when alice's came; alice's is next, before mallory's queue.
    assert done == ["mallory0", "alice0", "mallory1", "mallory2", "mallory3"]
    assert _decodes(pool, "passed") == 5
    assert _gauge(pool, "attachstore_decodes_waiting") == 0


async def test_a_cancelled_job_kills_its_worker_and_the_pool_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = DecodePool(1, AMPLE)
    spawned: list[Any] = []
    spawn = DecodePool._spawn

    async def recorded(self: DecodePool) -> Any:
        worker = await spawn(self)
        spawned.append(worker)
        return worker

    monkeypatch.setattr(pool_module.DecodePool, "_spawn", recorded)
    try:
        job = asyncio.ensure_future(pool.inspect(images.jpeg_scan_bomb(BOMB_SCANS), None, DEFAULTS, "sha256"))
        waiting = asyncio.ensure_future(pool.inspect(images.png(4, 4), None, DEFAULTS, "sha256"))
        await eventually(lambda: _gauge(pool, "attachstore_decodes_running") == 1)
        assert _gauge(pool, "attachstore_decodes_waiting") == 1
        job.cancel()
        waiting.cancel()
        for cancelled in (job, waiting):
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        [worker] = spawned
        assert worker.proc.returncode is not None  # killed, not left decoding
        assert _decodes(pool, "cancelled") == 1
        assert _decodes(pool) == 1  # the waiting job never reached a worker
        assert _gauge(pool, "attachstore_decodes_running") == 0
        assert _gauge(pool, "attachstore_decodes_waiting") == 0
        passed = await pool.inspect(images.png(4, 4), None, DEFAULTS, "sha256")
        assert passed.width == 4
    finally:
        await pool.close()


async def test_the_worker_makes_the_keyed_check_of_what_it_hashed() -> None:
    """Beside the sha256 of the bytes to store (the upload, or its normalization), in the worker: the event
    loop hashes nothing at admission."""
    checker = Checker(bytes(range(32)))
    small, large = images.png(40, 30), images.png(3000, 100)  # the large one is fitted to 2000 px
    pool = DecodePool(1, AMPLE)
    try:
        kept = await pool.inspect(small, None, DEFAULTS, "sha256", check_key=checker.key)
        fitted = await pool.inspect(
            large, None, DEFAULTS, "sha256", fit_limits=Limits(max_side=8192), check_key=checker.key
        )
        unkeyed = await pool.inspect(small, None, DEFAULTS, "sha256")
        by_blake3 = await pool.inspect(small, None, DEFAULTS, "blake3", check_key=checker.key)
    finally:
        await pool.close()
    assert kept.data is None
    assert kept.check == checker.of(f"sha256:{kept.digest}", len(small), "image/png", small)
    assert fitted.data is not None
    assert fitted.check == checker.of(
        f"sha256:{fitted.digest}", len(fitted.data), fitted.media_type, fitted.data
    )
    assert unkeyed.check is None
    assert by_blake3.check is None  # a blake3 address is its own check


async def _kill_idle_worker(pool: DecodePool) -> int:
    """SIGKILL the pool's one idle worker, as an operator or the OOM killer might; its pid, once it exited."""
    [worker] = pool._idle
    worker.proc.kill()
    await worker.proc.wait()
    return worker.proc.pid


@pytest.mark.parametrize("shared", [False, True], ids=["piped", "in-shared-memory"])
@pytest.mark.parametrize("seen", [True, False], ids=["seen-dead", "not-yet-seen-dead"])
async def test_a_job_for_a_worker_killed_while_idle_goes_to_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch, seen: bool, shared: bool
) -> None:
    pool = DecodePool(1, AMPLE)
    if not seen:  # the job is handed over before the pool learns of the death: its delivery fails instead
        monkeypatch.setattr(pool_module._Worker, "alive", property(lambda self: True))
    image = images.png(6, 4)
    try:
        await pool.inspect(images.png(4, 4), None, DEFAULTS, "sha256")
        dead = await _kill_idle_worker(pool)
        passed = await pool.inspect(SharedBuffer.of(image) if shared else image, None, DEFAULTS, "sha256")
        assert passed.width == 6  # not INVALID_IMAGE: the image never reached the dead worker
        [worker] = pool._idle
        assert worker.proc.pid != dead
    finally:
        await pool.close()
    assert (_decodes(pool, "passed"), _decodes(pool)) == (2, 2)


def test_the_descriptor_headroom_needs_no_standard_input() -> None:
    """A daemon started with descriptor 0 closed still starts decode workers: the probe of free descriptors
    duplicates one of its own."""
    probe = "import os; os.close(0); from attachstore.gate.pool import _headroom; _headroom(); print('ok')"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


async def test_a_job_cancelled_while_its_worker_process_is_made_leaves_no_socket_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    pair = pool_module.socket.socketpair
    creating = asyncio.Event()

    def recorded(*args: Any) -> Any:
        made.extend(pair(*args))
        return made[0], made[1]

    async def never(*args: Any, **kwargs: Any) -> Any:
        creating.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(pool_module.socket, "socketpair", recorded)
    monkeypatch.setattr(pool_module.asyncio, "create_subprocess_exec", never)
    pool = DecodePool(1, AMPLE)
    try:
        job = asyncio.ensure_future(pool.inspect(images.png(4, 4), None, DEFAULTS, "sha256"))
        await creating.wait()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        assert [s.fileno() for s in made] == [-1, -1]  # both ends closed
    finally:
        await pool.close()
