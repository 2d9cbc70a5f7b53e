from __future__ import annotations

import pytest

from tests.deploy.podman import NAME, ROOT, Podman, commands, documented, require_tools, shell


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    require_tools()
    return Podman(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="session")
def base_image(podman: Podman) -> str:
    return podman.base_image()


@pytest.fixture(scope="session")
def image(podman: Podman, base_image: str) -> str:
    """deploy/Dockerfile built as docs/deployment.md says, on the tests' base."""
    [build] = commands(documented("container build"))
    assert build.startswith("podman build ")
    shell(podman, build.replace("podman build ", f"podman build --build-arg BASE={base_image} ", 1), ROOT)
    return NAME
