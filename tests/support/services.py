"""Throw-away S3 (a single-node Ceph with its RADOS Gateway) and PostgreSQL servers for the tests.

    python -m tests.support.services up|down|env [--only s3|postgresql] [--base DIR]

`up` installs what is missing (Debian packages; needs root), starts the servers detached on 127.0.0.1 with
free ports, and prints where they answer as `export ATTACHSTORE_TEST_...` lines; `env` prints them again;
`down` stops them and deletes their directory. A second `up` reuses servers that still answer. Everything
lives under one base directory, `$ATTACHSTORE_SERVICES_DIR` or else `$TMPDIR/attachstore-services`:
`ceph/`, `postgresql/` and the state file `services.json`. The daemons outlive the process that started
them, so `down` finds them by their pid files (and sweeps for any of our programs still running on files
under the base directory). From pytest: `up()`, `down()`, `fresh_bucket()`, `fresh_database()`.

Ceph: one monitor, one memstore OSD (objects in RAM, gone on restart), radosgw (beast), auth disabled,
S3 user TESTACCESSKEY / TESTSECRETKEY. PostgreSQL: trust authentication, superuser `postgres`, database
`attachstore_test`; the server refuses to run as root, so as root it runs as the `postgres` (else `nobody`)
system user.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.waiting import until

log = logging.getLogger(__name__)

KINDS = ("s3", "postgresql")
HOMES = {"s3": "ceph", "postgresql": "postgresql"}  # each kind's directory under the base directory
PACKAGES = {"s3": ("ceph-mon", "ceph-osd", "radosgw", "ceph-common"), "postgresql": ("postgresql",)}
CEPH_TOOLS = ("monmaptool", "ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph")
# Only processes running one of these programs on files under the base directory are ever signalled.
PROGRAMS = frozenset({*CEPH_TOOLS, "postgres", "initdb", "pg_ctl"})
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ACCESS_KEY, SECRET_KEY, REGION = "TESTACCESSKEY", "TESTSECRETKEY", "us-east-1"
DATABASE = "attachstore_test"
PROBE_BUCKET = "attachstore-probe"  # `up` proves S3 works with a PUT and a GET here


class ServiceError(Exception):
    """A server could not be installed, started or reached; the message ends with its logs' last lines."""


@dataclass(frozen=True)
class Services:
    """Where the servers answer; the fields of a kind that was not asked for are None."""

    s3_endpoint: str | None = None
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    s3_region: str | None = None
    postgres_dsn: str | None = None

    def env(self) -> dict[str, str]:
        """ATTACHSTORE_TEST_S3_ENDPOINT, …, ATTACHSTORE_TEST_POSTGRES_DSN for the fields that are set."""
        return {f"ATTACHSTORE_TEST_{k.upper()}": v for k, v in asdict(self).items() if v is not None}


def base_dir() -> Path:
    configured = os.environ.get("ATTACHSTORE_SERVICES_DIR")
    return Path(configured or Path(tempfile.gettempdir()) / "attachstore-services").absolute()


def up(only: str | None = None, base: Path | None = None) -> Services:
    """Make the servers answer (both kinds, or `only` one): reuse healthy ones, (re)start the others."""
    kinds, base = _kinds(only), (base or base_dir()).absolute()
    with _lock(base):
        state = _read_state(base)
        stale = [kind for kind in kinds if not _healthy(kind, state.get(kind))]
        _install(stale, base)
        with ThreadPoolExecutor(max_workers=len(KINDS)) as pool:  # Ceph and PostgreSQL boot side by side
            started: dict[str, Future[dict[str, str]]] = {
                kind: pool.submit(_start, kind, base / HOMES[kind]) for kind in stale
            }
        errors = []
        for kind, future in started.items():
            if (error := future.exception()) is None:
                state[kind] = future.result()
            else:
                state.pop(kind, None)
                errors.append(error)
        _write_state(base, state)
        if len(errors) > 1:
            raise ServiceError("\n\n".join(str(error) for error in errors))
        if errors:
            raise errors[0]
        return _services(state, kinds)


