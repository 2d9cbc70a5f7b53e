"""A large sparse file planted at an object's path (someone who can write the data dir): it takes no room on
the disk, yet a read that reads it whole before comparing its size with the row's holds its whole length in
memory, and more. Every read path looks at the file's size first (fstat) and refuses a file of another size
as damaged without reading it: the daemon's reads (the read lane, aiohttp, a render) and the audit, each
with its high-water mark of resident memory (VmHWM, or the audit process's ru_maxrss) against what the same
run reached before the file was planted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.http import object_path
from tests.support.images import png

SPARSE = 256 << 20
# What refusing the file may add to a process's peak resident memory: a small fraction of SPARSE (reading it
# whole added at least SPARSE).
BOUND = 32 << 20


def _plant_sparse(data_dir: Path, ref: str) -> None:
    """A file of SPARSE bytes, all of them a hole, in place of the object's."""
    target = object_path(data_dir, ref)
    planted = target.with_name(target.name + ".planted")
    with planted.open("wb") as f:
        f.truncate(SPARSE)
    assert planted.stat().st_blocks * 512 < SPARSE // 16, "the file system does not keep holes"
    os.replace(planted, target)


@pytest.mark.parametrize("how", ["GET lane", "GET aiohttp", "HEAD", "render"])
def test_a_sparse_file_at_an_object_path_is_refused_without_reading_it(start_daemon: Any, how: str) -> None:
    daemon = start_daemon(http={"read_lane": how != "GET aiohttp"})
    image = png(16, 16)
    ref = daemon.admit("alice", image)
    assert daemon.ask("alice", "GET", f"/v1/attachments/{ref}") == (200, image)
    before = daemon.peak_rss()

    _plant_sparse(daemon.data_dir, ref)
    if how == "render":
        message = {"role": "user", "content": [{"type": "image", "ref": ref}]}
        status, got = daemon.ask(
            "alice",
            "POST",
            "/v1/render",
            json.dumps({"provider": "anthropic", "messages": [message]}).encode(),
        )
        assert status == 200, got
        assert json.loads(got)["summary"]["unavailable"] == 1
    else:
        status, got = daemon.ask("alice", how.split()[0], f"/v1/attachments/{ref}")
        assert status == 500, got[:200]
        if how != "HEAD":
            assert json.loads(got)["error"]["code"] == "ATTACHMENT_CORRUPT"

    grown = daemon.peak_rss() - before
    assert grown < BOUND, f"the peak resident memory grew by {grown / (1 << 20):.0f} MiB"
    assert daemon.metric("attachstore_integrity_failures_total", kind="corrupt") == 1
    assert not object_path(daemon.data_dir, ref).exists()  # quarantined
    daemon.assert_alice_is_served()


def _audit(daemon: Any, *options: str) -> tuple[int, str, int]:
    """`attachstore audit` on the daemon's store: its exit code, output, and peak resident memory."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attachstore", "audit", "--config", str(daemon.config), *options],
        env={k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    with proc.stdout:
        output = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, output, usage.ru_maxrss * 1024  # the kernel reports kB


def test_the_audit_refuses_a_sparse_file_without_reading_it(start_daemon: Any) -> None:
    daemon = start_daemon()
    image = png(16, 16)
    ref = daemon.admit("alice", image)
    code, output, clean = _audit(daemon, "--json")
    assert code == 0, output

    _plant_sparse(daemon.data_dir, ref)
    code, output, peak = _audit(daemon, "--json", "--repair")
    assert code == 1, output
    [finding] = json.loads(output)["findings"]
    assert (finding["kind"], finding["ref"]) == ("corrupt", ref), finding
    assert finding["repair"] == "quarantined", finding
    grown = peak - clean
    assert grown < BOUND, f"the audit's peak resident memory grew by {grown / (1 << 20):.0f} MiB"
    assert not object_path(daemon.data_dir, ref).exists()
