"""Someone who can write the data dir and the index but does not hold the check key copies another object's
row (its keyed check, size, media type, dimensions, frames) onto a victim's row and puts the other object's
file at the victim's path. The keyed check binds the ref, the size and the media type it was made for, so
the copied check fits no row but its own: every read of the victim ref fails verification, as damaged bytes
do (`500 ATTACHMENT_CORRUPT`, counted, the file quarantined), and never answers the other bytes under the
victim's ref. Through the read lane (GET), aiohttp (HEAD; GET with the lane off) and a render; with the
planted file in the page cache (the reads on the loop, mapped reads, a render's batch read) and not (the
reads in a thread)."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.http import object_path
from tests.support.images import png

ROW = "media_type, bytes, width, height, frames, keyed_check"


def _read(daemon: Any, how: str, ref: str) -> tuple[int, bytes]:
    """The victim read as `how` says: its status, and what came back (for a render, its body)."""
    if how == "render":
        message = {"role": "user", "content": [{"type": "image", "ref": ref}]}
        body = json.dumps({"provider": "anthropic", "messages": [message]}).encode()
        return daemon.ask("alice", "POST", "/v1/render", body)
    return daemon.ask("alice", how.split()[0], f"/v1/attachments/{ref}")


def _copy_attack(data_dir: Path, victim: str, other: str, cold: bool) -> None:
    """The other object's row, check and all, onto the victim's row, and its file at the victim's path."""
    with sqlite3.connect(data_dir / "index.sqlite3", timeout=60) as db:
        [copied] = db.execute(f"SELECT {ROW} FROM objects WHERE ref = ?", (other,)).fetchall()
        assert copied[-1] is not None, "the other object's row has no keyed check to copy"
        columns = ", ".join(f"{c} = ?" for c in ROW.split(", "))
        db.execute(f"UPDATE objects SET {columns} WHERE ref = ?", (*copied, victim))
    target = object_path(data_dir, victim)
    planted = target.with_name(target.name + ".planted")
    planted.write_bytes(object_path(data_dir, other).read_bytes())
    os.replace(planted, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
        if cold:  # its clean pages out of the page cache: the read goes to a thread
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
@pytest.mark.parametrize("how", ["GET lane", "GET aiohttp", "HEAD", "render"])
def test_a_check_copied_from_another_row_does_not_serve_its_bytes_under_the_victims_ref(
    start_daemon: Any, how: str, cold: bool
) -> None:
    daemon = start_daemon(http={"read_lane": how != "GET aiohttp"})
    victim_image, other_image = png(16, 16), png(24, 20, seed=1)
    victim, other = daemon.admit("alice", victim_image), daemon.admit("alice", other_image)
    assert daemon.ask("alice", "GET", f"/v1/attachments/{victim}") == (200, victim_image)  # and remembered

    _copy_attack(daemon.data_dir, victim, other, cold)
    status, got = _read(daemon, how, victim)

    if how == "render":
        assert status == 200, got
        summary = json.loads(got)["summary"]
        assert (summary["included"], summary["unavailable"]) == (0, 1), summary
        assert base64.b64encode(other_image) not in got
    else:
        assert (status, other_image in got) == (500, False), got[:100]
        if how != "HEAD":
            assert json.loads(got)["error"]["code"] == "ATTACHMENT_CORRUPT", got
    assert daemon.metric("attachstore_integrity_failures_total", kind="corrupt") == 1
    # Quarantined, as damaged bytes are: moved out of the victim's path, and the row marked.
    assert not object_path(daemon.data_dir, victim).exists()
    assert [p.read_bytes() for p in (daemon.data_dir / "quarantine").iterdir()] == [other_image]
    status, got = daemon.ask("alice", "GET", f"/v1/attachments/{victim}")
    assert (status, json.loads(got)["error"]["code"]) == (500, "ATTACHMENT_CORRUPT")
    # The other object is untouched, and served.
    assert daemon.ask("alice", "GET", f"/v1/attachments/{other}") == (200, other_image)
    daemon.assert_alice_is_served()