def down(only: str | None = None, base: Path | None = None) -> None:
    """Stop the servers (radosgw, OSD, monitor; PostgreSQL) and delete their files."""
    kinds, base = _kinds(only), (base or base_dir()).absolute()
    with _lock(base):
        for kind in kinds:
            _STOP[kind](base / HOMES[kind])
            shutil.rmtree(base / HOMES[kind], ignore_errors=True)
        state = {kind: fields for kind, fields in _read_state(base).items() if kind not in kinds}
        if state:
            _write_state(base, state)
        elif not any((base / home).exists() for home in HOMES.values()):
            shutil.rmtree(base, ignore_errors=True)


def current(only: str | None = None, base: Path | None = None) -> Services | None:
    """What `up` recorded (not checked): every kind that is up, or `only` one; None if none is."""
    state = _read_state((base or base_dir()).absolute())
    kinds = tuple(kind for kind in _kinds(only) if kind in state)
    return _services(state, kinds) if kinds else None


# -- helpers for tests ---------------------------------------------------------------------------------


@contextlib.contextmanager
def s3_client(services: Services, *, timeout: float = 30, attempts: int = 3) -> Iterator[Any]:
    """A synchronous botocore S3 client for `services`, closed on exit."""
    if services.s3_endpoint is None:
        raise ServiceError("S3 is not up: call up() or up(only='s3') first")
    import botocore.session
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path"},
        # botocore >= 1.36 sends aws-chunked bodies with checksum trailers by default; radosgw 16 rejects them
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        connect_timeout=timeout,
        read_timeout=timeout,
        retries={"mode": "standard", "total_max_attempts": attempts},
    )
    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=services.s3_endpoint,
        region_name=services.s3_region,
        aws_access_key_id=services.s3_access_key,
        aws_secret_access_key=services.s3_secret_key,
        config=config,
    )
    try:
        yield client
    finally:
        client.close()


def fresh_bucket(services: Services) -> str:
    """Create an empty bucket with a unique name; returns its name."""
    name = f"test-{uuid.uuid4().hex[:20]}"
    with s3_client(services) as s3:
        s3.create_bucket(Bucket=name)
    return name


def fresh_database(dsn: str) -> str:
    """Create an empty database with a unique name on `dsn`'s server; returns its DSN."""
    name = f"{DATABASE}_{uuid.uuid4().hex[:12]}"
    _sql(_with_database(dsn, "postgres"), f"CREATE DATABASE {_quote(name)}")
    return _with_database(dsn, name)


def drop_database(dsn: str) -> None:
    """Drop `dsn`'s database, ending the sessions still connected to it."""
    name = urlsplit(dsn).path.lstrip("/")
    _sql(_with_database(dsn, "postgres"), f"DROP DATABASE IF EXISTS {_quote(name)} WITH (FORCE)")


# -- state ---------------------------------------------------------------------------------------------


def _kinds(only: str | None) -> tuple[str, ...]:
    if only is None:
        return KINDS
    if only not in KINDS:
        raise ValueError(f"only must be one of {KINDS}, not {only!r}")
    return (only,)


