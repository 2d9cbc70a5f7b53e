"""Running the app: listen on TCP or a Unix socket, stop cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import ipaddress
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from . import logs
from .api import DaemonSite, drain, make_app
from .config import Config
from .errors import ConfigError
from .loops import loop_factory
from .service import checkkey

log = logging.getLogger("attachstore.server")
SHUTDOWN_TIMEOUT = 30.0
WORKER_ENV = "ATTACHSTORE_WORKER_CONFIG"  # a worker process's resolved configuration, as JSON
REPLACE_ENV = "ATTACHSTORE_WORKER_REPLACE_POLICY"  # "1": the workers of serve --replace-policy
LISTENING_ENV = "ATTACHSTORE_WORKER_LISTENING_FD"  # where a worker writes a byte once it listens
SUPERVISOR_ENV = (
    "ATTACHSTORE_WORKER_SUPERVISOR"  # the supervisor's pid: a worker whose parent it is not is orphaned
)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's malloc.h


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_open_mode(config: Config) -> None:
    """Without tokens the daemon is open, so it may only be reachable from this machine."""
    if config.unix_socket or not config.is_open:
        return
    host, _ = config.host_port
    if not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {config.listen} without access tokens: an open store may only listen on "
            "a loopback address (127.0.0.1, ::1) or a Unix socket (--unix-socket PATH). To serve other "
            "machines, make a token with `attachstore token new --tenant NAME` and add the [[tenants]] "
            "lines it prints to the configuration"
        )


def _clear_stale_socket(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"unix_socket: {path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # left behind by a daemon that did not stop cleanly
            return
    raise ConfigError(f"unix_socket: another daemon is already serving on {path}")


class ListenError(OSError):
    def __str__(self) -> str:
        return str(self.strerror)


def _cannot_listen(config: Config, e: OSError) -> ListenError:
    host, port = config.host_port
    other = f"[{host}]" if ":" in host else host
    other += f":{port + 1 if port < 65535 else port - 1}"
    why = (
        "it is already in use (another attachstore, or another program, listens there)"
        if e.errno == errno.EADDRINUSE
        else e.strerror
    )
    return ListenError(
        e.errno,
        f"cannot listen on {config.listen}: {why}. Stop the other program, or choose another address with "
        f'--listen HOST:PORT: `attachstore serve --listen {other}` (`make run ARGS="--listen {other}"`)',
    )


def _taken(host: str, port: int) -> bool:
    # binding with SO_REUSEPORT succeeds beside another `serve --workers N` of this user: ask instead
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def bind(config: Config, *, listen: bool = True, reuse_port: bool = False) -> socket.socket:
    """For TCP with several workers each binds its own socket with SO_REUSEPORT, so the kernel spreads
    connections across them (on one shared socket whichever process wakes first accepts every pending
    one); a Unix socket is made once and shared."""
    if config.unix_socket:
        _clear_stale_socket(config.unix_socket)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(config.unix_socket)
    else:
        host, port = config.host_port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise _cannot_listen(config, e) from None
    if listen:
        sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def run(config: Config, workers: int = 1, *, replace_policy: bool = False) -> int:
    check_open_mode(config)
    checkkey.checker(config)  # a key that cannot be had stops here, said once, not by every worker
    spread = workers > 1 and not config.unix_socket
    if spread and _taken(*config.host_port):
        raise _cannot_listen(config, OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE)))
    sock = bind(config, listen=not spread, reuse_port=spread)
    where = f"unix:{config.unix_socket}" if config.unix_socket else f"http://{config.listen}"

    def serving() -> None:  # once every worker listens: a start-up that fails never says it serves
        log.info("attachstore serving %s on %s with %d worker(s)", config.data_dir, where, workers)

    try:
        if workers <= 1:
            _run_loop(serve_on(config, sock, replace_policy=replace_policy, listening=serving))
            return 0
        return _supervise(config, sock, workers, replace_policy, serving)
    finally:
        sock.close()
        if config.unix_socket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(config.unix_socket)


def _keep_freed_memory() -> None:
    """glibc hands a freed block of more than 128 KiB back to the kernel at once, so every read's buffer
    had its pages faulted in anew; blocks up to 32 MiB now come from the heap (docs/performance.md,
    "Admissions over JSON: their buffers")."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 16 << 20)  # free kept per heap: a worker may hold a few times that


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    _keep_freed_memory()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main)


