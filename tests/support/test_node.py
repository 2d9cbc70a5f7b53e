"""tests.support.node: without Node.js, the interop tests fail (or skip only when told to), and never hang."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import fixtures, node


@pytest.fixture
def no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """No node or npm on the PATH, and not root: nothing can be installed."""
    monkeypatch.setattr(node.shutil, "which", lambda name: None)
    monkeypatch.setattr(node.os, "geteuid", lambda: 1000)


def test_without_node_the_test_fails(no_node: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(fixtures.SKIP_VARIABLE, raising=False)
    with pytest.raises(
        pytest.fail.Exception, match=r"only root can install them: apt-get install .* nodejs npm"
    ):
        node.require(tmp_path)


def test_without_node_it_skips_only_when_told(
    no_node: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(fixtures.SKIP_VARIABLE, "1")
    with pytest.raises(pytest.skip.Exception):
        node.require(tmp_path)
