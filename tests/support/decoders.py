"""A daemon's decode workers seen from outside: found by their parent and command line in /proc, and
killed as a decoder crash (a segfault) would end them."""

from __future__ import annotations

import os
import signal
from pathlib import Path


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
