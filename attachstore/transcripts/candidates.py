"""Which files a run works on: a transcript named, or the transcripts of a sessions tree (`~/.codex/sessions`,
`~/.claude/projects`, `~/.gemini/tmp/*/chats`), less those a host may still be writing; and the session
that holds a stripped transcript's refs, named after its path."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .files import is_temp

SUFFIXES = (".jsonl", ".json")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def session_for(path: Path) -> str:
    """The session of the transcript kept at `path`: its name, and a hash of its absolute path so that equal
    names in other directories stay apart. Moved elsewhere, it needs --session to be found again."""
    absolute = Path(os.path.abspath(path))
    digest = hashlib.sha256(os.fsencode(absolute)).hexdigest()[:16]
    name = _UNSAFE.sub("-", absolute.name)[:80].strip(".") or "transcript"
    return f"transcript:{name}:{digest}"


@dataclass(frozen=True, slots=True)
class Candidate:
    path: Path
    skip: str | None = None  # why it is left alone
    detail: str | None = None
    size: int = 0


def candidates(
    root: Path, min_age: float, *, replacing: bool = True, now: float | None = None
) -> Iterator[Candidate]:
    """The transcripts under `root` (or `root` itself), in a stable order; each one a host may still write
    (modified less than `min_age` seconds ago), or that cannot be taken, comes with why it is skipped.
    `replacing`: the files are to be replaced (in place), which a hard-linked one cannot be."""
    now = time.time() if now is None else now
    if not root.is_dir():
        yield _candidate(root, min_age, now, replacing)
        return
    for directory, subdirectories, names in os.walk(root):  # symbolic links to directories are not followed
        subdirectories.sort()
        for name in sorted(names):
            path = Path(directory, name)
            if is_temp(path):
                continue
            if name.endswith(".jsonl.zst"):
                yield Candidate(
                    path,
                    "compressed",
                    "zstd-compressed (Codex compresses idle rollouts); decompress it with zstd -d --rm, "
                    "then strip the .jsonl",
                )
            elif name.endswith(SUFFIXES):
                yield _candidate(path, min_age, now, replacing)


def _candidate(path: Path, min_age: float, now: float, replacing: bool) -> Candidate:
    try:
        st = os.lstat(path)
    except OSError as e:
        return Candidate(path, "unreadable", e.strerror)
    if os.path.islink(path):
        return Candidate(path, "symlink", "a symbolic link: name the file it points to")
    if not os.path.isfile(path):
        return Candidate(path, "unreadable", "not a regular file")
    age = now - st.st_mtime
    if age < min_age:
        return Candidate(path, "recent", f"modified {age:.0f} s ago (--min-age {min_age:g} s)", st.st_size)
    if replacing and st.st_nlink > 1:
        return Candidate(
            path, "hardlinked", f"{st.st_nlink} hard links: replacing it would leave the others as they are"
        )
    return Candidate(path, size=st.st_size)
