"""The original of a repaired transcript, kept byte for byte where no host reads it as a transcript (a hidden
name that ends in neither .json nor .jsonl, beside it or in a directory given), and put back by --undo."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .files import fsync_dir, temp_name

SUFFIX = ".attachstore-original"
_BUFFER = 1 << 20


def backup_path(target: Path, directory: Path | None = None) -> Path:
    if directory is None:
        return target.with_name(f".{target.name}{SUFFIX}")
    digest = hashlib.sha256(os.fsencode(os.path.abspath(target))).hexdigest()[:16]
    return directory / f".{target.name}.{digest}{SUFFIX}"


def keep(source_fd: int, size: int, sha256: str, backup: Path) -> bool:
    """Copy the `size` bytes of `source_fd` to `backup`: a temporary file, fsynced, checked against `sha256`,
    renamed, the directory fsynced. An existing backup is an earlier repair's original and is kept (False)."""
    if backup.exists():
        return False
    backup.parent.mkdir(parents=True, exist_ok=True)
    staging = temp_name(backup)
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        h = hashlib.sha256()
        offset = 0
        while offset < size:
            chunk = os.pread(source_fd, min(_BUFFER, size - offset), offset)
            if not chunk:
                break
            h.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            offset += len(chunk)
        os.fsync(fd)
        if h.hexdigest() != sha256:
            raise OSError(f"the copy of the original at {backup} is not what was read")
        os.close(fd)
        fd = -1
        os.rename(staging, backup)
        fsync_dir(backup.parent)
        return True
    finally:
        if fd >= 0:
            os.close(fd)
        if staging.exists():
            staging.unlink()
