"""`serve` says what happened at start-up and when its workers die: "serving" only once it listens, a
message naming each worker's exit status when they all die at once, and a message (no traceback) for a
credentials directory it cannot read (issue 31, finding 16)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import free_port, wait_ready
from tests.support.waiting import until

HANG = 60


def env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")} | extra


class Serve:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, *argv: str, config: str = "", prefix: tuple[str, ...] = (), **extra: str
    ) -> tuple[subprocess.Popen[bytes], str, Path]:
        n = len(self.procs)
        (self.root / f"{n}.toml").write_text(config)
        port = free_port()
        log = self.root / f"serve-{n}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *prefix,
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
                env=env(**extra),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc, f"http://127.0.0.1:{port}", log

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=HANG)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    s = Serve(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def serving_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "attachstore serving" in line]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serving_is_logged_once_it_listens_and_not_when_it_fails(serve: Serve, workers: str) -> None:
    first, url, log = serve.start("--workers", workers)
    wait_ready(f"{url}/readyz", first)
    until(lambda: serving_lines(log), "the serving line")
    assert len(serving_lines(log)) == 1
    # Another policy while the first serves: refused after the socket was bound, in the store's opening.
    second, _, log = serve.start("--workers", workers, config="[limits]\nmax_side = 3000\n")
    assert second.wait(timeout=HANG) == 2, log.read_text()
    assert "serves this store with another policy" in log.read_text()
    assert serving_lines(log) == [], log.read_text()


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def test_every_worker_dying_at_once_is_said_with_their_statuses(serve: Serve) -> None:
    supervisor, url, log = serve.start("--workers", "2")
    wait_ready(f"{url}/readyz", supervisor)
    until(lambda: len(children(supervisor.pid)) == 2, "two workers")
    workers = children(supervisor.pid)
    # Both die before the supervisor can look: it is stopped meanwhile.
    os.kill(supervisor.pid, signal.SIGSTOP)
    until(lambda: state(supervisor.pid) == "T", "the supervisor to be stopped")
    for worker in workers:
        os.kill(worker, signal.SIGKILL)
    until(lambda: all(state(w) == "Z" for w in workers), "both workers to be dead")
    os.kill(supervisor.pid, signal.SIGCONT)
    assert supervisor.wait(timeout=HANG) == 1
    text = log.read_text()
    errors = [line for line in text.splitlines() if '"level":"error"' in line]
    assert errors, text
    said = " ".join(errors)
    for worker in workers:
        assert f"worker {worker} was killed by SIGKILL" in said, said


def without_dac_override() -> tuple[str, ...]:
    """A prefix that runs a command without the capabilities that let root read any file."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: an unreadable directory cannot be made")
    drop = "-dac_override,-dac_read_search"
    return (setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unreadable_credentials_directory_is_a_message(serve: Serve, tmp_path: Path, workers: str) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "check-key").write_text("00" * 32 + "\n")
    credentials.chmod(0)
    try:
        proc, _, log = serve.start(
            "--workers", workers, prefix=without_dac_override(), CREDENTIALS_DIRECTORY=str(credentials)
        )
        assert proc.wait(timeout=HANG) == 2, log.read_text()
    finally:
        credentials.chmod(0o700)
    text = log.read_text()
    assert "Traceback" not in text, text
    assert "CREDENTIALS_DIRECTORY" in text, text
    assert str(credentials) in text, text
    assert serving_lines(log) == []
