"""Whether a process of this host is alive, read from /proc: gone, dead (a zombie, which `kill(pid, 0)` still
finds), exiting, or running. A node of the store is served by such a process (storepolicy.py)."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

_PF_EXITING = 0x4  # the kernel's flag of a process in exit (include/linux/sched.h), in /proc/PID/stat
_SIGKILL_BIT = 1 << (9 - 1)  # SIGKILL in the pending-signal masks of /proc/PID/status


class Process(Enum):
    GONE = "gone"  # no such process, or a zombie: it will never do anything again
    EXITING = "exiting"  # on its way out: killed, or in the kernel's exit
    RUNNING = "running"


def process(pid: int, proc: Path = Path("/proc")) -> Process:
    if not (proc / "self").exists():
        return _signalled(pid)
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return Process.GONE
    except OSError:
        return _signalled(pid)
    fields = stat[stat.rindex(")") + 2 :].split()  # the command, in parentheses, may hold spaces
    state, flags = fields[0], int(fields[6])
    if state in ("Z", "X", "x"):
        return Process.GONE
    if flags & _PF_EXITING or _sigkill_pending(proc / str(pid) / "status"):
        return Process.EXITING
    return Process.RUNNING


def _sigkill_pending(status: Path) -> bool:
    try:
        text = status.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_BIT:
            return True
    return False


def _signalled(pid: int) -> Process:
    # Without /proc: whether a signal reaches it (a zombie then counts as running).
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return Process.GONE
    except OSError:  # another user's process
        pass
    return Process.RUNNING