@contextlib.contextmanager
def _lock(base: Path) -> Iterator[None]:
    """Serialise `up` and `down` on one base directory (the lock sits beside it: `down` deletes the dir)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    with open(base.parent / f".{base.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read_state(base: Path) -> dict[str, dict[str, str]]:
    try:
        state: dict[str, dict[str, str]] = json.loads((base / "services.json").read_text())
    except (OSError, ValueError):
        return {}
    return state


def _write_state(base: Path, state: dict[str, dict[str, str]]) -> None:
    base.mkdir(parents=True, exist_ok=True)
    staging = base / "services.json.new"
    staging.write_text(json.dumps(state, indent=2) + "\n")
    staging.replace(base / "services.json")


def _services(state: dict[str, dict[str, str]], kinds: tuple[str, ...]) -> Services:
    return Services(**{name: value for kind in kinds for name, value in state[kind].items()})


def _healthy(kind: str, fields: dict[str, str] | None) -> bool:
    if not fields:
        return False
    services = Services(**fields)
    try:
        if kind == "s3":
            _s3_probe(services, timeout=5)
        else:
            _sql(str(services.postgres_dsn), "SELECT 1", timeout=5)
    except Exception as e:
        log.info("%s: recorded server does not answer (%s); restarting it", kind, str(e).splitlines()[0])
        return False
    log.info("%s: reusing the running server", kind)
    return True


# -- installing ----------------------------------------------------------------------------------------


def _installed(kind: str) -> bool:
    if kind == "s3":
        return all(shutil.which(tool, path=_path()) for tool in CEPH_TOOLS)
    return _pg_bindir() is not None


def _install(kinds: list[str], base: Path) -> None:
    packages = [package for kind in kinds if not _installed(kind) for package in PACKAGES[kind]]
    if not packages:
        return
    base.mkdir(parents=True, exist_ok=True)
    apt_install(packages, base / "apt.log")
    if missing := [kind for kind in kinds if not _installed(kind)]:
        raise _error(f"still missing after apt-get install: {', '.join(missing)}", base / "apt.log")


def apt_install(packages: list[str], out: Path) -> None:
    """Install Debian packages (root only), their output appended to `out`; the package lists are updated
    first only when apt-get cannot find a package. Raises ServiceError."""
    command = ["apt-get", "install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300"]
    if os.geteuid() != 0:
        raise ServiceError(
            f"missing packages, and only root can install them: {shlex.join(command + packages)}"
        )
    began = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "PATH": _path()}
    try:
        _run([*command, *packages], out, env=env, timeout=1200)
    except ServiceError:
        tail = out.read_text(errors="replace")[-4000:]
        if not any(sign in tail for sign in ("Unable to locate package", "no installation candidate", "404")):
            raise
        log.info("package lists are missing or stale: apt-get update")
        _run(["apt-get", "update"], out, env=env, timeout=600)
        _run([*command, *packages], out, env=env, timeout=1200)
    log.info("installed %s in %.1f s", " ".join(packages), time.monotonic() - began)


def _path() -> str:
    return os.pathsep.join(filter(None, (os.environ.get("PATH"), SYSTEM_PATH)))


def _pg_bindir() -> Path | None:
    """The newest PostgreSQL's binaries (Debian keeps them in /usr/lib/postgresql/N/bin, off the PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda d: _version(d.parent.name))[::-1]
    if initdb := shutil.which("initdb", path=_path()):
        found.append(Path(initdb).resolve().parent)
    return next((d for d in found if all((d / p).exists() for p in ("initdb", "pg_ctl", "postgres"))), None)


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


# -- starting ------------------------------------------------------------------------------------------


def _start(kind: str, home: Path) -> dict[str, str]:
    """Start one kind in an empty `home`; on any failure stop what did start (its logs stay for a look)."""
    _STOP[kind](home)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    began = time.monotonic()
    try:
        fields = _START[kind](home)
    except BaseException:
        _STOP[kind](home)
        raise
    log.info("%s: up in %.1f s", kind, time.monotonic() - began)
    return fields


def _run(
    command: list[str | Path],
    out: Path,
    *,
    capture: bool = False,
    user: pwd.struct_passwd | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> str:
    """Run `command` to its end, its output appended to `out` (stdout returned instead with `capture`).

    A daemon that forks into the background inherits these file descriptors: never a pipe for those, or
    this call would wait for the daemon's end.
    """
    args = [str(arg) for arg in command]
    as_user: dict[str, Any] = {}
    if user is not None:  # the server's own user, in a directory it may read
        as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "cwd": out.parent}
    with out.open("ab") as sink:
        sink.write(f"$ {shlex.join(args)}\n".encode())
        sink.flush()
        try:
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if capture else sink,
                stderr=sink,
                env=env or {**os.environ, "PATH": _path()},
                timeout=timeout,
                check=False,
                **as_user,
            )
        except subprocess.TimeoutExpired:
            raise _error(f"{args[0]} did not finish within {timeout:g} s", out) from None
        except OSError as e:
            raise ServiceError(f"cannot run {args[0]}: {e}") from None
    if done.returncode != 0:
        raise _error(f"{shlex.join(args)} exited with status {done.returncode}", out)
    return done.stdout.decode() if capture else ""


