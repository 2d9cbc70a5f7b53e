"""Idle decode workers that die (killed by an operator, the OOM killer, a crash) before they are given a job:
the next admissions were handed to them and answered 422 INVALID_IMAGE, though their images were valid. A job
never delivered to a worker is given to a live one; only a worker that dies while it decodes the job makes
its image INVALID_IMAGE (test_decode_bombs.py)."""

from __future__ import annotations

import base64
import json
import os
import signal
from typing import Any

from tests.support import images
from tests.support.decoders import decode_workers, gone
from tests.support.waiting import until


def _admit(daemon: Any, *batch: bytes) -> tuple[int, Any]:
    body = {"source": "user", "images": [{"data": base64.b64encode(b).decode()} for b in batch]}
    return daemon.post("alice", "/v1/attachments", json.dumps(body).encode())  # type: ignore[no-any-return]


def test_idle_workers_killed_before_a_job_are_replaced_not_blamed_on_the_image(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_workers": 2})
    # Two images decoded together leave two idle workers.
    status, answer = _admit(daemon, images.png(400, 300, seed=1), images.png(400, 300, seed=2))
    assert status == 201, answer
    idle = decode_workers(daemon.proc.pid)
    assert len(idle) == 2, idle
    for pid in idle:
        os.kill(pid, signal.SIGKILL)
    until(lambda: all(gone(pid) for pid in idle), "the killed workers to exit")

    for seed in (3, 4):  # the next two admissions, one for each dead worker
        status, answer = _admit(daemon, images.png(64, 48, seed=seed))
        assert status == 201, answer
    assert daemon.metric("attachstore_decodes_total", result="crashed") == 0
    assert daemon.metric("attachstore_decodes_total", result="passed") == 4
    assert not set(idle) & set(decode_workers(daemon.proc.pid))
    daemon.assert_alice_is_served()
