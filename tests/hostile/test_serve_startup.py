"""`serve` says what happened at start-up and when its workers die: "serving" only once it listens, a
message naming each worker's exit status when they all die at once, and a message (no traceback) for a
credentials directory it cannot read (issue 31, finding 16)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.support.daemon import Daemons, state
from tests.support.waiting import until

HANG = 60


def serving_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "attachstore serving" in line]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serving_is_logged_once_it_listens_and_not_when_it_fails(daemons: Daemons, workers: str) -> None:
    first = daemons.start(*daemons.store(""), "--workers", workers)
    until(lambda: serving_lines(first.log), "the serving line")
    assert len(serving_lines(first.log)) == 1
    # Another policy while the first serves: refused after the socket was bound, in the store's opening.
    second = daemons.start(*daemons.store("[limits]\nmax_side = 3000\n"), "--workers", workers, wait=False)
    log = second.log
    assert second.proc.wait(timeout=HANG) == 2, log.read_text()
    assert "serves this store with another policy" in log.read_text()
    assert serving_lines(log) == [], log.read_text()


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_every_worker_dying_at_once_is_said_with_their_statuses(daemons: Daemons) -> None:
    started = daemons.start(*daemons.store(""), "--workers", "2")
    supervisor, log = started.proc, started.log
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
def test_an_unreadable_credentials_directory_is_a_message(
    daemons: Daemons, tmp_path: Path, workers: str
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "check-key").write_text("00" * 32 + "\n")
    credentials.chmod(0)
    try:
        started = daemons.start(
            *daemons.store(""),
            "--workers",
            workers,
            prefix=without_dac_override(),
            wait=False,
            CREDENTIALS_DIRECTORY=str(credentials),
        )
        log = started.log
        assert started.proc.wait(timeout=HANG) == 2, log.read_text()
    finally:
        credentials.chmod(0o700)
    text = log.read_text()
    assert "Traceback" not in text, text
    assert "CREDENTIALS_DIRECTORY" in text, text
    assert str(credentials) in text, text
    assert serving_lines(log) == []


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_as_pid_1_serves_and_stops_cleanly(daemons: Daemons, workers: str) -> None:
    """In a container without an init, `serve` is PID 1: its workers keep serving (they used to take a
    parent of pid 1 for a supervisor already gone, and left at once), and SIGTERM, which PID 1 gets only
    through a handler, stops it cleanly (issue 33)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("a PID namespace of its own needs root and util-linux's unshare")
    # unshare ignores SIGTERM while it waits: the signal goes to its child, the namespace's PID 1
    prefix = (unshare, "--pid", "--fork", "--mount-proc", "--kill-child")
    started = daemons.start(*daemons.store(""), "--workers", workers, prefix=prefix)
    assert started.status("/healthz") == 200
    [serve] = children(started.proc.pid)
    os.kill(serve, signal.SIGTERM)
    assert started.exit_code() == 0, started.tail()
    assert "stopping the others" not in started.log.read_text()