def _wait(what: str, ready: Callable[[], bool], timeout: float, *logs: Path, pid: int | None = None) -> None:
    """Poll `ready` until true; fail early if process `pid` dies, late after `timeout` s."""
    last = ""

    def done() -> bool:
        nonlocal last
        try:
            if ready():
                return True
        except Exception as e:
            last = f" (last: {str(e).splitlines()[0] if str(e) else type(e).__name__})"
        if pid is not None and not _alive(pid):
            raise _error(f"the process died while waiting for {what}", *logs)
        return False

    try:
        until(done, what, timeout, every=0.1)
    except AssertionError:
        raise _error(f"timed out after {timeout:g} s waiting for {what}{last}", *logs) from None


def _error(message: str, *logs: Path, lines: int = 30) -> ServiceError:
    for path in logs:
        with contextlib.suppress(OSError):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            message += f"\n--- {path}, last {len(tail)} lines ---\n" + "\n".join(tail)
    return ServiceError(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- Ceph ----------------------------------------------------------------------------------------------


# One monitor and one OSD on loopback, no authentication, pools of one replica; `$name` is Ceph's own.
CEPH_CONF = """\
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
keyring = /dev/null
run dir = {home}/run
pid file = {home}/run/$name.pid
log file = {home}/log/$name.log
crash dir = {home}/crash
mon data = {home}/mon/$cluster-$id
osd data = {home}/osd/$cluster-$id
osd objectstore = memstore
memstore device bytes = 2147483648
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
paxos propose interval = 0.01
paxos min wait = 0.001
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
# a nearly full disk must not stop the monitor
mon data avail warn = 1
mon data avail crit = 0

[client]
# radosgw asks for the "secure" monitor connection mode by default, which auth "none" does not allow
ms mon client mode = crc

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {home}/rgw
rgw thread pool size = 64
"""


def _start_ceph(home: Path) -> dict[str, str]:
    for sub in ("run", "log", "crash", "rgw", "mon/ceph-a", "osd/ceph-0"):
        (home / sub).mkdir(parents=True)
    conf, out, logs = home / "ceph.conf", home / "log" / "commands.log", home / "log"
    fsid, osd_uuid, mon_port, rgw_port = str(uuid.uuid4()), str(uuid.uuid4()), free_port(), free_port()
    conf.write_text(CEPH_CONF.format(home=home, fsid=fsid, mon_port=mon_port, rgw_port=rgw_port))
    c = ["-c", conf]
    ceph = ["ceph", *c, "--connect-timeout", "20"]

    monmap = home / "monmap"
    _run(["monmaptool", "--create", "--fsid", fsid, "--addv", "a", f"[v2:127.0.0.1:{mon_port}]", monmap], out)
    _run(["ceph-mon", *c, "-i", "a", "--mkfs", "--monmap", monmap], out)
    _daemon(["ceph-mon", *c, "-i", "a"], home, out)
    osd = _run([*ceph, "osd", "new", osd_uuid], out, capture=True).strip()
    if osd != "0":
        raise _error(f"`ceph osd new` gave OSD id {osd!r}, expected 0", out)
    _run(["ceph-osd", *c, "-i", osd, "--mkfs", "--osd-uuid", osd_uuid], out)
    osd_pid = _daemon(["ceph-osd", *c, "-i", osd], home, out)

    def osd_up() -> bool:
        stat = json.loads(_run([*ceph, "osd", "stat", "-f", "json"], out, capture=True))
        return bool(stat.get("num_up_osds") == 1)

    _wait("the OSD to come up", osd_up, 60, logs / "osd.0.log", out, pid=osd_pid)
    rgw_pid = _daemon(["radosgw", *c, "-n", "client.rgw.a"], home, out)
    endpoint, rgw_log = f"http://127.0.0.1:{rgw_port}", logs / "client.rgw.a.log"
    _wait("radosgw to answer HTTP", lambda: _answers(endpoint), 60, rgw_log, out, pid=rgw_pid)
    user = ["--uid=test", "--display-name=test", f"--access-key={ACCESS_KEY}", f"--secret-key={SECRET_KEY}"]
    _run(["radosgw-admin", *c, "user", "create", *user], out, capture=True)  # capture: keep its JSON out
    fields = dict(s3_endpoint=endpoint, s3_access_key=ACCESS_KEY, s3_secret_key=SECRET_KEY, s3_region=REGION)
    services = Services(**fields)
    _wait("an S3 PUT and GET to work", lambda: _s3_probe(services, 5), 30, rgw_log, pid=rgw_pid)
    return fields


def _daemon(command: list[str | Path], home: Path, out: Path) -> int:
    """Start a Ceph daemon, which forks into the background once it runs; returns that process's pid."""
    _run(command, out)
    program = os.path.basename(command[0])
    if pids := [pid for pid in _strays(home) if os.path.basename(_argv(pid)[0]) == program]:
        return pids[0]
    # The background process exists before the foreground one returns: this one died already.
    raise _error(f"{program} stopped right after it started", *sorted((home / "log").glob("*.log")))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:  # any HTTP answer will do
        return True


def _s3_probe(services: Services, timeout: float) -> bool:
    """PUT then GET an object in PROBE_BUCKET; raises unless the same bytes come back."""
    with s3_client(services, timeout=timeout, attempts=1) as s3:
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=PROBE_BUCKET)
        body = uuid.uuid4().bytes
        s3.put_object(Bucket=PROBE_BUCKET, Key="probe", Body=body)
        with s3.get_object(Bucket=PROBE_BUCKET, Key="probe")["Body"] as got:
            if got.read() != body:
                raise ServiceError("S3 GET returned other bytes than the PUT stored")
    return True


