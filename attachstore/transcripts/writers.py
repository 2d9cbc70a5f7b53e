"""Whether a host has a transcript open for writing, which a rename would make it go on writing into the old,
unlinked file (Codex keeps its rollout open for the whole session): from /proc on Linux, else lsof."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .reports import TranscriptError


def refuse_writers(target: Path) -> None:
    """TranscriptError if a process has `target` (when it exists) open for writing, or that cannot be told."""
    if target.exists():
        refusal = writers(target).refusal(target)
        if refusal is not None:
            raise refusal


@dataclass(frozen=True, slots=True)
class Writers:
    found: list[tuple[int, str]]  # pid, command
    unknown: str | None = None

    def refusal(self, path: Path) -> TranscriptError | None:
        if self.found:
            who = ", ".join(f"{command} (pid {pid})" for pid, command in self.found)
            return TranscriptError(
                f"{path} is open for writing by {who}: a host is still writing it",
                hint="stop that session (or wait for it to end), then run again",
            )
        if self.unknown is not None:
            return TranscriptError(
                f"cannot tell whether a process has {path} open for writing: {self.unknown}",
                hint="make sure no host has the session open, then run again with --assume-closed",
            )
        return None


def writers_of_fd(fd: int, proc: Path = Path("/proc")) -> Writers:
    """Who has the file of `fd` open for writing, whatever its name now; without /proc, no one can be told."""
    if (proc / "self" / "fd").is_dir():
        return _proc_writers(os.fstat(fd), proc)
    return Writers([])


def writers(path: Path, proc: Path = Path("/proc")) -> Writers:
    st = os.stat(path)
    if (proc / "self" / "fd").is_dir():
        return _proc_writers(st, proc)
    lsof = shutil.which("lsof")
    if lsof is not None:
        return _lsof_writers(path, lsof)
    return Writers([], "this system has neither /proc nor lsof")


def _proc_writers(st: os.stat_result, proc: Path) -> Writers:
    found: list[tuple[int, str]] = []
    hidden: list[int] = []
    ours = {os.getuid(), st.st_uid}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            fds = os.listdir(f"{entry.path}/fd")
        except PermissionError:
            # Another user's process cannot be looked at, and is not the host writing this user's session;
            # one of the same user's (or of the file's owner) that cannot be looked at leaves it unknown.
            if _owner(entry.path) in ours:
                hidden.append(pid)
            continue
        except OSError:  # it exited meanwhile
            continue
        for fd in fds:
            try:
                target = os.stat(f"{entry.path}/fd/{fd}")
            except OSError:
                continue
            if (target.st_dev, target.st_ino) != (st.st_dev, st.st_ino):
                continue
            if _writable(Path(entry.path) / "fdinfo" / fd):
                found.append((pid, _command(Path(entry.path))))
                break
    if hidden and not found:
        shown = ", ".join(str(p) for p in hidden[:5])
        return Writers(
            [], f"the open files of {len(hidden)} of this user's processes cannot be read ({shown})"
        )
    return Writers(found)


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _writable(fdinfo: Path) -> bool:
    try:
        text = fdinfo.read_text()
    except OSError:
        return True  # it was open a moment ago; count it
    for line in text.splitlines():
        if line.startswith("flags:"):
            return (int(line.split()[1], 8) & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
    return True


def _command(process: Path) -> str:
    try:
        return (process / "comm").read_text().strip() or "?"
    except OSError:
        return "?"


def _lsof_writers(path: Path, lsof: str) -> Writers:
    try:
        done = subprocess.run(
            [lsof, "-w", "-F", "pca", "--", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return Writers([], f"lsof did not answer: {e}")
    return parse_lsof(done.stdout)


def parse_lsof(output: str) -> Writers:
    """lsof -F pca: 'p<pid>', 'c<command>', then per descriptor 'a<access>' (r, w or u)."""
    found: list[tuple[int, str]] = []
    pid, command = 0, "?"
    for line in output.splitlines():
        field, value = line[:1], line[1:]
        if field == "p":
            pid, command = int(value), "?"
        elif field == "c":
            command = value
        elif field == "a" and value in ("w", "u") and (pid, command) not in found:
            found.append((pid, command))
    return Writers(found)