async def serve_on(
    config: Config,
    sock: socket.socket | Callable[[], socket.socket],
    *,
    replace_policy: bool = False,
    listening: Callable[[], None] = lambda: None,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain (`docs/design.md`, "Shutdown"). Given a function, the
    socket is made only once the store is open, so that no connection waits on a worker that cannot
    serve it yet."""
    app = make_app(config, replace_policy=replace_policy)
    # A client that disconnects cancels its request, as in aiohttp's test server: an admission stops its
    # decodes (and, cut off before its commit, publishes nothing), a render stops reading.
    runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None, handler_cancellation=True)
    await runner.setup()
    loop = asyncio.get_running_loop()
    site: DaemonSite | None = None
    try:
        site = DaemonSite(runner, sock if isinstance(sock, socket.socket) else sock())
        await site.start()
        listening()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping: finishing in-flight requests")
    finally:
        if site is not None:
            await site.stop()
        # aiohttp's cleanup closes every connection, dropping what still arrives on them: the requests in
        # progress (aiohttp's and the read lanes') are let finish first.
        await drain(app, SHUTDOWN_TIMEOUT)
        await runner.cleanup()


def _supervise(
    config: Config, sock: socket.socket, workers: int, replace_policy: bool, serving: Callable[[], None]
) -> int:
    """If one worker dies, all stop, and the log says which and how (`docs/design.md`, "Processes")."""
    child_config = _shared_out(config, workers)
    # Each worker keeps its metric samples in files here, so /metrics on any worker reports them all.
    samples = tempfile.TemporaryDirectory(prefix="attachstore-metrics-")
    listening_read, listening_write = os.pipe()  # each worker writes a byte once it listens
    os.set_blocking(listening_read, False)

    def child_env(number: int) -> dict[str, str]:
        worker_config = child_config
        if config.storage.cache_dir:  # a read cache keeps its accounting in memory: one directory each
            cache_dir = str(Path(config.storage.cache_dir) / f"worker-{number}")
            storage = msgspec.structs.replace(config.storage, cache_dir=cache_dir)
            worker_config = msgspec.structs.replace(child_config, storage=storage)
        return {
            **os.environ,
            WORKER_ENV: msgspec.json.encode(worker_config).decode(),
            REPLACE_ENV: "1" if replace_policy else "",
            LISTENING_ENV: str(listening_write),
            SUPERVISOR_ENV: str(os.getpid()),
            "PROMETHEUS_MULTIPROC_DIR": samples.name,
        }

    argv = [sys.executable, "-m", "attachstore.server", str(sock.fileno()) if config.unix_socket else "tcp"]
    fds = [sock.fileno(), listening_write] if config.unix_socket else [listening_write]
    children = _Children()
    # Handlers first: a signal while the workers start must still reach every one of them.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, children.stop)
    try:
        for number in range(workers):
            if not children.stopping:
                children.processes.append(subprocess.Popen(argv, env=child_env(number), pass_fds=fds))
    finally:
        os.close(listening_write)
    failed = _wait(children, workers, listening_read, serving)
    os.close(listening_read)
    samples.cleanup()
    return _exit_status(children, failed)


def _shared_out(config: Config, workers: int) -> Config:
    body_cap = config.http.body_cap(config.limits)
    admission = msgspec.structs.replace(
        config.admission,
        decode_workers=max(1, config.admission.workers // workers),
        max_concurrent=max(1, config.admission.max_concurrent // workers),
        max_concurrent_per_tenant=max(1, config.admission.max_concurrent_per_tenant // workers)
        if config.admission.max_concurrent_per_tenant
        else 0,
        max_buffered_bytes=max(1, config.admission.buffered_bytes(body_cap) // workers),
    )
    return msgspec.structs.replace(config, admission=admission)


class _Children:
    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.stopping = False

    def stop(self, signum: int = signal.SIGTERM, frame: object = None) -> None:
        self.stopping = True
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)


def _wait(children: _Children, workers: int, listening_read: int, serving: Callable[[], None]) -> int | None:
    failed: int | None = None
    listening = 0
    while any(child.poll() is None for child in children.processes):
        if listening < workers:
            with contextlib.suppress(BlockingIOError):
                listening += len(os.read(listening_read, workers))
                if listening >= workers and not children.stopping:
                    serving()
        for child in children.processes:
            if child.poll() not in (None, 0) and not children.stopping:
                log.error("worker %d %s; stopping the others", child.pid, _ended(child.returncode))
                failed = child.returncode
                children.stop()
        time.sleep(0.2)
    return failed


def _exit_status(children: _Children, failed: int | None) -> int:
    statuses = [child.returncode for child in children.processes]
    if failed is None and not children.stopping and statuses:  # every one ended between two looks of _wait
        ended = ", ".join(f"worker {child.pid} {_ended(child.returncode)}" for child in children.processes)
        level = logging.ERROR if any(status != 0 for status in statuses) else logging.WARNING
        log.log(level, "every worker ended at once: %s; the daemon stops", ended)
    # A worker still starting when asked to stop dies of the SIGTERM itself (it serves nothing yet): clean.
    clean = (0, -signal.SIGTERM) if children.stopping else (0,)
    if failed == 2 or (failed is None and 2 in statuses):
        return 2
    return 1 if failed is not None or any(status not in clean for status in statuses) else 0


def _ended(status: int | None) -> str:
    if status is not None and status < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-status).name}"
        return f"was killed by signal {-status}"
    return f"exited with {status}"


def _die_with_parent() -> None:
    supervisor = int(os.environ.pop(SUPERVISOR_ENV, "0"))
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    # The supervisor was already gone. Not `== 1`: in a container the supervisor itself is PID 1.
    if os.getppid() != supervisor:
        sys.exit(0)


def _worker_main(where: str) -> None:
    _die_with_parent()
    logs.setup()
    config = msgspec.json.decode(os.environ.pop(WORKER_ENV), type=Config)  # not left where children see it
    replace_policy = os.environ.pop(REPLACE_ENV, "") == "1"
    sock: socket.socket | Callable[[], socket.socket] = functools.partial(bind, config, reuse_port=True)
    if where != "tcp":
        sock = socket.socket(fileno=int(where))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; a terminal's ^C reaches it
    listening_write = int(os.environ.pop(LISTENING_ENV, "-1"))
    if listening_write >= 0:
        os.set_inheritable(listening_write, False)  # not for the decode workers

    def listening() -> None:
        if listening_write >= 0:
            with contextlib.suppress(OSError):
                os.write(listening_write, b"1")
                os.close(listening_write)

    try:
        _run_loop(serve_on(config, sock, replace_policy=replace_policy, listening=listening))
    except ConfigError as e:  # the store's policy, say: the supervisor stops the others
        log.error("worker %d cannot serve: %s", os.getpid(), e)
        print(f"attachstore: {e}", file=sys.stderr)  # as `serve --workers 1` says it
        sys.exit(2)


if __name__ == "__main__":
    _worker_main(sys.argv[1])
