"""Real daemon processes in tests: a free port, and waiting until one answers."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, proc: subprocess.Popen[bytes], ready: tuple[int, ...] = (200,)) -> None:
    """Until `url` answers with one of the `ready` statuses; fails if `proc` exits first."""
    deadline = time.monotonic() + 30
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
    raise AssertionError("serve did not become ready")
