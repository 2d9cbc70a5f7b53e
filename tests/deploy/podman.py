"""Podman for the deployment tests: the shipped Dockerfile, compose file and systemd units, started for real.

The tests run podman as root. Where the machine cannot run podman's defaults (cgroups v1 or a hybrid
hierarchy, which crun refuses; a hard limit on open files or processes below podman's own default, which the
runtime may not raise), they point podman at a configuration of their own (`CONTAINERS_CONF`): runc, and
limits within this machine's. No image registry need be reachable: the base image is made here from Debian's
packages with `mmdebstrap` and named by the Dockerfile's build argument `BASE`; the Dockerfile itself
keeps its usual base."""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.documented import documented as support_documented

ROOT = Path(__file__).resolve().parent.parent.parent
# ATTACHSTORE_DEPLOY_TESTS=require (as .ci/run sets it): a missing tool fails the tests instead of skipping.
REQUIRED = os.environ.get("ATTACHSTORE_DEPLOY_TESTS") == "require"
TOOLS = ("podman", "runc", "mmdebstrap")
SUITE = "bookworm"
# What the base holds: the Python the Dockerfile needs (3.11, with venv), what its health check and the
# docs' recipes call, and systemd, so that the same image can boot as a systemd machine.
PACKAGES = (
    "python3",
    "python3-venv",
    "ca-certificates",
    "curl",
    "openssl",
    "systemd",
    "systemd-sysv",
    "dbus",
)
# This machine's own certificate authorities: what lets pip inside a container reach the package index
# through the network it is on.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# The tests' own image store: the names the docs use (an image and a container `attachstore`, a volume
# `attachstore-data`) are never those of an operator's podman on the same machine. Kept between runs, so the
# base image is made once.
STORE = Path("/var/tmp/attachstore-tests/podman")
NAME = "attachstore"  # the image, container and volume names of the docs
BUILD = 900.0  # seconds: a guard against a hang while packages are fetched, never a measure
RUN = 120.0


def missing() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None] + ([] if os.geteuid() == 0 else ["root"])


def require_tools() -> None:
    """Skip (or, where required, fail) when this machine cannot run the deployment tests."""
    if lacking := missing():
        message = f"the deployment tests need {', '.join(lacking)}"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)


def _limit(kind: int, most: int) -> str:
    hard = resource.getrlimit(kind)[1]
    value = most if hard == resource.RLIM_INFINITY else min(most, hard)
    return f"{value}:{value}"


def configure(where: Path) -> dict[str, str]:
    """The environment podman runs in: its configuration files, written to `where`."""
    storage = where / "storage.conf"
    storage.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{STORE / "storage"}"\nrunroot = "{STORE / "run"}"\n'
    )
    conf = where / "containers.conf"
    nofile = _limit(resource.RLIMIT_NOFILE, 16384)
    nproc = _limit(resource.RLIMIT_NPROC, 16384)
    conf.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}", "nproc={nproc}"]\n[engine]\nruntime = "runc"\n'
    )
    return {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


class Podman:
    """`podman ARGS…` under the tests' configuration; a failure says what podman printed."""

    def __init__(self, where: Path) -> None:
        self.env = configure(where)

    def __call__(
        self, *args: str, check: bool = True, timeout: float = RUN, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=input is None,
            input=input,
            timeout=timeout,
            check=False,
        )
        if isinstance(done.stdout, bytes):  # text=False, for `input`
            done = subprocess.CompletedProcess(
                done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode()
            )
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done

    def exists(self, image: str) -> bool:
        return self("image", "exists", image, check=False).returncode == 0

    def base_image(self) -> str:
        """A Debian image made from Debian's packages, made once per package list and kept under that name."""
        hooks = [f'cp {CA_BUNDLE} "$1{CA_BUNDLE}"'] if CA_BUNDLE.exists() else []
        recipe = "\n".join([SUITE, *PACKAGES, *hooks])
        image = f"localhost/attachstore-test-base:{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
        if self.exists(image):
            return image
        made = subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                *(f"--customize-hook={hook}" for hook in hooks),
                SUITE,
                "-",
            ],
            capture_output=True,
            timeout=BUILD,
            check=False,
        )
        assert made.returncode == 0, made.stderr.decode(errors="replace")
        self("import", "-", image, input=made.stdout, timeout=BUILD)
        return image


def documented(name: str) -> str:
    """The block of docs/deployment.md marked `<!-- tests/deploy: NAME -->`: what the tests run is what the
    page says, as written."""
    return support_documented(ROOT / "docs" / "deployment.md", "tests/deploy", name)


def upload(image: bytes) -> tuple[bytes, str]:
    """A multipart admission of `image` as a user's upload: the body and its Content-Type."""
    boundary = "attachstore-test-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="source"\r\n\r\nuser\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="small.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    )
    return (
        head.encode() + image + f"\r\n--{boundary}--\r\n".encode(),
        f"multipart/form-data; boundary={boundary}",
    )


def image_bytes() -> bytes:
    """A small PNG for an admission through a deployed daemon."""
    from tests.support.images import png

    return png(64, 48, seed=33)


def commands(block: str) -> list[str]:
    """A shell block's commands, one a line once continuation lines are joined."""
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def shell(podman: Podman, script: str, cwd: Path, timeout: float = BUILD) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=podman.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout
