"""The MCP server in memory: the SDK's own Client against `build(...)` on a Local backend in a temporary
data dir, with a workspace of test images."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from attachstore.mcp import Local, Options, Roots, build
from tests.conftest import MakeConfig
from tests.support.images import jpeg, png

ROUTES = {
    "vision": {"input_modalities": ["text", "image"]},
    "small": {"input_modalities": ["text", "image"], "max_request_side": 64},
    "text-only": {"input_modalities": ["text"]},
}

Connect = Callable[..., AbstractAsyncContextManager[Client]]


def shot_metadata(ws: Path) -> dict[str, Any]:
    """read_image's structuredContent for the workspace's shot.png, a 40x30 PNG."""
    shot = (ws / "shot.png").read_bytes()
    return {
        "ref": "sha256:" + hashlib.sha256(shot).hexdigest(),
        "media_type": "image/png",
        "bytes": len(shot),
        "width": 40,
        "height": 30,
        "path": str(ws / "shot.png"),
    }


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "shot.png").write_bytes(png(40, 30))
    (root / "photo.jpg").write_bytes(jpeg(300, 200))
    (root / "png-named.jpg").write_bytes(png(12, 10, seed=3))
    (root / "notes.txt").write_text("not an image\n")
    return root


@pytest.fixture
def connect(make_config: MakeConfig, ws: Path) -> Connect:
    """`async with connect(route=..., workspaces=[...], **client options) as client:`."""

    @asynccontextmanager
    async def open_(
        route: str | None = "vision",
        session: str = "mcp-test",
        workspaces: list[Path] | None = None,
        options: Options | None = None,
        env: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
        **client: Any,
    ) -> AsyncIterator[Client]:
        backend = Local(make_config(routes=ROUTES, **(config or {})), session, route)
        roots = Roots([ws] if workspaces is None else workspaces, cache=True, env=env or {})
        try:
            async with Client(build(backend, roots, options or Options()), **client) as c:
                yield c
        finally:
            await backend.close()

    return open_
