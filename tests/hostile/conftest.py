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
import resource
import socket
import sys
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import daemon as support
from tests.support.images import png
from tests.support.waiting import until

TOKENS = {"mallory": "mallory-token", "alice": "alice-token"}


@dataclass
class Daemon(support.Daemon):
    """A daemon of these tests: one process serving the tenants, its data dir and configuration file."""

    data_dir: Path
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
        """The access log lines of `endpoint`, once there are `count` (the log is written a moment late)."""

        def found() -> list[dict[str, Any]]:
            lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
            return [x for x in lines if x.get("msg") == "request" and x.get("endpoint") == endpoint]

        until(lambda: len(found()) >= count, f"{count} access log lines of {endpoint} in {self.log}")
        return found()

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


def serve(config: Path, *where: str, nofile: int | None = None) -> list[str]:
    """The command `attachstore serve --config CONFIG WHERE...`; with `nofile`, its RLIMIT_NOFILE (soft) is
    that."""
    argv = [*support.SERVE, "--config", str(config), *where]
    if nofile is None:
        return argv
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {hard}))"
    return [sys.executable, "-c", f"{limit}; os.execv(sys.executable, {argv!r})"]


def launch(
    data_dir: Path, config: Path, log: Path, sections: dict[str, dict[str, Any]], nofile: int | None = None
) -> Daemon:
    """`attachstore serve` on a free loopback port with these config sections (one decode worker unless
    they say otherwise), its output to `log`; not yet waited for (wait_ready("/healthz"))."""
    sections.setdefault("admission", {}).setdefault("decode_workers", 1)
    write_config(config, data_dir, sections)
    port = support.free_port()
    # One process: the bounds under test are each process's, and its RSS is read from /proc of this pid.
    command = serve(config, "--listen", f"127.0.0.1:{port}", "--workers", "1", nofile=nofile)
    started = support.launch(command, log, f"http://127.0.0.1:{port}")
    return Daemon(started.proc, started.url, log, data_dir, config)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Any]:
    """start_daemon(**sections) -> Daemon: `attachstore serve` on a free loopback port with these config
    sections (e.g. limits={"max_image_bytes": 400_000}), and with `nofile=N` its open-file limit N; stopped
    with SIGTERM at the end of the test."""
    started: list[Daemon] = []

    def start(*, nofile: int | None = None, **sections: dict[str, Any]) -> Daemon:
        n = len(started)
        paths = tmp_path / f"data{n}", tmp_path / f"config{n}.toml", tmp_path / f"daemon{n}.log"
        launched = launch(*paths, sections, nofile)
        started.append(launched)
        launched.wait_ready("/healthz")
        return launched

    yield start
    support.stop(started)
