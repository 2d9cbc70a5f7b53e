"""Real daemon processes in tests: a free port, waiting until one answers, one serving for a while, and the
processes a test starts one after another on one data dir."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

READY_SECONDS = 60.0  # a daemon's start on a loaded machine: a guard against a hang, not a measure


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without its ATTACHSTORE_ variables (a process is given only what the test gives it),
    and `extra`."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")} | extra


def state(pid: int) -> str:
    """The process's state letter, from /proc (R, S, D, T, Z, …)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, proc: subprocess.Popen[bytes], ready: tuple[int, ...] = (200,)) -> None:
    """Until `url` answers with one of the `ready` statuses; fails if `proc` exits first, or after
    READY_SECONDS."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early: {proc.stderr.read() if proc.stderr else ''!r}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status in ready:
                    return
        except urllib.error.HTTPError as e:
            if e.code in ready:
                return
            time.sleep(0.05)
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"serve did not become ready within {READY_SECONDS:g} s")


@contextlib.contextmanager
def serving(root: Path, config: str = "") -> Iterator[str]:
    """`attachstore serve` on a free port with `config` (TOML text), its data dir and its log
    (daemon.log, the JSON lines for a failure's story) under `root`; yields its base URL."""
    (root / "attachstore.toml").write_text(config)
    env = clean_env(
        ATTACHSTORE_DATA_DIR=str(root / "data"), ATTACHSTORE_CONFIG=str(root / "attachstore.toml")
    )
    port = free_port()
    with open(root / "daemon.log", "wb") as log:
        serve = [sys.executable, "-m", "attachstore", "serve", "--listen", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(serve, env=env, stderr=log)
        try:
            wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@dataclass
class Started:
    """One `attachstore serve` of Daemons: its process, base URL and log (its output)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def ready(self) -> int:
        """/readyz's status (0 if nothing answers)."""
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=READY_SECONDS) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:  # not listening (yet)
            return 0


class Daemons:
    """The `attachstore serve` processes a test starts, one after another: each on a free loopback port, its
    output in `root`/daemon-N.log; on leaving, each still running is stopped (SIGCONT, in case the test
    stopped it, then SIGTERM; killed after READY_SECONDS)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[Started] = []

    def __enter__(self) -> Daemons:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def store(self, config: str) -> tuple[str, ...]:
        """The options of the next start on the data dir `root`/data with `config` (TOML text), written to
        `root`/N.toml."""
        path = self.root / f"{len(self.started)}.toml"
        path.write_text(config)
        return "--data-dir", str(self.root / "data"), "--config", str(path)

    def start(self, *argv: str, prefix: tuple[str, ...] = (), wait: bool = True, **env: str) -> Started:
        """`attachstore serve --listen … ARGV`, run by `prefix` when given, with these environment variables
        besides; unless told not to `wait`, once /readyz answers 200 (else the test fails with its log)."""
        port = free_port()
        log = self.root / f"daemon-{len(self.started)}.log"
        serve = [
            *prefix,
            sys.executable,
            "-m",
            "attachstore",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            *argv,
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                serve, env=clean_env(**env), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        started = Started(proc, f"http://127.0.0.1:{port}", log)
        self.started.append(started)
        if wait:
            try:
                wait_ready(f"{started.url}/readyz", proc)
            except AssertionError as e:
                raise AssertionError(f"serve {argv} did not become ready ({e}):\n{log.read_text()}") from None
        return started

    def stop(self) -> None:
        running = [s.proc for s in self.started if s.proc.poll() is None]
        for proc in running:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
        for proc in running:
            try:
                proc.wait(timeout=READY_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
