"""Processes under test: the attachstore daemon (a real `attachstore serve`), their memory, and py-spy."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def attachstore_command() -> list[str]:
    """The console script next to this interpreter (.venv/bin/attachstore), else `python -m attachstore`."""
    script = Path(sys.executable).with_name("attachstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "attachstore"]


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status < 500:
                    return
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return
        except (urllib.error.URLError, OSError):
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before answering {url}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing answered {url} within {timeout:g} s")
        time.sleep(0.05)


def ready_or_stopped(url: str, proc: subprocess.Popen[bytes] | None, stop: Callable[[], None]) -> None:
    """`wait_http(url)` for a child just started; `stop()` it if it never answers (or on an interrupt)."""
    try:
        wait_http(url, proc=proc)
    except BaseException:
        stop()
        raise


def stop_child(proc: subprocess.Popen[bytes] | None, *steps: tuple[signal.Signals, float]) -> None:
    """Send each (signal, seconds) in turn until the child exits, then SIGKILL: nothing is left running."""
    if proc is None:
        return
    for sig, seconds in steps:
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=seconds)
            return
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()


# The key of the keyed check for every process the bench starts (set in the environment by __main__): the
# synthesized scale stores carry checks made with it, so that the audit finds them as admissions leave them.
CHECK_KEY = "be" * 32

# One serving process per core: what `serve` runs by default, and the ceiling's processes.
DAEMON_WORKERS = os.cpu_count() or 1


class Daemon:
    """`attachstore serve --data-dir D --listen 127.0.0.1:PORT` as a child process."""

    def __init__(self, data_dir: Path, log: Path, config: Path | None = None) -> None:
        self.data_dir = data_dir
        self.config = config
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Daemon:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *attachstore_command(),
                    "serve",
                    "--data-dir",
                    str(self.data_dir),
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    # No --workers: `make run`'s default, one serving process per core (DAEMON_WORKERS).
                    *(["--config", str(self.config)] if self.config else []),
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
            )
        return self

    def ready(self) -> Daemon:
        ready_or_stopped(self.base + "/healthz", self.proc, self.stop)
        return self

    def __enter__(self) -> Daemon:
        if self.proc is None:
            self.start()
        return self.ready()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        stop_child(self.proc, (signal.SIGTERM, 30))

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> Any:
        """A setup request (not measured); raises on anything but 2xx."""
        req = urllib.request.Request(self.base + path, data=body, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=120) as answer:
                data = answer.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read()[:500]!r}") from None
        return json.loads(data) if data[:1] in (b"{", b"[") else data


# -- memory -------------------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in bytes (0 when the process is gone)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in out:
                out[key] = int(value.split()[0]) * 1024
    return out


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants (decode workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        kids: list[int] = []
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):
                    kids += [int(k) for k in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        todo += kids
    return out


def reset_peaks(pid: int) -> None:
    """Reset VmHWM of the process tree (root: writing 5 to clear_refs resets the peak RSS)."""
    for p in tree(pid):
        with contextlib.suppress(OSError):
            Path(f"/proc/{p}/clear_refs").write_text("5")


class MemorySampler:
    """Samples the summed RSS of a process tree every `interval` s; also sums VmHWM of every process seen."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_sum = 0
        self.hwm: dict[int, int] = {}
        self.processes = 0
        self.active = True  # sampling only while set (VmHWM catches any peak in between anyway)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        total = 0
        pids = tree(self.pid)
        self.processes = max(self.processes, len(pids))
        for p in pids:
            s = _status(p)
            total += s["VmRSS"]
            self.hwm[p] = max(self.hwm.get(p, 0), s["VmHWM"])
        self.peak_sum = max(self.peak_sum, total)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.active:
                self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        reset_peaks(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def hwm_sum(self) -> int:
        return sum(self.hwm.values())


# -- profiling ----------------------------------------------------------------------------------------


class Profiler:
    """py-spy record of a process tree (raw collapsed stacks) while a block runs; stopped with SIGINT (which
    makes py-spy write its file) when the block ends. `seconds` is how long it recorded."""

    RATE = 250

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.proc: subprocess.Popen[bytes] | None = None
        self.seconds = 0.0
        self._started = 0.0

    @staticmethod
    def available() -> str | None:
        beside = Path(sys.executable).with_name("py-spy")
        return str(beside) if beside.exists() else shutil.which("py-spy")

    def __enter__(self) -> Profiler:
        spy = self.available()
        if spy:
            self.proc = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(self.pid),
                    "--subprocesses",
                    "--threads",
                    "--format",
                    "raw",
                    "--rate",
                    str(self.RATE),
                    "--output",
                    str(self.out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # let it attach to the daemon and its workers
        self._started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self._started
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
