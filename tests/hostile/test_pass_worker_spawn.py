"""A decode worker is started when an admission needs one (the first, or after one died) and that takes
descriptors: a socket pair, the child's pipes. A client who holds connections open until the daemon is a few
descriptors short of its RLIMIT_NOFILE makes that start fail: the admission is `503 SERVER_BUSY`, a moment's
trouble like any other lack of descriptors, never `500 INTERNAL`; a failed start keeps no descriptor (each
would be lost for good); and once the connections go, the next admission starts a worker and is stored."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import free_port, wait_ready
from tests.support.images import png
from tests.support.waiting import until

from .conftest import Daemon, write_config

NOFILE = 64  # the daemon's RLIMIT_NOFILE in this test


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon whose open-file limit is NOFILE, with one decode worker, started on the first admission."""
    data_dir, config, log = tmp_path / "data", tmp_path / "config.toml", tmp_path / "daemon.log"
    write_config(config, data_dir, {"admission": {"decode_workers": 1}})
    port = free_port()
    argv = [sys.executable, "-m", "attachstore", "serve", "--config", str(config)]
    argv += ["--listen", f"127.0.0.1:{port}", "--workers", "1"]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {hard}))"
    launch = f"{limit}; os.execv(sys.executable, {argv!r})"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", launch], env=env, stdout=out, stderr=subprocess.STDOUT)
    running = Daemon(f"http://127.0.0.1:{port}", proc, data_dir, log, config)
    try:
        wait_ready(f"{running.url}/healthz", proc)
        yield running
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _open(daemon: Daemon) -> int:
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def test_a_worker_that_cannot_start_for_want_of_descriptors_is_503(daemon: Daemon) -> None:
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(png(8, 8)).decode()}]}).encode()
    port = int(daemon.url.rsplit(":", 1)[1])
    before = _open(daemon)
    answers: dict[int, tuple[int, object]] = {}
    kept: dict[int, int] = {}  # descriptors the daemon still holds after a refused admission
    # From no descriptor spare up to a few more than a worker's start takes; the admission's own
    # connection takes one of them. Until a worker starts, every admission must start one.
    for spare in range(1, 12):
        held: list[socket.socket] = []
        try:
            while _open(daemon) < NOFILE - spare - 1:
                held.append(socket.create_connection(("127.0.0.1", port)))
            try:
                status, answer = daemon.post("mallory", "/v1/attachments", body)
            except ConnectionError:  # no descriptor even for the connection: the kernel's answer, not ours
                continue
        finally:
            for s in held:
                s.close()
        answers[spare] = (status, answer)
        until(lambda: _open(daemon) < NOFILE // 2, "the daemon to close the connections")
        if status == 201:
            break
        with contextlib.suppress(AssertionError):  # what is still held after a while is asserted below
            until(lambda: _open(daemon) <= before, "the daemon to let go of the descriptors", seconds=5)
        kept[spare] = _open(daemon) - before
    assert all(status in (201, 503) for status, _ in answers.values()), answers
    assert all(a["error"]["code"] == "SERVER_BUSY" for s, a in answers.values() if s == 503), answers  # type: ignore[index]
    assert all(n <= 0 for n in kept.values()), f"descriptors kept after each refusal: {kept}"
    assert "Traceback" not in daemon.log.read_text()
    status, answer = daemon.post("alice", "/v1/attachments", body)
    assert status == 201, answer
