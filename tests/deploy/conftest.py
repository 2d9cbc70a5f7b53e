from __future__ import annotations

import pytest

from tests.deploy.podman import Podman, require_tools


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    require_tools()
    return Podman(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="session")
def base_image(podman: Podman) -> str:
    return podman.base_image()
