"""read_inside: only regular files under the workspace roots, symlinks resolved, nothing past the bound."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from attachstore.mcp import files
from attachstore.mcp.files import TooLarge, Unreadable, file_roots, read_inside
from tests.support.images import png

BOUND = 1 << 20


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "shot.png").write_bytes(png(8, 6))
    (root / "sub" / "deep.png").write_bytes(png(5, 5))
    (tmp_path / "secret.png").write_bytes(png(4, 4, seed=9))
    return root


def roots(*paths: Path) -> list[Path]:
    return [Path(os.path.realpath(p)) for p in paths]


def refused(root: list[Path], asked: str) -> str:
    with pytest.raises(Unreadable) as e:
        read_inside(root, asked, BOUND)
    return str(e.value)


def test_a_relative_and_an_absolute_path_inside_are_read(ws: Path) -> None:
    found = read_inside(roots(ws), "sub/deep.png", BOUND)
    assert (found.path, found.data) == (ws / "sub" / "deep.png", png(5, 5))
    assert read_inside(roots(ws), str(ws / "shot.png"), BOUND).data == png(8, 6)
    assert read_inside(roots(ws), "sub/../shot.png", BOUND).path == ws / "shot.png"


def test_dot_dot_and_absolute_paths_elsewhere_are_outside(ws: Path) -> None:
    for asked in ("../secret.png", "sub/../../secret.png", str(ws.parent / "secret.png"), "/etc/passwd"):
        assert "is outside the workspace; only files under" in refused(roots(ws), asked), asked
    # A missing file outside is refused the same way: the answer says nothing of what exists there.
    assert "outside the workspace" in refused(roots(ws), "../no-such-file.png")


def test_a_symlink_that_escapes_is_outside_one_that_stays_inside_is_followed(ws: Path) -> None:
    (ws / "escape.png").symlink_to(ws.parent / "secret.png")
    (ws / "outdir").symlink_to(ws.parent)
    (ws / "dangling.png").symlink_to(ws.parent / "gone.png")
    (ws / "inside.png").symlink_to(ws / "sub" / "deep.png")
    for asked in ("escape.png", "outdir/secret.png", "dangling.png"):
        assert "outside the workspace" in refused(roots(ws), asked), asked
    assert read_inside(roots(ws), "inside.png", BOUND).path == ws / "sub" / "deep.png"


def test_a_workspace_reached_through_a_symlink_is_the_directory_itself(tmp_path: Path, ws: Path) -> None:
    link = tmp_path / "link-to-ws"
    link.symlink_to(ws)
    assert read_inside(roots(link), "shot.png", BOUND).path == ws / "shot.png"
    assert read_inside(roots(link), str(link / "shot.png"), BOUND).data == png(8, 6)


def test_missing_files_directories_and_fifos_are_refused_without_blocking(ws: Path) -> None:
    assert "does not exist in the workspace" in refused(roots(ws), "nope.png")
    assert "is a directory" in refused(roots(ws), "sub")
    os.mkfifo(ws / "pipe.png")  # no writer: an open without O_NONBLOCK would wait forever
    assert "not a regular file" in refused(roots(ws), "pipe.png")
    (ws / "pipe-link.png").symlink_to(ws / "pipe.png")
    assert "not a regular file" in refused(roots(ws), "pipe-link.png")
    for asked in ("", "a\x00b", "x" * 5000):
        assert "is not a file path" in refused(roots(ws), asked)


def test_a_huge_file_is_refused_from_its_size_before_anything_is_read(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = ws / "huge.png"
    with open(huge, "wb") as f:
        f.truncate(1 << 40)  # a sparse terabyte
    opened: list[object] = []
    monkeypatch.setattr(files.os, "open", lambda *a, **k: opened.append(a) or -1)
    with pytest.raises(TooLarge) as e:
        read_inside(roots(ws), "huge.png", BOUND)
    assert e.value.size == 1 << 40
    assert opened == []


def test_a_file_that_grows_past_the_bound_is_read_no_further(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grows = ws / "grows.png"
    grows.write_bytes(b"\x89PNG")
    real_open = os.open

    def open_and_grow(path: object, flags: int, *rest: object) -> int:
        fd = real_open(path, flags, *rest)  # type: ignore[arg-type]
        with open(grows, "ab") as f:
            f.write(bytes(3 * BOUND))
        return fd

    reads: list[int] = []
    real_read = os.read
    monkeypatch.setattr(files.os, "open", open_and_grow)
    monkeypatch.setattr(files.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    with pytest.raises(TooLarge):
        read_inside(roots(ws), "grows.png", BOUND)
    assert sum(reads) <= BOUND + 1


def test_a_file_swapped_for_another_after_it_was_checked_is_refused(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A component swapped for a symlink out of the workspace between the check and the open."""
    real_open = os.open

    def swap_then_open(path: object, flags: int, *rest: object) -> int:
        (ws / "sub").rename(ws / "sub-before")
        (ws / "sub").symlink_to(tmp_path)
        (tmp_path / "deep.png").write_bytes(b"outside")
        return real_open(path, flags, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(files.os, "open", swap_then_open)
    assert "changed while it was opened" in refused(roots(ws), "sub/deep.png")


def test_a_relative_path_is_looked_up_in_each_root_in_turn(tmp_path: Path, ws: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "only-here.png").write_bytes(png(3, 3))
    found = read_inside(roots(ws, other), "only-here.png", BOUND)
    assert found.path == other / "only-here.png"
    assert f"({ws} or {other})" in refused(roots(ws, other), "nowhere.png")


def test_file_roots_keep_local_directories_only(tmp_path: Path, ws: Path) -> None:
    uris = [
        ws.as_uri(),
        ws.as_uri(),
        "https://example.com/x",
        (tmp_path / "missing").as_uri(),
        "file://host/x",
    ]
    assert file_roots(uris) == [ws]
    assert file_roots([(ws / "shot.png").as_uri()]) == []  # a file is not a root


@pytest.mark.parametrize("errno_", [errno.EINVAL, errno.ENOENT])
def test_a_symlink_swapped_away_as_it_resolves_is_not_found(
    ws: Path, monkeypatch: pytest.MonkeyPatch, errno_: int
) -> None:
    """realpath lstat()s a symlink, then readlink()s it: swapped for a directory (EINVAL) or removed
    (ENOENT) in between, readlink raises, and that is a race, answered "not found"."""
    os.symlink(ws / "sub", ws / "link")

    def swapped(path: object, *args: object, **kwargs: object) -> str:
        raise OSError(errno_, os.strerror(errno_), str(path))

    monkeypatch.setattr(os, "readlink", swapped)
    assert refused(roots(ws), "link/deep.png") == f"'link/deep.png' does not exist in the workspace ({ws})"


def test_a_file_removed_after_it_resolved_is_not_found(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def removed_first(path: object, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith("shot.png"):
            os.unlink(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(files.os, "open", removed_first)
    assert refused(roots(ws), "shot.png") == f"'shot.png' does not exist in the workspace ({ws})"


def test_a_file_with_other_hard_links_is_refused(tmp_path: Path, ws: Path) -> None:
    os.link(tmp_path / "secret.png", ws / "linked.png")
    assert refused(roots(ws), "linked.png") == (
        "'linked.png' has other hard links, which may be outside the workspace; copy it into the workspace "
        "(cp, not ln or cp -l) to read it"
    )
    os.unlink(tmp_path / "secret.png")  # its one name now is inside: it is read
    assert read_inside(roots(ws), "linked.png", BOUND).data == png(4, 4, seed=9)
