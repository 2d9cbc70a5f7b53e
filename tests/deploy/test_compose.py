"""deploy/compose.yaml run with podman-compose as docs/deployment.md says: the daemon up with its volume,
configuration and secret, healthy, an admission and a verified read, then down."""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.podman import REQUIRED, ROOT, Podman, commands, documented, image_bytes, shell, upload
from tests.support.daemon import free_port


@pytest.fixture(scope="module")
def compose(
    podman: Podman, image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, int]]:
    if shutil.which("podman-compose") is None:
        if REQUIRED:
            pytest.fail("the compose test needs podman-compose")
        pytest.skip("the compose test needs podman-compose")
    where = tmp_path_factory.mktemp("compose")
    port = free_port()
    podman.env["ATTACHSTORE_PORT"] = str(port)
    # The configuration and the key, as the container's steps make them; then the compose file beside them.
    steps = [c for c in commands(documented("container run")) if not c.startswith(("podman run -d", "curl"))]
    shell(podman, "\n".join(steps), where)
    shutil.copy(ROOT / "deploy" / "compose.yaml", where / "compose.yaml")
    try:
        shell(podman, documented("compose").replace(":8731/", f":{port}/"), where)
        yield where, port
    finally:
        shell(podman, "podman-compose down -v || true", where)
        del podman.env["ATTACHSTORE_PORT"]


def test_compose_serves_an_admission_and_a_verified_read(compose: tuple[Path, int]) -> None:
    where, port = compose
    token = (where / "alpha-token").read_text().strip()
    image = image_bytes()
    url = f"http://127.0.0.1:{port}/v1/attachments"
    body, content_type = upload(image)
    put = urllib.request.Request(
        url, data=body, headers={"Authorization": f"Bearer {token}", "Content-Type": content_type}
    )
    with urllib.request.urlopen(put, timeout=60) as answer:
        [stored] = json.loads(answer.read())["attachments"]
    assert stored["ref"] == f"sha256:{hashlib.sha256(image).hexdigest()}"
    get = urllib.request.Request(f"{url}/{stored['ref']}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(get, timeout=60) as answer:
        assert answer.read() == image
