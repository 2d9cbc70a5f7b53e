"""The shipped systemd units under real systemd (Debian 12's, 252), booted in a podman container and set up
with the steps of docs/deployment.md as written: the daemon starts under its unit's whole sandbox with the
default number of workers, serves an admission and a verified read, stops cleanly, and the gc timer's run
completes."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.podman import BUILD, ROOT, Podman, documented, image_bytes
from tests.support.waiting import until


class Machine:
    """A container booted with systemd as its PID 1."""

    def __init__(self, podman: Podman, name: str) -> None:
        self.podman = podman
        self.name = name

    def sh(self, script: str, *, check: bool = True, timeout: float = 120.0, **env: str) -> str:
        options = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
        done = self.podman(
            "exec",
            *options,
            self.name,
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script,
            check=False,
            timeout=timeout,
        )
        if check:
            assert done.returncode == 0, f"{script}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in properties))
        return dict(line.split("=", 1) for line in out.splitlines())

    def journal(self, unit: str) -> str:
        return self.sh(f"journalctl --no-pager -o cat -u {unit}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD,
    )
    assert built.returncode == 0, built.stderr
    [found] = dist.glob("attachstore-*.whl")
    return found


@pytest.fixture(scope="module")
def machine(podman: Podman, base_image: str, wheel: Path) -> Iterator[Machine]:
    name = f"attachstore-test-systemd-{secrets.token_hex(4)}"
    podman(
        "run",
        "-d",
        "--name",
        name,
        "--systemd=always",
        "-v",
        f"{wheel.parent}:/srv/dist:ro",
        base_image,
        "/sbin/init",
    )
    try:
        booted = Machine(podman, name)

        def up() -> bool:
            state = booted.sh("systemctl is-system-running || true").strip()
            return state in ("running", "degraded")

        until(up, "systemd to finish booting in the container")
        # A stand-in for the agent hosts' session logs that gc's --roots names in the shipped unit.
        booted.sh("install -d /var/lib/agent-host/sessions")
        booted.sh(documented("systemd install"), timeout=BUILD, ATTACHSTORE=f"/srv/dist/{wheel.name}")
        yield booted
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_the_daemon_serves_under_its_unit_with_a_worker_per_core(machine: Machine) -> None:
    state = machine.show("attachstore", "ActiveState", "NRestarts", "User", "MainPID")
    assert (state["ActiveState"], state["NRestarts"], state["User"]) == ("active", "0", "attachstore")
    assert json.loads(machine.sh("curl -s http://127.0.0.1:8731/readyz")) == {"status": "ready"}
    cores = int(machine.sh("nproc"))
    pid = state["MainPID"]
    workers = machine.sh(f"cat /proc/{pid}/task/{pid}/children").split()
    assert len(workers) == (cores if cores > 1 else 0)
    # The start-up probe of a system call outside the unit's filter did not kill it.
    assert "SYS" not in machine.journal("attachstore")


def test_an_admission_and_a_verified_read(machine: Machine, podman: Podman) -> None:
    image = image_bytes()
    done = podman(
        "exec",
        "-i",
        machine.name,
        "curl",
        "-s",
        "http://127.0.0.1:8731/v1/attachments",
        "-F",
        "source=user",
        "-F",
        "image=@-;filename=small.png",
        input=image,
    )
    [stored] = json.loads(done.stdout)["attachments"]
    read = podman(
        "exec",
        machine.name,
        "sh",
        "-c",
        f"curl -s -f http://127.0.0.1:8731/v1/attachments/{stored['ref']} | sha256sum",
    )
    assert read.stdout.split()[0] == hashlib.sha256(image).hexdigest() == stored["ref"].split(":")[1]


def test_the_gc_timer_is_set_and_its_run_completes(machine: Machine) -> None:
    timer = machine.show("attachstore-gc.timer", "ActiveState", "UnitFileState", "Triggers")
    assert timer == {
        "ActiveState": "active",
        "UnitFileState": "enabled",
        "Triggers": "attachstore-gc.service",
    }
    machine.sh("systemctl start attachstore-gc.service")  # what the timer starts; waits for a oneshot
    run = machine.show("attachstore-gc.service", "Result", "ExecMainStatus")
    assert run == {"Result": "success", "ExecMainStatus": "0"}, machine.journal("attachstore-gc.service")


def test_systemctl_stop_is_clean(machine: Machine) -> None:
    machine.sh("systemctl stop attachstore")
    stopped = machine.show("attachstore", "ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
    # ExecMainCode 1: exited (2 would be killed, as by the SIGKILL after TimeoutStopSec)
    assert stopped == {
        "ActiveState": "inactive",
        "Result": "success",
        "ExecMainCode": "1",
        "ExecMainStatus": "0",
    }
