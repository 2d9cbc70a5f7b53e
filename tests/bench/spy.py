"""Summarise a py-spy `--format raw` recording (collapsed stacks) as text: where the daemon's time goes.

    python -m tests.bench.spy FILE [--seconds S] [--rate HZ] [--top N]

py-spy counts a thread blocked in C (a queue's get, select, a pipe read) as active; such samples are set
apart as idle here, by their leaf frame, so that what is left is work: Python code, or C code it called
(hashing, file I/O, SQLite, decoding).
"""

from __future__ import annotations

import argparse
import importlib.util
import linecache
import re
from collections import Counter
from pathlib import Path
from typing import Any

_WHERE = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
# Leaf frames that are a thread waiting, whatever the line.
_IDLE_FUNCTIONS = {
    "_worker (concurrent/futures/thread.py)",  # a to_thread pool thread between work items
    "EpollSelector.select (selectors.py)",  # the event loop with nothing to do
    "_read_exact (attachstore/gate/worker.py)",  # a decode worker waiting for a job
    "ThreadedChildWatcher._do_waitpid (asyncio/unix_events.py)",  # waitpid() on a live worker
}
# Source lines that are a wait (for frames that also do work on other lines).
_IDLE_LINES = re.compile(r"\btx\.get\(|\.get\(block=True\)|\bwaiter\.acquire\(|\.wait\(")
# Frames every busy sample of a thread carries: they say nothing about where time goes.
_PLUMBING = re.compile(
    r"\((threading\.py|<frozen runpy>|asyncio/runners\.py|asyncio/base_events\.py|asyncio/events\.py"
    r"|concurrent/futures/thread\.py|attachstore/cli/main\.py|attachstore/server\.py|attachstore/__main__\.py"
    r"|attachstore|aiosqlite/core\.py)\)$|^<module> "
)


def _split(frame: str) -> tuple[str, str | None]:
    """'read_sync (site-packages/x/y.py:12)' -> ('read_sync (x/y.py)', 'x/y.py:12')."""
    m = _WHERE.match(frame.strip())
    if not m:
        return frame.strip(), None
    where = m.group("file")
    for marker in ("site-packages/", "lib/python3.11/", "lib/python3.12/", "lib/python3.13/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    line = m.group("line")
    return f"{m.group('name')} ({where})", f"{where}:{line}" if line else None


def _source_line(where: str | None) -> str:
    """The text of `file.py:LINE`, found as a module on sys.path ('' when not found)."""
    if not where:
        return ""
    path, _, line = where.rpartition(":")
    module = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    return linecache.getline(spec.origin, int(line))


def _role(process: str) -> str:
    if "attachstore.gate" in process:
        return "decode workers"
    if " serve " in process:
        return "daemon"
    return "other"


def _thread_group(name: str) -> str:
    if name.startswith("MainThread"):
        return "event loop (main thread)"
    if name.startswith("asyncio_"):
        return "to_thread pool (file I/O, hashing)"
    if "_connection_worker_thread" in name:
        return "aiosqlite threads (SQLite)"
    if name.startswith("asyncio-waitpid"):
        return "child watcher threads"
    return name


def summarise(path: Path, seconds: float | None = None, rate: int = 250, top: int = 12) -> dict[str, Any]:
    """Busy and idle samples per process role and thread group; the hottest leaf frames (self) and the
    hottest frames anywhere below the plumbing (inclusive), over busy samples."""
    busy: Counter[str] = Counter()
    idle: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    threads: dict[str, set[str]] = {}
    self_time: dict[str, Counter[str]] = {}
    inclusive: dict[str, Counter[str]] = {}
    idle_cache: dict[str, bool] = {}
    text = path.read_text(errors="replace")
    # A command line may hold newlines; every record ends with " <count>" at the end of a line.
    for stack, number in re.findall(r"(.*?) (\d+)$", text, flags=re.S | re.M):
        count = int(number)
        frames = stack.strip("\n").split(";")
        process = next((f for f in reversed(frames) if f.startswith("process ")), "process ?")
        thread = next((f for f in reversed(frames) if f.startswith("thread (")), "thread (?): ?")
        code = [_split(f) for f in frames if not f.startswith(("process ", "thread ("))]
        role = _role(process)
        thread_name = thread.split(":", 1)[-1].strip()
        threads.setdefault(role, set()).add(thread.split(")")[0])
        if not code:
            continue
        leaf, where = code[-1]
        key = f"{leaf}@{where}"
        if key not in idle_cache:
            idle_cache[key] = leaf in _IDLE_FUNCTIONS or bool(_IDLE_LINES.search(_source_line(where)))
        if idle_cache[key]:
            idle[role] += count
            continue
        busy[role] += count
        group = f"{role} / {_thread_group(thread_name)}"
        groups[group] += count
        self_time.setdefault(group, Counter())[leaf] += count
        for name in {name for name, _ in code if not _PLUMBING.search(name)}:
            inclusive.setdefault(group, Counter())[name] += count
    wall = seconds * rate if seconds else None
    out: dict[str, Any] = {
        "seconds": seconds,
        "rate": rate,
        "busy_samples": dict(busy),
        "idle_samples": dict(idle),
        "threads": {role: len(t) for role, t in threads.items()},
        # One thread busy all the time is 100 %.
        "busy_percent_of_wall": {g: round(100 * c / wall, 1) for g, c in groups.most_common()}
        if wall
        else {},
        "groups": {},
    }
    for group, n in groups.most_common():
        out["groups"][group] = {
            "busy_samples": n,
            "self": [(f, round(100 * c / n, 1)) for f, c in self_time[group].most_common(top)],
            "inclusive": [
                (f, round(100 * c / n, 1)) for f, c in inclusive.get(group, Counter()).most_common(top)
            ],
        }
    return out


def render_text(summary: dict[str, Any], top: int = 8, min_share: float = 0.05) -> str:
    """Busy time per thread group, then for each group with a real share its hottest frames."""
    lines = []
    if summary.get("busy_percent_of_wall"):
        lines.append(
            f"busy time by thread group over {summary['seconds']:.1f} s (one thread always busy = 100%):"
        )
        lines += [f"  {pct:6.1f}%  {g}" for g, pct in summary["busy_percent_of_wall"].items()]
    total = sum(g["busy_samples"] for g in summary["groups"].values()) or 1
    for group, g in summary["groups"].items():
        if g["busy_samples"] < min_share * total:
            continue
        lines.append(f"{group}: % of its busy samples ({g['busy_samples']})")
        lines.append("  self (leaf frame; C code is charged to the Python frame that called it):")
        lines += [f"    {pct:5.1f}%  {f}" for f, pct in g["self"][:top]]
        lines.append("  inclusive (anywhere on the stack below the loop and thread plumbing):")
        lines += [f"    {pct:5.1f}%  {f}" for f, pct in g["inclusive"][:top]]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file", type=Path)
    p.add_argument("--seconds", type=float, help="how long py-spy recorded (for busy %% of wall time)")
    p.add_argument("--rate", type=int, default=250)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    print(render_text(summarise(args.file, args.seconds, args.rate, args.top), args.top))


if __name__ == "__main__":
    main()
