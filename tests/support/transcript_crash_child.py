"""A child process for the transcript crash tests: strips one file in place and SIGKILLs itself at a named
step of the replacement.

    python -m tests.support.transcript_crash_child DATA_DIR FILE STEP

Steps: reading (after the first chunk is read), created (the temporary file), written (all of it), held
(the session's holds), synced (fsync), verified (restored and compared), checked (the file is as it was
read, the instant before the rename), renamed, dir_synced.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import msgspec

from attachstore.config import Config
from attachstore.service import Store
from attachstore.transcripts import Options, Stripper


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def run(data_dir: str, path: str, step: str) -> None:
    config = msgspec.convert({"data_dir": data_dir, "admission": {"decode_workers": 1}}, Config)
    store = await Store.open(config)

    def at(name: str) -> None:
        if name == step:
            die()

    options = Options(steps=at, on_bytes=lambda _n: at("reading"))
    stripper = Stripper(store, options)
    report = await stripper.strip(Path(path), Path(path))
    print(report.status, report.message, flush=True)  # only when the step was never reached
    await stripper.close()
    await store.close()


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2], sys.argv[3]))
