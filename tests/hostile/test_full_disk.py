"""A full disk (a client that fills it, or anything else): /readyz must stop saying ready once one admission
would not fit, so that a load balancer sends admissions elsewhere instead of to a daemon that answers each
of them 507. The data dir is a small tmpfs of its own (this needs root; skipped otherwise)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attachstore.client import AttachstoreClientError, Client, Image
from tests.hostile.conftest import TOKENS
from tests.support.images import png

LIMITS = {"max_image_bytes": 300_000, "max_batch_bytes": 2_000_000}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/data0, the data dir of the first daemon started, on a tmpfs of 16 MiB."""
    where = tmp_path / "data0"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def ready(url: str) -> tuple[int, str | None]:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=30) as answer:
            return answer.status, None
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)["error"]["code"]


def fill(path: Path, leave: int) -> None:
    """Write `path` until the file system has no more than `leave` bytes free."""
    with path.open("ab") as f:
        while (room := os.statvfs(path).f_bavail * os.statvfs(path).f_frsize) > leave:
            try:
                f.write(os.urandom(min(1 << 20, room - leave)))
                f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                return


def test_a_full_disk_is_not_ready_and_reads_go_on(start_daemon: Any, small_disk: Path) -> None:
    daemon = start_daemon(limits=LIMITS)
    try:
        filler = small_disk / "filler"
        with (
            Client(daemon.url, token=TOKENS["alice"]) as alice,
            Client(daemon.url, token=TOKENS["mallory"]) as m,
        ):
            kept = png(40, 40, seed=1)
            [mine] = alice.admit(Image(kept), source="user").attachments
            assert ready(daemon.url) == (200, None)

            fill(filler, leave=1 << 20)  # room for a small admission, not for the largest batch
            assert ready(daemon.url) == (503, "STORAGE_UNAVAILABLE")
            assert m.admit(Image(png(8, 8, seed=2)), source="user").attachments

            fill(filler, leave=0)  # nothing left: every admission fails
            assert ready(daemon.url) == (503, "STORAGE_UNAVAILABLE")
            with pytest.raises(AttachstoreClientError) as refused:
                m.admit(Image(png(30, 30, seed=3)), source="user")
            assert (refused.value.status, refused.value.code) == (507, "STORAGE_FULL")
            assert alice.read(mine.ref) == kept  # reads need no room

            filler.unlink()
            assert ready(daemon.url) == (200, None)
            assert m.admit(Image(png(30, 30, seed=3)), source="user").attachments
        assert daemon.peak_rss() < 300 << 20
    finally:
        # Stopped here, not by the fixture: the tmpfs cannot go while the daemon has it open.
        with contextlib.suppress(ProcessLookupError):
            daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=30)
