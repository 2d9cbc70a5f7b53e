"""A child process for the crash tests: admits images one by one, printing each answered ref, and SIGKILLs
itself at a named step of the write path of its last admission.

    python -m tests.support.crash_child DATA_DIR STEP COUNT

Steps: staged (after the staging write), synced (after the staging fsync), linked (after the link),
dir_synced (after the last directory fsync), committed (after the index commit), answered (after the
admission returned, before its ref is printed).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec

from attachstore.config import Config
from attachstore.index import SqliteIndex
from attachstore.service import Store, Upload
from attachstore.storage import FileOps
from tests.support.images import png

AFTER = {"staged": "write", "synced": "fsync", "linked": "link", "dir_synced": "fsync_dir"}


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashOps(FileOps):
    armed = False

    def __init__(self, step: str) -> None:
        self.step = step
        self.dir_syncs = 0

    def _after(self, name: str) -> None:
        if self.armed and AFTER.get(self.step) == name:
            if name != "fsync_dir":
                die()
            self.dir_syncs += 1
            if self.dir_syncs == 4:  # the bucket and each level up to objects/
                die()

    def write(self, fd: int, data: memoryview) -> int:
        n = super().write(fd, data)
        self._after("write")
        return n

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._after("fsync")

    def link(self, src: Path, dst: Path) -> None:
        super().link(src, dst)
        self._after("link")

    def fsync_dir(self, path: Path) -> None:
        super().fsync_dir(path)
        self._after("fsync_dir")


async def run(data_dir: str, step: str, count: int) -> None:
    ops = CrashOps(step)
    config = msgspec.convert({"data_dir": data_dir, "admission": {"decode_workers": 1}}, Config)
    store = await Store.open(config, ops)
    if step == "committed":
        real = SqliteIndex.publish

        async def publish(self: SqliteIndex, *args: Any) -> None:
            await real(self, *args)
            if ops.armed:
                die()

        SqliteIndex.publish = publish  # type: ignore[method-assign]
    for i in range(count):
        ops.armed = i == count - 1
        result = await store.admit([Upload.of_bytes(png(20, 10, seed=i))], "user")
        if ops.armed and step == "answered":
            die()
        print(result.attachments[0].ref, flush=True)
    await store.close()


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3])))
