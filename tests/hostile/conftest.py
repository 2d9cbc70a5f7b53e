"""A real daemon with small caps, and two tenants: `mallory`, who attacks with a valid token, and `alice`,
whose ordinary traffic must still be served. Each test module here is one kind of attack; each asserts the
answer, the daemon's memory (its resident set, read from /proc), and that alice is still served. Bounds
about time are asserted on work done (parts read, bytes buffered, decodes started, segments walked), never
on wall-clock thresholds."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import free_port, wait_ready
from tests.support.images import png

TOKENS = {"mallory": "mallory-token", "alice": "alice-token"}


@dataclass
class Daemon:
    url: str
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log: Path
    config: Path

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKENS[tenant]}"}

    def _status(self, field: str) -> int:
        """A field of /proc/<pid>/status, in bytes (the kernel reports kB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def rss(self) -> int:
        """The daemon's resident memory now."""
        return self._status("VmRSS")

    def peak_rss(self) -> int:
        """The most resident memory the daemon has had since it started (the high-water mark)."""
        return self._status("VmHWM")

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of GET /metrics with this full name (`attachstore_decodes_total`) and
        these labels; 0 when there are none."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read().decode()
        return sum(
            float(sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def post(
        self, tenant: str, path: str, body: bytes | Iterable[bytes], content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """POST `body` as `tenant` (an iterable is sent chunked, with no declared length): status and JSON."""
        return self.request(tenant, "POST", path, body, content_type)

    def request(
        self,
        tenant: str,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] = b"",
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """Any request as `tenant`; `path` is sent as it is (percent-escapes and all). Status and JSON."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            headers = {**self.headers(tenant), "Content-Type": content_type}
            # The daemon may answer, and close, before the whole body is sent.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                connection.request(method, path, body, headers, encode_chunked=not isinstance(body, bytes))
            answer = connection.getresponse()
            return answer.status, json.loads(answer.read() or b"null")
        finally:
            connection.close()

    def ask(
        self, tenant: str, method: str, path: str, body: bytes = b"", **headers: str
    ) -> tuple[int, bytes]:
        """Any request as `tenant`, with these headers besides: status, and the body as it came (not read as
        JSON)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            sent = {**self.headers(tenant), "Content-Type": "application/json", **headers}
            connection.request(method, path, body or None, sent)
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def admit(self, tenant: str, image: bytes) -> str:
        """`image` stored for `tenant` (201, else the test fails): its ref."""
        body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]})
        status, answer = self.post(tenant, "/v1/attachments", body.encode())
        assert status == 201, answer
        ref: str = answer["attachments"][0]["ref"]
        return ref

    def connect(self) -> socket.socket:
        """A new connection to the daemon (a 60 s timeout: a guard against a hang)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=60)

    def access(self, endpoint: str, count: int = 1) -> list[dict[str, Any]]:
        """The access log lines of `endpoint`, once there are `count` (the log is written a moment late). A
        guard against a hang, not a bound: fewer than `count` after 60 s fails the test."""
        deadline = time.monotonic() + 60
        while True:
            lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
            found = [x for x in lines if x.get("msg") == "request" and x.get("endpoint") == endpoint]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"after 60 s, {len(found)} access log lines of {endpoint} in {self.log}, "
                    f"not the {count} expected: {found}"
                )
            time.sleep(0.05)

    def assert_alice_is_served(self) -> None:
        """An ordinary admission and read of alice's still work."""
        image = png(16, 16)
        ref = self.admit("alice", image)
        with urllib.request.urlopen(
            urllib.request.Request(f"{self.url}/v1/attachments/{ref}", headers=self.headers("alice")),
            timeout=30,
        ) as read:
            assert read.read() == image


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def write_config(path: Path, data_dir: Path, sections: dict[str, dict[str, Any]]) -> None:
    lines = [f"data_dir = {_toml(str(data_dir))}", ""]
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {_toml(v)}" for key, v in values.items()]
        lines.append("")
    for tenant, token in TOKENS.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        lines += ["[[tenants]]", f"name = {_toml(tenant)}", f"token_sha256 = {_toml(digest)}", ""]
    path.write_text("\n".join(lines))


def serve(config: Path, out: IO[bytes], *where: str, nofile: int | None = None) -> subprocess.Popen[bytes]:
    """`attachstore serve --config CONFIG WHERE...`, its output to `out`, without this environment's
    ATTACHSTORE_ variables; with `nofile`, its RLIMIT_NOFILE (soft) is that."""
    argv = [sys.executable, "-m", "attachstore", "serve", "--config", str(config), *where]
    if nofile is not None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limit = f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {hard}))"
        argv = [sys.executable, "-c", f"{limit}; os.execv(sys.executable, {argv!r})"]
    return subprocess.Popen(
        argv,
        env={k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")},
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def launch(
    data_dir: Path, config: Path, log: Path, sections: dict[str, dict[str, Any]], nofile: int | None = None
) -> Daemon:
    """`attachstore serve` on a free loopback port with these config sections (one decode worker unless
    they say otherwise), its output to `log`; not yet waited for (wait_ready on its /healthz)."""
    sections.setdefault("admission", {}).setdefault("decode_workers", 1)
    write_config(config, data_dir, sections)
    port = free_port()
    with log.open("wb") as out:
        # One process: the bounds under test are each process's, and its RSS is read from /proc of this pid.
        proc = serve(config, out, "--listen", f"127.0.0.1:{port}", "--workers", "1", nofile=nofile)
    return Daemon(f"http://127.0.0.1:{port}", proc, data_dir, log, config)


def stop(daemons: Iterable[Daemon]) -> None:
    """SIGTERM to each daemon still running, then each waited for (killed after 30 s)."""
    running = [d for d in daemons if d.proc.poll() is None]
    for daemon in running:
        daemon.proc.send_signal(signal.SIGTERM)
    for daemon in running:
        try:
            daemon.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.proc.kill()
            daemon.proc.wait()


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Any]:
    """start_daemon(**sections) -> Daemon: `attachstore serve` on a free loopback port with these config
    sections (e.g. limits={"max_image_bytes": 400_000}), and with `nofile=N` its open-file limit N; stopped
    with SIGTERM at the end of the test."""
    started: list[Daemon] = []

    def start(*, nofile: int | None = None, **sections: dict[str, Any]) -> Daemon:
        n = len(started)
        paths = tmp_path / f"data{n}", tmp_path / f"config{n}.toml", tmp_path / f"daemon{n}.log"
        daemon = launch(*paths, sections, nofile)
        started.append(daemon)
        wait_ready(f"{daemon.url}/healthz", daemon.proc)
        return daemon

    yield start
    stop(started)
