"""Reading a file the model named, inside the workspace roots and nowhere else: the checks, and the races
they close, are in docs/mcp.md, "Workspace roots"."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

MAX_PATH = 4096
_PROC_FD = Path("/proc/self/fd")


class Unreadable(Exception): ...


class TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


@dataclass(frozen=True, slots=True)
class Found:
    path: Path  # resolved, inside a root
    data: bytes


def directory(text: str) -> Path:
    path = Path(os.path.realpath(Path(text).expanduser()))
    if not path.is_dir():
        raise ValueError(f"{text}: not a directory")
    return path


def file_roots(uris: Sequence[str]) -> list[Path]:
    roots = []
    for uri in uris:
        parts = urlsplit(uri)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            continue
        path = Path(os.path.realpath(unquote(parts.path)))
        if path.is_dir() and path not in roots:
            roots.append(path)
    return roots


def shown(asked: str) -> str:
    return repr(asked if len(asked) <= 200 else asked[:200] + "…")


def read_inside(roots: Sequence[Path], asked: str, bound: int) -> Found:
    """The bytes of the regular file `asked` names (absolute, or relative to the first root where it exists),
    at most `bound` of them. Raises Unreadable or TooLarge."""
    if not asked or len(asked) > MAX_PATH or "\x00" in asked:
        raise Unreadable(f"{shown(asked)} is not a file path")
    where = " or ".join(str(r) for r in roots)
    given = Path(asked).expanduser()
    candidates = [given] if given.is_absolute() else [root / given for root in roots]
    inside = False
    for candidate in candidates:
        try:
            loose = Path(os.path.realpath(candidate))  # as far as it resolves; says nothing of what exists
        except OSError:  # a symlink swapped for a directory as it resolved (readlink: EINVAL): not found
            inside = True
            continue
        if not _within(loose, roots):
            continue
        inside = True
        try:
            real = Path(os.path.realpath(candidate, strict=True))
        except OSError:
            continue
        if _within(real, roots):
            try:
                return _read(real, asked, roots, bound)
            except _Gone:  # removed or swapped since it resolved: as if it had not been there
                continue
    if not inside:
        raise Unreadable(f"{shown(asked)} is outside the workspace; only files under {where} can be read")
    raise Unreadable(f"{shown(asked)} does not exist in the workspace ({where})")


def _within(path: Path, roots: Sequence[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _read(real: Path, asked: str, roots: Sequence[Path], bound: int) -> Found:
    try:
        before = os.stat(real)
    except OSError as e:
        raise _failed(asked, e) from None
    _regular(before, asked)
    if before.st_size > bound:
        raise TooLarge(before.st_size)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError as e:
        raise _failed(asked, e) from None
    try:
        opened = os.fstat(fd)
        _regular(opened, asked)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino) or not _fd_within(fd, roots):
            raise Unreadable(f"{shown(asked)} changed while it was opened; read it again")
        chunks, size = [], 0
        while size <= bound:
            chunk = os.read(fd, min(1 << 20, bound + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise _failed(asked, e) from None
    finally:
        os.close(fd)
    if size > bound:
        raise TooLarge(max(size, opened.st_size))
    return Found(real, b"".join(chunks))


def _regular(st: os.stat_result, asked: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise Unreadable(f"{shown(asked)} is a directory, not an image file")
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(
            f"{shown(asked)} is not a regular file (a pipe, socket or device), not an image file"
        )
    # A hard link is the same file under another name, and nothing says where its other names are: one
    # may be outside the workspace (docs/mcp.md, "Workspace roots").
    if st.st_nlink > 1:
        raise Unreadable(
            f"{shown(asked)} has other hard links, which may be outside the workspace; copy it into the "
            "workspace (cp, not ln or cp -l) to read it"
        )


class _Gone(Exception):
    """The file went away, or a directory on its path became something else, after its path resolved."""


def _failed(asked: str, e: OSError) -> Exception:
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return _Gone()
    if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink swapped in for the file
        return Unreadable(f"{shown(asked)} changed while it was opened; read it again")
    return Unreadable(f"cannot read {shown(asked)}: {e.strerror}")


def _fd_within(fd: int, roots: Sequence[Path]) -> bool:
    # From the kernel (Linux); elsewhere the inode check has to do.
    try:
        return _within(Path(os.readlink(_PROC_FD / str(fd))), roots)
    except OSError:
        return True
