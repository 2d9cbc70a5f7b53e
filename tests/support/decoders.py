"""A daemon's decode workers seen from outside: found by their parent and command line in /proc, killed as
a decoder crash (a segfault) would end them, and its queue of decode jobs watched through /metrics."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec

from attachstore.config import Config
from attachstore.service import Store
from tests.support.store import plant
from tests.support.waiting import HANG, eventually

T = TypeVar("T")


def decode_workers(parent: int) -> list[int]:
    """The pids of the live decode workers of the process `parent` (a zombie has no command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"attachstore.gate" in command:
            found.append(int(entry.name))
    return found


def crash_decoder(parent: int) -> int:
    """SIGKILL the one decode worker of `parent`; its pid."""
    [worker] = decode_workers(parent)
    os.kill(worker, signal.SIGKILL)
    return worker


def gone(pid: int) -> bool:
    """Whether `pid` has exited (reaped, or a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


# Watching a hostile-test daemon's decode queue (tests/hostile/conftest.py's Daemon) from async tests.


def queue(daemon: Any) -> tuple[float, float]:
    """The daemon's decode jobs running, and waiting for a worker."""
    return daemon.metric("attachstore_decodes_running"), daemon.metric("attachstore_decodes_waiting")


def decodes(daemon: Any, **labels: str) -> float:
    return float(daemon.metric("attachstore_decodes_total", **labels))


async def polled(condition: Callable[[], object], what: str) -> None:
    """Poll the daemon (in a thread: its counters are read over HTTP) until `condition` holds; a guard
    against a hang, not a measure."""
    await eventually(lambda: asyncio.to_thread(condition), what, every=0.05)


async def answered(task: Awaitable[T], what: str) -> T:
    """What `task` gives, within the hang guard; past it the test fails saying `what`."""
    try:
        async with asyncio.timeout(HANG):
            return await task
    except TimeoutError:
        raise AssertionError(f"{what} after {HANG:g} s") from None


async def crash_each(daemon: Any, crashed: int, total: int) -> None:
    """End the jobs still to decode (scan bombs, say) one by one, each once its worker decodes it, until
    `total` have crashed (`crashed` already have)."""
    for ended in range(crashed, total):
        await polled(
            lambda ended=ended: decodes(daemon, result="crashed") == ended and queue(daemon)[0] == 1,
            f"job {ended + 1} to start decoding",
        )
        crash_decoder(daemon.proc.pid)


async def planted(daemon: Any, tenant: str, objects: list[tuple[bytes, str, int, int]]) -> list[str]:
    """(bytes, media type, width, height) published on the live daemon's data dir past the gate, as an
    older, looser gate would have admitted them; their refs."""
    store = await Store.open(msgspec.convert({"data_dir": str(daemon.data_dir)}, Config), policy="none")
    try:
        return [str(await plant(store, *o, tenant)) for o in objects]
    finally:
        await store.close()


async def preview(http: aiohttp.ClientSession, daemon: Any, tenant: str, ref: str, size: int) -> Any:
    """GET the preview: its status, body and Retry-After."""
    url = f"{daemon.url}/v1/attachments/{ref}/preview?size={size}"
    async with http.get(url, headers=daemon.headers(tenant)) as r:
        return r.status, await r.read(), r.headers.get("Retry-After")