def _stop_ceph(home: Path) -> None:
    # radosgw hangs for two minutes when its OSD goes first, and an OSD whose monitor is gone waits 5 s.
    for daemon in ("client.rgw.*", "osd.*", "mon.*"):
        pids = [
            pid for f in (home / "run").glob(f"{daemon}.pid") if (pid := _pidfile(f)) and _ours(pid, home)
        ]
        _terminate(pids, grace=10)
    _terminate(_strays(home), grace=2)


# -- PostgreSQL ----------------------------------------------------------------------------------------


def _start_postgresql(home: Path) -> dict[str, str]:
    bindir = _pg_bindir()
    if bindir is None:
        raise ServiceError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
    user = _pg_user()
    data, sockets, out, server_log = home / "data", home / "run", home / "commands.log", home / "server.log"
    sockets.mkdir()
    out.touch()
    server_log.touch()
    if user is not None:
        for path in (home, sockets, out, server_log):
            os.chown(path, user.pw_uid, user.pw_gid)
    initdb = [bindir / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"]
    _run([*initdb, "--no-sync"], out, user=user)  # --no-sync: initdb's own final flush; the server fsyncs
    port = free_port()
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{sockets}'\n")
    pg_ctl = [bindir / "pg_ctl", "-D", data, "-l", server_log, "-w", "-t", "60", "start"]
    try:
        _run(pg_ctl, out, user=user, timeout=90)
    except ServiceError as e:
        raise _error(str(e), server_log) from None
    dsn = f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"
    try:  # pg_ctl -w returned once the server accepts connections
        _sql(_with_database(dsn, "postgres"), f"CREATE DATABASE {DATABASE}")
    except Exception as e:
        raise _error(f"cannot create the database {DATABASE}: {e}", server_log) from None
    return {"postgres_dsn": dsn}


def _pg_user() -> pwd.struct_passwd | None:
    """The user to run PostgreSQL as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ServiceError("PostgreSQL refuses to run as root, and there is no 'postgres' or 'nobody' user")


def _stop_postgresql(home: Path) -> None:
    data = home / "data"
    postmaster = _pidfile(data / "postmaster.pid")
    if postmaster is not None and _ours(postmaster, home):
        backends = _children(postmaster)
        bindir = _pg_bindir()
        if bindir is not None:
            owner = data.stat().st_uid
            user = pwd.getpwuid(owner) if owner != os.geteuid() else None  # pg_ctl refuses to run as root
            stop = [bindir / "pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "10", "stop"]
            with contextlib.suppress(ServiceError):
                _run(stop, home / "commands.log", user=user, timeout=20)
        _terminate([postmaster, *backends], grace=5, sig=signal.SIGQUIT)
    _terminate(_strays(home), grace=2)


def _sql(dsn: str, statement: str, timeout: float = 30) -> None:
    """Run one statement on a new connection, in a thread of its own: the caller may be in an event loop."""
    import asyncpg

    async def run() -> None:
        connection = await asyncpg.connect(dsn, timeout=timeout)
        try:
            await connection.execute(statement, timeout=timeout)
        finally:
            await connection.close(timeout=timeout)

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: asyncio.run(run())).result()


def _with_database(dsn: str, name: str) -> str:
    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


# -- processes -----------------------------------------------------------------------------------------


def _pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie (dead, not yet reaped by its parent) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _ours(pid: int, home: Path) -> bool:
    """Whether `pid` runs one of PROGRAMS on files under `home` (guards against a reused pid)."""
    argv = _argv(pid)
    programs = {os.path.basename(arg) for arg in argv[:2]}  # [python3, /usr/bin/ceph] for the ceph CLI
    prefix = f"{home}{os.sep}"
    return pid != os.getpid() and bool(programs & PROGRAMS) and any(arg.startswith(prefix) for arg in argv)


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return [""]


def _strays(home: Path) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ours(int(p.name), home)]


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            kids += [int(kid) for kid in (task / "children").read_text().split()]
    return kids


def _terminate(pids: list[int], grace: float, sig: signal.Signals = signal.SIGTERM) -> None:
    """Send `sig`, SIGKILL what still runs after `grace` s, and return once all are gone."""
    pids = [pid for pid in pids if _alive(pid)]
    _signal(pids, sig)
    if pids := _outliving(pids, grace):
        log.info("pids %s did not stop within %g s: SIGKILL", pids, grace)
        _signal(pids, signal.SIGKILL)
        if pids := _outliving(pids, 10):
            raise ServiceError(f"pids {pids} survived SIGKILL")


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _outliving(pids: list[int], seconds: float) -> list[int]:
    with contextlib.suppress(AssertionError):
        until(lambda: not any(_alive(pid) for pid in pids), "the processes to end", seconds)
    return [pid for pid in pids if _alive(pid)]


_START: dict[str, Callable[[Path], dict[str, str]]] = {"s3": _start_ceph, "postgresql": _start_postgresql}
_STOP: dict[str, Callable[[Path], None]] = {"s3": _stop_ceph, "postgresql": _stop_postgresql}


# -- command line --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.services",
        description="Throw-away S3 (Ceph) and PostgreSQL servers for the tests.",
    )
    parser.add_argument("command", choices=("up", "down", "env"))
    parser.add_argument("--only", choices=KINDS, help="one kind of server (default: both)")
    parser.add_argument(
        "--base",
        type=Path,
        help="their directory (default: $ATTACHSTORE_SERVICES_DIR or $TMPDIR/attachstore-services)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "down":
            down(args.only, args.base)
            return 0
        services = up(args.only, args.base) if args.command == "up" else current(args.only, args.base)
    except ServiceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if services is None:
        print("error: not up; start them with: python -m tests.support.services up", file=sys.stderr)
        return 1
    for name, value in services.env().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
