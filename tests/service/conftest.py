"""What the tests of the store's nodes and policy share: a configuration of a few sections, and an index."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from attachstore.config import Config
from attachstore.index import SqliteIndex


def config(**sections: Any) -> Config:
    """A configuration of these sections (its data dir is never opened)."""
    return msgspec.convert({"data_dir": "/unused", **sections}, Config)


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[SqliteIndex]:
    """A new SQLite index under `tmp_path`, closed at the end of the test."""
    db = await SqliteIndex.open(tmp_path / "index.sqlite3")
    yield db
    await db.close()
