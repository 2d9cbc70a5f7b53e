"""The tests' own podman: the base image it makes boots Python and systemd's tools."""

from __future__ import annotations

from tests.deploy.podman import Podman


def test_the_base_image_runs_python_3_11_with_venv(podman: Podman, base_image: str) -> None:
    ran = podman("run", "--rm", base_image, "python3", "-c", "import sys, venv; print(sys.version_info[:2])")
    assert ran.stdout.strip() == "(3, 11)"
