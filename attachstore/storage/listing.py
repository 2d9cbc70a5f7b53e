"""Walking the local store's directories: the files under objects/ (with the ref each one's name and place
make, if any) and the staging files, for gc and the audit."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import AttachstoreError
from ..refs import ALGORITHMS, Ref


@dataclass(frozen=True, slots=True)
class StoredFile:
    path: Path
    ref: Ref | None
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class Listing:
    """Names as plain strings, not Paths: the audit reads a few hundred thousand of them. `irregular` names
    entries that are never objects, whatever their names (a symlink, a fifo)."""

    directory: str
    algorithm: str | None
    bucket: str
    names: list[str]
    irregular: frozenset[str]

    def path(self, name: str) -> str:
        return f"{self.directory}/{name}"

    def ref(self, name: str) -> Ref | None:
        if self.algorithm is None or not name.startswith(self.bucket):
            return None
        try:
            return Ref.parse(f"{self.algorithm}:{name}")
        except AttachstoreError:
            return None


def sorted_entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory / name for name in os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


_NONE: frozenset[str] = frozenset()


def listings(top: str) -> Iterator[Listing]:
    stack: list[tuple[str, tuple[str, ...]]] = [(top, ())]  # (directory, the names between top and it)
    while stack:
        directory, parents = stack.pop()
        names: list[str] = []
        subdirectories: list[str] = []
        irregular: list[str] = []
        try:
            with os.scandir(directory) as entries:
                # The kind of each entry comes with the listing (d_type): nothing is stat'ed.
                for entry in entries:
                    if entry.is_file(follow_symlinks=False):
                        names.append(entry.name)
                    elif entry.is_dir(follow_symlinks=False):
                        subdirectories.append(entry.name)
                    else:
                        names.append(entry.name)
                        irregular.append(entry.name)
        except OSError:
            continue
        if names:
            names.sort()
            algorithm, bucket = _bucket(parents)
            yield Listing(directory, algorithm, bucket, names, frozenset(irregular) if irregular else _NONE)
        subdirectories.sort(reverse=True)  # popped in name order
        stack.extend((f"{directory}/{name}", (*parents, name)) for name in subdirectories)


def _bucket(parents: tuple[str, ...]) -> tuple[str | None, str]:
    if len(parents) == 3 and parents[0] in ALGORITHMS and len(parents[1]) == len(parents[2]) == 2:
        return parents[0], parents[1] + parents[2]
    return None, ""


def stored(path: Path | str, ref: Ref | None) -> StoredFile:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return StoredFile(Path(path), ref, 0, 0.0)
    return StoredFile(Path(path), ref if stat.S_ISREG(st.st_mode) else None, st.st_size, st.st_mtime)
