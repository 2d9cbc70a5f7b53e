"""Real daemon processes in tests: a free port, waiting until one answers, and one serving for a while."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

READY_SECONDS = 60.0  # a daemon's start on a loaded machine: a guard against a hang, not a measure


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")}
    env |= {"ATTACHSTORE_DATA_DIR": str(root / "data"), "ATTACHSTORE_CONFIG": str(root / "attachstore.toml")}
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
