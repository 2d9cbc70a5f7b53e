"""deploy/Dockerfile built and run with podman as docs/deployment.md says, its commands read from the page:
no `--init`, the default workers, a token, the check key recipe as written, a named volume."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.podman import NAME, Podman, commands, documented, image_bytes, shell, upload
from tests.support.daemon import free_port


@dataclass
class Deployment:
    podman: Podman
    where: Path
    port: int
    run: str  # the documented `podman run -d …`, on the test's port

    @property
    def token(self) -> str:
        return (self.where / "alpha-token").read_text().strip()

    def request(self, path: str, data: bytes | None = None, **headers: str) -> tuple[int, bytes]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


@pytest.fixture(scope="module")
def deployment(podman: Podman, image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    where = tmp_path_factory.mktemp("deployment")
    port = free_port()
    block = documented("container run").replace("8731:8731", f"{port}:8731").replace(":8731/", f":{port}/")
    podman("rm", "-f", "-t", "0", NAME, check=False)  # what an earlier run that was killed left
    podman("volume", "rm", "-f", f"{NAME}-data", check=False)
    try:
        shell(podman, block, where)
        [run] = [c for c in commands(block) if c.startswith("podman run -d")]
        yield Deployment(podman, where, port, run)
    finally:
        podman("rm", "-f", "-t", "0", NAME, check=False)
        podman("volume", "rm", "-f", f"{NAME}-data", check=False)


def test_it_is_healthy_and_its_health_check_was_kept(deployment: Deployment) -> None:
    assert deployment.request("/healthz") == (200, b'{"status":"ok"}')
    assert deployment.podman("healthcheck", "run", NAME, check=False).returncode == 0
    inspected = json.loads(deployment.podman("image", "inspect", NAME).stdout)[0]
    assert inspected["Healthcheck"]["Test"][0] == "CMD"  # podman keeps it only in Docker's format


def test_every_process_runs_as_10001_and_serve_is_pid_1_with_a_worker_per_core(
    deployment: Deployment,
) -> None:
    ids = deployment.podman("exec", NAME, "sh", "-c", "id -u; id -g").stdout.split()
    assert ids == ["10001", "10001"]
    top = deployment.podman("top", NAME, "pid", "user", "group", "args").stdout.splitlines()[1:]
    rows = [[*line.split(None, 3)[:3], line.split(None, 3)[3].strip()] for line in top]
    assert {(user, group) for _, user, group, _ in rows} == {("attachstore", "attachstore")}
    [supervisor] = [args for pid, _, _, args in rows if pid == "1"]
    assert supervisor.endswith("attachstore serve")
    workers = [args for *_, args in rows if args.endswith("-m attachstore.server tcp")]
    assert len(workers) == (os.cpu_count() or 1)
    # Each serving process runs on uvloop, a dependency (docs/deployment.md, "uvloop").
    on_uvloop = deployment.podman("exec", NAME, "sh", "-c", "grep -l uvloop /proc/[0-9]*/maps || true").stdout
    assert len(on_uvloop.split()) >= max(len(workers), 1)


@pytest.mark.parametrize("token", [None, "ast_wrong"])
def test_a_request_without_the_token_is_refused(deployment: Deployment, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    status, body = deployment.request(f"/v1/attachments/sha256:{'0' * 64}/meta", **headers)
    assert (status, json.loads(body)["error"]["code"]) == (401, "UNAUTHORIZED")


def admit(deployment: Deployment, image: bytes) -> str:
    body, content_type = upload(image)
    status, answer = deployment.request(
        "/v1/attachments", body, Authorization=f"Bearer {deployment.token}", **{"Content-Type": content_type}
    )
    assert status == 201, answer
    [stored] = json.loads(answer)["attachments"]
    ref: str = stored["ref"]
    return ref


def test_an_admission_and_a_verified_read_then_a_clean_stop_and_a_restart_on_the_volume(
    deployment: Deployment,
) -> None:
    image = image_bytes()
    ref = admit(deployment, image)
    assert ref == f"sha256:{hashlib.sha256(image).hexdigest()}"
    auth = {"Authorization": f"Bearer {deployment.token}"}
    assert deployment.request(f"/v1/attachments/{ref}", **auth) == (200, image)

    deployment.podman("stop", NAME, timeout=120)  # --stop-timeout 45 from the run command
    state = json.loads(deployment.podman("inspect", NAME).stdout)[0]["State"]
    assert (state["Status"], state["ExitCode"]) == ("exited", 0)

    deployment.podman("rm", NAME)
    shell(deployment.podman, deployment.run, deployment.where)
    shell(
        deployment.podman,
        f"curl -s --retry 30 --retry-connrefused --retry-delay 1 http://127.0.0.1:{deployment.port}/healthz",
        deployment.where,
    )
    assert deployment.request(f"/v1/attachments/{ref}", **auth) == (200, image)
