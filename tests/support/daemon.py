"""Real daemons in tests, started one way: `attachstore serve` on a free loopback port or a Unix socket, with
a config and data dir of the test's and its output in a log; waited for with tests/support/waiting.py until an
endpoint answers; stopped with SIGTERM. A failure says how the process exited and shows its log's tail."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.waiting import HANG, until

READY_SECONDS = HANG  # a daemon's start on a loaded machine: a guard against a hang, not a measure
LOG_LINES = 40
SERVE = (sys.executable, "-m", "attachstore", "serve")


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


def status(url: str, unix_socket: Path | None = None, timeout: float = 5.0) -> int:
    """The status `url` answers with now; 0 while nothing answers. With `unix_socket`, the request goes there
    and only the path of `url` counts."""
    if unix_socket is not None:
        path = "/" + url.split("://", 1)[-1].partition("/")[2]
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(timeout)
                s.connect(str(unix_socket))
                s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
                line = s.makefile("rb").readline().split()
        except OSError:
            return 0
        return int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:  # not listening (yet), or no answer within `timeout`
        return 0


def wait_ready(
    url: str,
    proc: subprocess.Popen[bytes],
    ready: tuple[int, ...] = (200,),
    unix_socket: Path | None = None,
    tail: Callable[[], str] = lambda: "",
) -> None:
    """Until `url` answers with one of the `ready` statuses; fails, with `tail()`, if `proc` exits first or
    after READY_SECONDS."""

    def answered() -> bool:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"exited with {proc.returncode} before {url} answered {ready} {err}")
        return status(url, unix_socket) in ready

    try:
        until(answered, f"{url} to answer {ready}", seconds=READY_SECONDS)
    except AssertionError as e:
        raise AssertionError(f"{proc.args!r}: {e}\n{tail()}") from None


@dataclass
class Daemon:
    """One started daemon: its process, base URL (http://localhost on a Unix socket) and log (its output)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    unix_socket: Path | None = field(default=None, kw_only=True)
    group: bool = field(default=False, kw_only=True)  # in a process group of its own, killed at the end

    def status(self, path: str = "/readyz") -> int:
        return status(f"{self.url}{path}", self.unix_socket, timeout=READY_SECONDS)

    def ready(self) -> int:
        """/readyz's status (0 if nothing answers)."""
        return self.status("/readyz")

    def wait_ready(self, path: str = "/readyz", ready: tuple[int, ...] = (200,)) -> None:
        wait_ready(f"{self.url}{path}", self.proc, ready, self.unix_socket, self.tail)

    def tail(self, lines: int = LOG_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            return f"--- no log ({e}) ---"
        return f"--- {self.log}, last {len(text)} lines ---\n" + "\n".join(text)

    def send(self, sig: int = signal.SIGTERM) -> None:
        """`sig` to the daemon if it still runs, after SIGCONT in case the test stopped it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(sig)

    def exit_code(self) -> int:
        """Its exit status once it has gone (killed after READY_SECONDS), and then whatever is left of its
        process group."""
        try:
            self.proc.wait(timeout=READY_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # pgid == its pid
        return self.proc.returncode

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.send(sig)
        return self.exit_code()

    def stop_cleanly(self, sig: int = signal.SIGTERM) -> str:
        """Stopped with `sig`, which it must answer by exiting 0 (else the test fails with its log): its
        log."""
        code = self.stop(sig)
        assert code == 0, f"exited with {code}\n{self.tail()}"
        return self.log.read_text(errors="replace")


def launch(
    command: Sequence[str],
    log: Path,
    url: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    unix_socket: Path | None = None,
    group: bool = False,
) -> Daemon:
    """`command` started, its output appended to `log` (a restart keeps what the last run said); not yet
    waited for."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            command,
            env=clean_env() if env is None else env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=group,
        )
    return Daemon(proc, url, log, unix_socket=unix_socket, group=group)


def stop(daemons: Iterable[Daemon]) -> None:
    """SIGTERM to each daemon still running, all at once, then each waited for."""
    running = [d for d in daemons if d.proc.poll() is None]
    for daemon in running:
        daemon.send()
    for daemon in running:
        daemon.exit_code()


class Daemons:
    """The `attachstore serve` processes a test starts, one after another, each with its output in
    `root`/daemon-N.log; on leaving, each still running is stopped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[Daemon] = []

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

    def start(
        self,
        *argv: str,
        command: Sequence[str] = SERVE,
        prefix: Sequence[str] = (),
        wait: bool = True,
        ready: str = "/readyz",
        port: int | None = None,
        unix_socket: Path | None = None,
        environ: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        **env: str,
    ) -> Daemon:
        """`command` ARGV (`attachstore serve ARGV`) on `port` (a free one if not given) or `unix_socket`, run
        by `prefix` when given, in `environ` (by default this one without its ATTACHSTORE_ variables, and
        `env`); unless told not to `wait`, once `ready` answers 200."""
        if unix_socket is not None:
            where, url = ("--unix-socket", str(unix_socket)), "http://localhost"
        else:
            port = port or free_port()
            where, url = ("--listen", f"127.0.0.1:{port}"), f"http://127.0.0.1:{port}"
        log = self.root / f"daemon-{len(self.started)}.log"
        daemon = launch(
            [*prefix, *command, *where, *argv],
            log,
            url,
            env=clean_env(**env) if environ is None else environ,
            cwd=cwd,
            unix_socket=unix_socket,
        )
        self.started.append(daemon)
        if wait:
            daemon.wait_ready(ready)
        return daemon

    def stop(self) -> None:
        stop(self.started)


@contextlib.contextmanager
def serving(root: Path, config: str = "") -> Iterator[str]:
    """`attachstore serve` with `config` (TOML text) and its data dir under `root`, once ready: its URL."""
    with Daemons(root) as daemons:
        yield daemons.start(*daemons.store(config)).url
