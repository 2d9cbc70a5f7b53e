"""A daemon SIGKILLed and restarted at once with another [limits]: the node it was is dead (a zombie, or its
workers stopping), and the new daemon starts; it waits for a node that is stopping, and never names a dead one
as serving the store (issue 31, finding 7)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import free_port, wait_ready
from tests.support.waiting import until

LIMITS = "[limits]\nmax_side = 3000\n"


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")}


def state(pid: int) -> str:
    """The process's state letter, from /proc (R, S, D, Z, …)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


class Daemons:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, config: str, *argv: str) -> tuple[subprocess.Popen[bytes], str, Path]:
        n = len(self.procs)
        (self.root / f"{n}.toml").write_text(config)
        port = free_port()
        log = self.root / f"daemon-{n}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "attachstore",
                    "serve",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--data-dir",
                    str(self.root / "data"),
                    "--config",
                    str(self.root / f"{n}.toml"),
                    *argv,
                ],
                env=env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc, f"http://127.0.0.1:{port}", log

    def ready(self, config: str, *argv: str) -> subprocess.Popen[bytes]:
        proc, url, log = self.start(config, *argv)
        try:
            wait_ready(f"{url}/readyz", proc)
        except AssertionError:
            proc.wait(timeout=60)
            raise AssertionError(f"exit {proc.returncode}: {log.read_text()}") from None
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=60)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    try:
        yield d
    finally:
        d.stop()


def test_a_sigkilled_daemon_left_a_zombie_and_the_restart_with_other_limits_starts(daemons: Daemons) -> None:
    first = daemons.ready("", "--workers", "1")
    first.send_signal(signal.SIGKILL)
    # Not reaped: the node's process is a zombie, which kill(pid, 0) still finds.
    until(lambda: state(first.pid) == "Z", "the killed daemon to be a zombie")
    daemons.ready(LIMITS, "--workers", "1")
    assert first.poll() == -signal.SIGKILL


def test_a_sigkilled_supervisor_whose_workers_are_stopping_is_waited_for(daemons: Daemons) -> None:
    first, url, _ = daemons.start("", "--workers", "2")
    wait_ready(f"{url}/readyz", first)
    # An upload in flight: the worker that has it goes on serving it once it is told to stop.
    upload = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    upload.sendall(
        b"POST /v1/attachments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000000\r\n\r\n" + b'{"source": "user", "images": [{"data": "' + b"A" * 1000
    )
    first.send_signal(signal.SIGKILL)  # its workers get SIGTERM, and stop
    first.wait(timeout=60)
    second, url, log = daemons.start(LIMITS, "--workers", "2")
    try:
        until(lambda: "to stop" in log.read_text() or second.poll() is not None, "the new daemon to wait")
        assert second.poll() is None, log.read_text()
        assert "serves this store" not in log.read_text()
    finally:
        upload.close()  # the upload ends, and with it the stopping worker
    wait_ready(f"{url}/readyz", second)
